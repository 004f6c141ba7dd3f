// One AlphaFold2 training step (forward over recycling, every loss term, backward into every
// parameter) against OpenFold's fixture ../shared/af2/ref/train (fp32, fine-tuning weights):
//   - every loss term, unscaled_loss and loss within 1e-5 relative (losses.json);
//   - every gradient tensor within 1e-3 relative L2 (grads.npz), except the tensors whose true
//     gradient is zero (exact zeros in the fixture: the template stack, all templates masked; and the
//     three whose gradient is zero up to rounding: the feat_2d_norm offsets and the IPA attention_2d
//     bias shift every logit of a softmax row equally), whose error norm is compared against the
//     global gradient norm instead (≤ 1e-6 of it; the differences seen are ~2e-10 of it);
//   - the global gradient norm within 1e-4 relative.
// The fixture's float64 rerun moves terms by ≤ 4e-7 and gradient tensors by ≤ 1.2e-4 (README).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "data_pipeline/npy.h"
#include "models/alphafold/train_step.h"
#include "test_util.h"

namespace foldcore::af2 {
namespace {

constexpr double kTermTol = 1e-5, kGradTol = 1e-3, kNormTol = 1e-4, kZeroGradTol = 1e-6;

std::string train_dir() { return testing::shared_dir() + "/af2/ref/train"; }

double rel(double got, double want) { return std::abs(got - want) / std::max(std::abs(want), 1e-30); }

const TrainStepResult& step() {
  static const TrainStepResult r = [] {
    TrainStepOptions o;
    o.batch_path = train_dir() + "/batch.npz";
    o.params_path = testing::shared_dir() + "/af2/ref/params.npz";
    o.stage = "finetune";
    return run_train_step(o);
  }();
  return r;
}

nlohmann::json losses_json() {
  std::ifstream f(train_dir() + "/losses.json");
  std::stringstream s;
  s << f.rdbuf();
  return nlohmann::json::parse(s.str());
}

// The tensors whose true gradient is zero (README): the LN offsets feeding only softmax logits.
bool zero_by_symmetry(const std::string& key) {
  return key.find("feat_2d_norm//offset") != std::string::npos ||
         key.find("invariant_point_attention/attention_2d//bias") != std::string::npos;
}

TEST(Af2TrainStep, LossTermsMatchOpenFold) {
  const TrainStepResult& r = step();
  const nlohmann::json ref = losses_json();
  EXPECT_TRUE(r.loss.skipped.empty());
  const auto& terms = ref["terms"];
  for (const auto& [name, v] : terms.items()) {
    const double want = v.get<double>();
    const double got = name == "loss" ? r.loss.loss : name == "unscaled_loss" ? r.loss.unscaled_loss
                                                                               : r.loss.terms.at(name);
    std::printf("%-24s ours %.9g  openfold %.9g  rel %.2e\n", name.c_str(), got, want, rel(got, want));
    EXPECT_LE(rel(got, want), kTermTol) << name;
  }
  EXPECT_EQ(r.loss.terms.size() + 2, terms.size());
}

TEST(Af2TrainStep, GradientsMatchOpenFold) {
  const TrainStepResult& r = step();
  const data::NpzReader ref(train_dir() + "/grads.npz");
  ASSERT_EQ(r.grads.size(), ref.names().size());
  // Global norm of the reference.
  std::map<std::string, Tensor> want;
  double ref_sq = 0;
  for (const std::string& name : ref.names()) {
    want[name] = ref.read(name).to_tensor();
    for (float v : want[name].to_vector()) ref_sq += static_cast<double>(v) * v;
  }
  const double ref_norm = std::sqrt(ref_sq);
  struct Row {
    std::string key;
    double err;  // relative L2, or |g − ref| / global norm for the zero-gradient tensors
    bool zero;
    bool ok;
  };
  std::vector<Row> rows;
  for (const auto& [key, got] : r.grads) {
    ASSERT_TRUE(want.count(key)) << key;
    const Tensor& w = want[key];
    ASSERT_EQ(got.shape(), w.shape()) << key;
    const std::vector<float> a = got.to_vector(), b = w.to_vector();
    double diff = 0, norm = 0;
    for (size_t i = 0; i < a.size(); ++i) {
      diff += (static_cast<double>(a[i]) - b[i]) * (static_cast<double>(a[i]) - b[i]);
      norm += static_cast<double>(b[i]) * b[i];
    }
    diff = std::sqrt(diff);
    norm = std::sqrt(norm);
    const bool zero = norm == 0 || zero_by_symmetry(key);
    const double err = zero ? diff / ref_norm : diff / norm;
    rows.push_back({key, err, zero, err <= (zero ? kZeroGradTol : kGradTol)});
  }
  std::sort(rows.begin(), rows.end(), [](const Row& x, const Row& y) { return x.err > y.err; });
  int failed = 0, zeros = 0;
  for (const Row& row : rows) {
    failed += row.ok ? 0 : 1;
    zeros += row.zero ? 1 : 0;
  }
  std::printf("gradient tensors: %zu, failing: %d, zero-gradient tensors (vs global norm): %d\n", rows.size(), failed,
              zeros);
  int shown_rel = 0, shown_zero = 0;
  for (size_t i = 0; i < rows.size(); ++i)
    if (!rows[i].ok || (rows[i].zero ? shown_zero++ < 4 : shown_rel++ < 10))
      std::printf("  %s %.2e %s %s\n", rows[i].ok ? "ok  " : "FAIL", rows[i].err, rows[i].zero ? "(abs/global)" : "(rel L2)",
                  rows[i].key.c_str());
  EXPECT_EQ(failed, 0);
  std::printf("global gradient norm: ours %.9g  openfold %.9g  rel %.2e\n", r.grad_norm, ref_norm,
              rel(r.grad_norm, ref_norm));
  EXPECT_LE(rel(r.grad_norm, ref_norm), kNormTol);
}

}  // namespace
}  // namespace foldcore::af2
