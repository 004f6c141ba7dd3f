// DAP and BP of the AlphaFold2 model with CUDA tensors, under mpirun -np 2 (label "gpu"; on the host
// emulation "gpu-emu"): the multi-rank paths of dist/ on the device, through the communicator that
// runs wherever CUDA does, MPI staged through host copies (dist::make_staged_communicator; several
// ranks may share one GPU, as on a one-GPU machine where NCCL refuses a second rank). Every rank
// also predicts in one process on its device, and the DAP-2 (standard Evoformer) and BP-2
// (Parallel Evoformer) predictions must equal it. The tiny preset (configs/model/tiny.yaml) with
// seeded noise on every weight, a synthetic target of 21 residues (the padding path: 21 divides by
// no group size), one recycle. Tolerance as tests/dist/test_af2_model_parallel_mpi.cpp (fp32, same
// sums in other groupings: atol 1e-4 + rtol 1e-3, ~10x above the measured worst case there).
// The DAP-2 training step (forward over recycling, every loss, backward) with recomputation per
// block and every dropout on, on the training fixture batch: the overlapped gathers and switches,
// their duals in the backward and the recomputed segments' collectives, all on CUDA tensors =
// one process on the device (loss 1e-5 relative, gradients atol 1e-4·max|g| + rtol 1e-3, as the
// CPU test), with one template slot computed (its stack split by rows). Skips without a CUDA device or with one rank (and the training step without the shared
// fixtures).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <random>
#include <string>

#include "autograd/param_store.h"
#include "core/random.h"
#include "data_pipeline/formats/npy.h"
#include "af2_parallel_test_util.h"
#include "dist_test_util.h"
#include "models/alphafold/model/alphafold.h"
#include "models/alphafold/parallel/model_parallel_dist.h"
#include "models/alphafold/model/synthetic_target.h"
#include "models/alphafold/training/train_step.h"
#include "test_util.h"

namespace foldcore::af2 {
namespace {

using foldcore::testing::mpi_runtime;
using foldcore::testing::mpi_world;
using parallel_test::expect_same_outputs;
using parallel_test::Model;
#ifdef FOLDCORE_HAVE_DATA
using parallel_test::small_target;
#endif
using parallel_test::tiny;

#ifdef FOLDCORE_HAVE_DATA
// chunk > 0: chunked inference, which under DAP runs the triangle multiplications' broadcast ring.
// templates > 0: that many template slots computed (under DAP: the template stacks split by rows).
void check_predict(bool bp, int64_t chunk = 0, int64_t templates = 0) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  if (mpi_world().size() < 2) GTEST_SKIP() << "needs 2 ranks";
  const Device dev = mpi_runtime().device(DeviceType::cuda);
  const Af2Features features = small_target(templates);
  Af2Config config = tiny(/*parallel_evoformer=*/bp);
  config.chunk_size = chunk;
  Model ref(config, false, dev);
  const Af2Outputs want = ref.model.predict(features, 1, dev);

  auto& w = mpi_world();
  auto group = dist::make_staged_communicator(w.split(w.rank() / 2, w.rank(), bp ? "bp" : "dap"), dev);
  ASSERT_EQ(group->size(), 2);
  Model par(config, false, dev);
  par.model.set_model_parallel(bp ? make_model_parallel(nullptr, group.get()) : make_model_parallel(group.get(), nullptr));
  const Af2Outputs got = par.model.predict(features, 1, dev);

  expect_same_outputs(got, want, std::string(bp ? "BP-2" : "DAP-2") + " on " + dev.str());
}

TEST(Af2ModelParallelCuda, DapPredictEqualsOneProcess) { check_predict(false); }
TEST(Af2ModelParallelCuda, BpPredictEqualsOneProcess) { check_predict(true); }
TEST(Af2ModelParallelCuda, DapPredictChunkedWithTemplatesEqualsOneProcess) { check_predict(false, 4, 3); }

// Loss and the flat gradient (on the host) of one training step of `m` on the fixture batch.
// templates > 0: that many template slots, all computed (parallel_test::with_computed_templates).
std::pair<double, Tensor> train_step(parallel_test::Model& m, const std::string& batch_path, Device dev,
                                     int64_t templates = 0) {
  const Af2Features features = templates > 0 ? parallel_test::with_computed_templates(batch_path, templates, templates)
                                             : Af2Features::read_npz(batch_path);
  std::map<std::string, Tensor> last;
  const data::NpzReader npz(batch_path);
  for (const std::string& name : npz.names())
    last[name] = npz.read(name).to_tensor().select(-1, features.num_iterations() - 1).contiguous();
  Af2LossConfig lc;
  lc.weights = LossWeights::stage("finetune", true);
  Af2ParamTable table;
  m.model.add_af2_params(table);
  const TrainStepResult r = af2_train_step(m.model, m.params, table, {}, features, last, lc, dev);
  return {r.loss.loss, m.params.grads().to(Device::cpu()).clone()};
}

void check_train(int64_t templates) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  if (mpi_world().size() < 2) GTEST_SKIP() << "needs 2 ranks";
  const std::string batch = foldcore::testing::shared_dir() + "/af2/ref/train/batch.npz";
  if (!std::filesystem::exists(batch)) GTEST_SKIP() << "no " << batch;
  const Device dev = mpi_runtime().device(DeviceType::cuda);
  Af2Config config = tiny(false);
  config.recompute_blocks = 1;
  Model ref(config, true, dev);
  const auto [want_loss, want_grads] = train_step(ref, batch, dev, templates);
  if (templates > 0) {
    ASSERT_GT(parallel_test::template_grad_max(ref.model), 0);
  }

  auto& w = mpi_world();
  auto group = dist::make_staged_communicator(w.split(w.rank() / 2, w.rank(), "dap"), dev);
  Model par(config, true, dev);
  par.model.set_model_parallel(make_model_parallel(group.get(), nullptr));
  const auto [loss, grads] = train_step(par, batch, dev, templates);
  EXPECT_NEAR(loss, want_loss, 1e-5 * std::fabs(want_loss));
  double gmax = 0;
  for (float v : want_grads.to_vector()) gmax = std::max(gmax, static_cast<double>(std::fabs(v)));
  ASSERT_GT(gmax, 0);
  const auto r = foldcore::testing::all_close(grads, want_grads, 1e-4 * gmax, 1e-3);
  EXPECT_TRUE(r.ok) << r.message;
  if (w.rank() == 0)
    std::printf("  DAP-2 training step on %s, %lld templates: loss %.8g vs %.8g, grads max |diff| %.3g (max |g| %.3g)\n",
                dev.str().c_str(), static_cast<long long>(templates), loss, want_loss, r.max_abs, gmax);
}

// With one template slot, computed: the template stack and the pointwise attention split by rows
// as well (one slot: the emulation runs a training step's template stacks slowly).
TEST(Af2ModelParallelCuda, DapTrainStepWithRecomputeAndTemplateEqualsOneProcess) { check_train(1); }
#endif

}  // namespace
}  // namespace foldcore::af2
