// TrainingLoader delivering to a CUDA device: pinned host buffers, async copies on the loader's
// stream, and batches equal (bit for bit) to the CPU loader's for the same seed.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>

#include "core/pinned_memory.h"
#include "data_pipeline/training/loader.h"
#include "test_util.h"
#include "training_chain_test_util.h"

namespace fs = std::filesystem;
using namespace foldcore;
using namespace foldcore::data;

namespace {

FeatureDict sample(const TrainingChain& c, const SampleKey& k) {
  FeatureDict d;
  std::vector<float> head(c.all_atom_positions.begin(), c.all_atom_positions.begin() + 24);
  d.set("pos", NpyArray::from_f32(head, {8, 3}));
  d.set("idx", NpyArray::from_i32({static_cast<int32_t>(k.sample_index), static_cast<int32_t>(c.num_res())}, {2}));
  return d;
}

TEST(TrainingLoaderCuda, DeviceBatchesEqualHostBatches) {
  FC_REQUIRE_CUDA();
  if (!feature_store_supported()) GTEST_SKIP() << "built without HDF5";
  EXPECT_TRUE(PinnedBuffer(1024).pinned());
  const fs::path dir = fs::temp_directory_path() / ("fc_loader_cuda_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string path = (dir / "store.h5").string();
  {
    FeatureStoreWriter w(path);
    for (int i = 0; i < 12; ++i) {
      std::string name = "c";  // (not "c" + to_string: GCC 12 -Wrestrict false positive)
      name += std::to_string(i);
      w.add(synthetic_chain(name, 10 + i, 2, 0, static_cast<uint64_t>(i)));
    }
    w.finish();
  }
  FeatureStoreReader r(path);
  LoaderOptions o;
  o.batch_size = 3;
  o.seed = 9;
  TrainingLoader host(r, sample, o);
  o.device = Device::cuda(0);
  TrainingLoader dev(r, sample, o);
  const Stream compute = Stream::create(o.device);
  for (int b = 0; b < 10; ++b) {  // 2.5 epochs: buffers are reused from the pool
    const TrainingBatch h = host.next(), d = dev.next();
    d.wait(compute);  // the consumer's stream waits for the copy
    compute.synchronize();
    for (const auto& [name, t] : h.features) {
      EXPECT_TRUE(d.at(name).device().is_cuda());
      const Tensor back = d.at(name).to(Device::cpu());
      EXPECT_EQ(std::memcmp(back.data_ptr(), t.data_ptr(), t.nbytes()), 0) << name << " batch " << b;
    }
  }
}

}  // namespace
