// The training step away from the fixture's shapes: OpenFold's training batch cropped to another
// crop size (29), MSA depth (7) and extra-MSA depth (20), with two template slots of which one holds
// a real template (the example's own structure), so the template stack trains too.
//   1. The AF2 step (2 iterations, fine-tuning weights): every term and gradient finite, the
//      template stack's gradient non-zero.
//   2. The gradient against the loss itself, for a structure-module, an Evoformer and a template
//      tensor θ_k: L(θ + hĝ_k) − L(θ − hĝ_k) (ĝ_k = g_k/|g_k|) against its first-order prediction
//      Σ g·(θ⁺ − θ⁻) over the f32 steps actually taken. For this the gradient must be the exact
//      derivative of the loss: one recycling iteration (recycling is detached by design), the
//      rotations not detached, and no pLDDT/TM terms (their targets are binned from the prediction,
//      so a finite step across a bin edge jumps the loss). h·|g| = 0.1: a predicted change of 0.2
//      against fp32 rounding of L (|L| ~ 300) of ~1e-4 relative to it; the worst seen is 5.7e-4,
//      the tolerance 5e-3. (On the AF2 step itself — recycling and rotations detached — the same
//      check is off by 65% on the Evoformer tensor and 10× on the template one: it sees the paths
//      AF2's gradient leaves out.)
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "af2_train_compare.h"
#include "data_pipeline/formats/npy.h"
#include "models/alphafold/training/train_step.h"

namespace foldcore::af2 {
namespace {

namespace tc = train_compare;
namespace fs = std::filesystem;

constexpr int64_t kCropStart = 5, kCrop = 29, kMsa = 7, kExtra = 20, kTemplates = 2;

bool starts_with(const std::string& s, const std::string& p) { return s.rfind(p, 0) == 0; }

// The fixture batch cropped (every residue axis: the extent 48; MSA, extra-MSA and template rows
// on axis 0 of their arrays), template 0 filled with the example's own structure.
// iterations: how many recycling iterations to keep (the last ones).
std::vector<std::pair<std::string, data::NpyArray>> cropped_batch(int64_t iterations) {
  const data::NpzReader in(tc::train_dir() + "/batch.npz");
  std::map<std::string, Tensor> a;
  for (const std::string& name : in.names()) {
    Tensor t = tc::crop_fixture_array(name, in.read(name).to_tensor(), kCropStart, kCrop, kMsa);
    if (starts_with(name, "extra_")) t = t.narrow(0, 0, kExtra);
    if (starts_with(name, "template_")) t = t.narrow(0, 0, kTemplates);
    t = t.narrow(-1, t.size(-1) - iterations, iterations);
    a[name] = t.contiguous();
  }
  a["seq_length"].fill_(static_cast<double>(kCrop));
  // Template 0 = the true structure (every iteration), template 1 stays masked.
  tc::fill_template_with_truth(a);
  std::vector<std::pair<std::string, data::NpyArray>> out;
  for (const auto& [name, t] : a) out.emplace_back(name, data::NpyArray::from_tensor(t));
  return out;
}

struct Scratch {
  Scratch() : dir(fs::temp_directory_path() / ("fc_train_shapes_" + std::to_string(::getpid()))) {
    fs::create_directories(dir);
  }
  ~Scratch() { fs::remove_all(dir); }
  fs::path dir;
};

TrainStepOptions options(const std::string& batch, const std::string& params, bool smooth = false) {
  TrainStepOptions o;
  o.batch_path = batch;
  o.params_path = params;
  o.stage = "finetune";
  if (smooth) {
    o.stop_rotation_gradient = false;
    // The terms whose targets do not move with the prediction: pLDDT (binned lDDT of the predicted
    // atoms) and TM (binned errors of the predicted frames) are piecewise constant in their targets,
    // so a finite step across a bin edge jumps the loss.
    LossWeights w = LossWeights::finetune(true);
    w.plddt = 0;
    w.tm = 0;
    o.weights = w;
  }
  return o;
}

TEST(Af2TrainStepShapes, OtherCropDepthAndTemplates) {
  Scratch s;
  const std::string batch = (s.dir / "batch.npz").string();
  data::write_npz(batch, cropped_batch(2));
  const TrainStepResult r = run_train_step(options(batch, tc::params_path()));
  EXPECT_TRUE(r.loss.skipped.empty());
  for (const auto& [name, v] : r.loss.terms) {
    std::printf("%-24s %.6g\n", name.c_str(), v);
    EXPECT_TRUE(std::isfinite(v) && v > 0) << name;
  }
  EXPECT_NEAR(r.loss.scale, std::sqrt(static_cast<double>(kCrop)), 1e-9);
  double template_sq = 0;
  std::map<std::string, Tensor> grads;
  for (const auto& [key, g] : r.grads) {
    grads[key] = g;
    for (float v : g.to_vector()) {
      ASSERT_TRUE(std::isfinite(v)) << key;
      if (key.find("template_pair_stack") != std::string::npos) template_sq += static_cast<double>(v) * v;
    }
  }
  std::printf("template pair stack gradient norm %.4g, global %.4g\n", std::sqrt(template_sq), r.grad_norm);
  EXPECT_GT(std::sqrt(template_sq), 1e-6 * r.grad_norm);

  // The gradient against the loss, along ĝ_k for a structure-module, an Evoformer and a template tensor.
  // One iteration (recycling is detached, so with two the loss depends on θ through iteration 0
  // where the gradient, by AF2's design, does not), the rotations not detached.
  const std::string batch1 = (s.dir / "batch1.npz").string();
  data::write_npz(batch1, cropped_batch(1));
  const TrainStepResult smooth = run_train_step(options(batch1, tc::params_path(), true));
  grads.clear();
  for (const auto& [key, g] : smooth.grads) grads[key] = g;
  const data::NpzReader params(tc::params_path());
  for (const std::string key : {"structure_module/fold_iteration/affine_update//weights",
                                "evoformer/evoformer_iteration/triangle_multiplication_outgoing/left_projection//weights",
                                "evoformer/template_embedding/single_template_embedding/template_pair_stack/"
                                "__layer_stack_no_state/pair_transition/transition1//weights"}) {
    const std::string full = kAf2Prefix + key;
    const Tensor g = grads.at(full);
    const Tensor theta = params.read(full).to_tensor();
    double gnorm = 0;
    for (float v : g.to_vector()) gnorm += static_cast<double>(v) * v;
    gnorm = std::sqrt(gnorm);
    ASSERT_GT(gnorm, 0) << key;
    const double h = 0.1 / gnorm;  // predicted change of L: 2·h·|g| = 0.2
    double loss[2] = {0, 0}, predicted = 0;
    Tensor moved[2];
    for (int sgn = 0; sgn < 2; ++sgn) {
      moved[sgn] = theta.clone();
      float* p = moved[sgn].data<float>();
      const float* gp = g.data<float>();
      for (int64_t i = 0; i < theta.numel(); ++i) p[i] += static_cast<float>((sgn == 0 ? h : -h) * gp[i] / gnorm);
      std::vector<std::pair<std::string, data::NpyArray>> arrays;
      for (const std::string& name : params.names())
        arrays.emplace_back(name, name == full ? data::NpyArray::from_tensor(moved[sgn]) : params.read(name));
      const std::string path = (s.dir / "params_moved.npz").string();
      data::write_npz(path, arrays);
      loss[sgn] = run_train_step(options(batch1, path, true)).loss.loss;
    }
    for (int64_t i = 0; i < theta.numel(); ++i)
      predicted += static_cast<double>(g.data<float>()[i]) *
                   (static_cast<double>(moved[0].data<float>()[i]) - moved[1].data<float>()[i]);
    const double fd = loss[0] - loss[1];
    std::printf("%s: L(+) − L(−) = %.6g, predicted %.6g, rel %.2e\n", key.c_str(), fd, predicted,
                tc::rel(fd, predicted));
    EXPECT_LE(tc::rel(fd, predicted), 5e-3) << key;
  }
}

}  // namespace
}  // namespace foldcore::af2
