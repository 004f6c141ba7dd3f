// Where a CUDA training step makes the host wait for the device (core/host_waits.h). The
// Evoformer, extra-MSA and template stacks — 48 + 4 + 2 blocks of the real model, run in the
// forward, again in each recomputed segment of the backward, and in every recycling iteration —
// must not wait per block: one wait per block would drain the device's queue 100+ times per pass,
// and the device would then idle for the launch latency of every kernel that follows. The step's
// other waits (the features' preparation on the host once per pass, the structure module's host
// steps, the outputs to the host for the losses) do not grow with the depth.
//
// The tiny preset (every module present: templates, extra MSA, pTM head; dropout on; one block
// per recomputation segment) with 1 and with 3 blocks in each stack, on OpenFold's training
// fixture cropped to 24 residues with template 0 filled (so the template stack runs), its two
// recycling iterations, fp32 and bf16: the same waits per step, and none inside the stacks'
// modules. The second of two steps is counted (the first pays for first uses), by profile stage
// (FOLDCORE_PROFILE=1: the stages' own waits at their borders are not counted, core/profile.h).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>

#include "af2_train_compare.h"
#include "autograd/param_store.h"
#include "core/host_waits.h"
#include "core/profile.h"
#include "data_pipeline/formats/npy.h"
#include "models/alphafold/model/alphafold.h"
#include "models/alphafold/model/features.h"
#include "models/alphafold/params/af2_export.h"
#include "models/alphafold/training/train_step.h"

namespace foldcore::af2 {
namespace {

namespace tc = train_compare;

using Batch = tc::CroppedBatch;

Batch make_batch() { return tc::cropped_batch(5, 24, 8, 8, 2); }

// A module stage of the stacks: the Evoformer's and the extra-MSA stack's modules in the forward
// ("forward/trunk/evoformer/msa_row_attention") and every op inside the backward's recomputed
// segments. (The template stack's stage also holds the templates' feature preparation, once per
// pass; the extra MSA's is on the device and waits nowhere.)
bool stack_module_stage(const std::string& path) {
  return path.find("/evoformer/") != std::string::npos || path.find("/extra_msa/") != std::string::npos ||
         path.find("recompute") != std::string::npos;
}

// The structure module's geometry ops (kernels/rigid.h), as autograd nodes in the backward
// ("backward/pre_compose"): they run on the device and never wait.
bool geometry_backward_stage(const std::string& path) {
  for (const char* op : {"pre_compose", "quat_to_rot", "torsion_angles_to_frames", "frames_to_atom14_positions",
                         "softplus", "norm_last", "l2_normalize_last"})
    if (path == std::string("backward/") + op) return true;
  return false;
}

// A structure-module forward waits at most this often, whatever its number of layers: its
// residue types and mask read on the host once, every layer's outputs to the host in one copy,
// the atom37 map and mask (2 layers in the tiny preset used to wait 68 times: 32 per layer).
constexpr int64_t kStructureModuleWaits = 5;

// The waits of the second of two training steps of the tiny preset with `blocks` Evoformer,
// extra-MSA and template pair blocks, printed by stage.
HostWaits step_waits(DType precision, int64_t blocks) {
  const Device device = Device::cuda();
  Af2Config config = tiny_af2_config();
  config.recompute_blocks = 1;
  config.num_evoformer_blocks = blocks;
  config.num_extra_msa_blocks = blocks;
  config.templates.num_pair_blocks = blocks;
  static const Batch b = make_batch();
  EXPECT_EQ(b.features.num_iterations(), 2);
  autograd::ParamStore params(device);
  Generator init_rng(3), dropout_rng(5);
  AlphaFold model(nn::Scope{&params, &init_rng, &dropout_rng, ""}, config);
  model.train(true);
  params.finalize();
  Af2ParamTable table;
  model.add_af2_params(table);
  const auto shapes = af2_official_shapes(table, config);
  Af2LossConfig loss_config;
  loss_config.weights = LossWeights::stage("initial", config.heads.ptm);
  const auto step = [&] {
    return af2_train_step(model, params, table, shapes, b.features, b.last_slice, loss_config, device, precision,
                          /*report_grads=*/false);
  };
  (void)step();
  profile::reset();
  reset_host_waits();
  const TrainStepResult r = step();
  const HostWaits all = host_waits();
  EXPECT_TRUE(std::isfinite(r.loss.loss));
  std::printf("%lld blocks, %s: %lld waits (%lld copies to the host, %lld synchronous copies to the device, %lld "
              "synchronizes), %lld staged copies to the device, %lld launches\n",
              static_cast<long long>(blocks), std::string(dtype_name(precision)).c_str(), static_cast<long long>(all.waits()),
              static_cast<long long>(all.copies_to_host), static_cast<long long>(all.sync_copies_to_device),
              static_cast<long long>(all.synchronizes), static_cast<long long>(all.staged_copies_to_device),
              static_cast<long long>(all.launches));
  int64_t module_stages = 0, in_steps = 0, launches_in_steps = 0, structure_stages = 0, geometry_stages = 0,
          extra_msa_stages = 0;
  for (const profile::Stage& s : profile::report()) {
    if (s.waits.waits() > 0)
      std::printf("  %-44s %2lld runs: %3lld to the host (%lld bytes), %lld synchronous to the device, %lld "
                  "synchronizes\n",
                  s.path.c_str(), static_cast<long long>(s.count), static_cast<long long>(s.waits.copies_to_host),
                  static_cast<long long>(s.waits.bytes_to_host), static_cast<long long>(s.waits.sync_copies_to_device),
                  static_cast<long long>(s.waits.synchronizes));
    if (stack_module_stage(s.path)) {
      ++module_stages;
      EXPECT_EQ(s.waits.waits(), 0) << s.path;
    }
    const std::string sm = "/structure_module";
    if (s.path.size() >= sm.size() && s.path.compare(s.path.size() - sm.size(), sm.size(), sm) == 0) {
      ++structure_stages;
      EXPECT_LE(s.waits.waits(), kStructureModuleWaits * s.count) << s.path;
    }
    // The extra MSA's one-hot features are built on the device (ops::extra_msa_features): the
    // stack's stage waits nowhere, its features' preparation included (it copied the classes and
    // deletions to the host and a [E, N, 25] array back, in every recycling iteration).
    if (s.path == "forward/trunk/extra_msa") {
      ++extra_msa_stages;
      EXPECT_EQ(s.waits.waits(), 0) << s.path;
    }
    if (geometry_backward_stage(s.path)) {
      ++geometry_stages;
      EXPECT_EQ(s.waits.waits(), 0) << s.path;
    }
    if (s.path == "forward" || s.path == "loss" || s.path == "backward") {
      in_steps += s.waits.waits();
      launches_in_steps += s.waits.launches;
    }
    // The launches of the forward's Evoformer modules (the work a block issues, per module).
    if (s.path.rfind("forward/trunk/evoformer/", 0) == 0)
      std::printf("  %-44s %2lld runs: %4lld launches\n", s.path.c_str(), static_cast<long long>(s.count),
                  static_cast<long long>(s.waits.launches));
  }
  EXPECT_GT(module_stages, 10);  // the stacks' module stages were seen (forward and recomputed)
  EXPECT_GE(structure_stages, 1);
  EXPECT_GE(geometry_stages, 4);
  EXPECT_EQ(extra_msa_stages, 1);
  EXPECT_EQ(in_steps, all.waits());  // every wait is inside one of the step's three stages
  // The few launches after the backward's stage (the gradients' norm) do not depend on the depth.
  EXPECT_LE(all.launches - launches_in_steps, 8);
  return all;
}

// Three times the blocks, the same waits: none is made per block.
void expect_no_wait_per_block(DType precision) {
  FC_REQUIRE_CUDA();
  const profile::EnabledGuard profiling;
  ASSERT_TRUE(profile::enabled());
  const HostWaits one = step_waits(precision, 1), three = step_waits(precision, 3);
  EXPECT_EQ(three.copies_to_host, one.copies_to_host);
  EXPECT_EQ(three.sync_copies_to_device, one.sync_copies_to_device);
  EXPECT_EQ(three.synchronizes, one.synchronizes);
  EXPECT_EQ(three.staged_copies_to_device, one.staged_copies_to_device);
  // The launches do grow with the depth: what one more block of each stack issues in a step.
  EXPECT_GT(three.launches, one.launches);
  std::printf("launches per block of each stack, per step: %lld\n",
              static_cast<long long>((three.launches - one.launches) / 2));
}

TEST(Af2HostWaitsCuda, NoWaitPerBlockFp32) { expect_no_wait_per_block(DType::f32); }
TEST(Af2HostWaitsCuda, NoWaitPerBlockBf16) { expect_no_wait_per_block(DType::bf16); }

}  // namespace
}  // namespace foldcore::af2
