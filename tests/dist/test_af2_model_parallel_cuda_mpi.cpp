// DAP and BP of the AlphaFold2 model with CUDA tensors, under mpirun -np 2 (label "gpu"; on the host
// emulation "gpu-emu"): the multi-rank paths of dist/ on the device, through the communicator that
// runs wherever CUDA does, MPI staged through host copies (dist::make_staged_communicator; several
// ranks may share one GPU, as on a one-GPU machine where NCCL refuses a second rank). Every rank
// also predicts in one process on its device, and the DAP-2 (standard Evoformer) and BP-2
// (Parallel Evoformer) predictions must equal it. The tiny preset (configs/model/tiny.yaml) with
// seeded noise on every weight, a synthetic target of 21 residues (the padding path: 21 divides by
// no group size), one recycle. Tolerance as tests/dist/test_af2_model_parallel_mpi.cpp (fp32, same
// sums in other groupings: atol 1e-4 + rtol 1e-3, ~10x above the measured worst case there).
// Skips without a CUDA device or with one rank.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <random>
#include <string>

#include "autograd/param_store.h"
#include "core/random.h"
#include "af2_parallel_test_util.h"
#include "dist_test_util.h"
#include "models/alphafold/alphafold.h"
#include "models/alphafold/model_parallel_dist.h"
#include "models/alphafold/synthetic_target.h"
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
void check_predict(bool bp) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  if (mpi_world().size() < 2) GTEST_SKIP() << "needs 2 ranks";
  const Device dev = mpi_runtime().device(DeviceType::cuda);
  const Af2Features features = small_target();
  const Af2Config config = tiny(/*parallel_evoformer=*/bp);
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
#endif

}  // namespace
}  // namespace foldcore::af2
