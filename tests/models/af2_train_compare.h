// A training step's loss terms and gradients against OpenFold's fixture ../shared/af2/ref/train
// (losses.json, grads.npz), with the acceptance tolerances of issue 9, shared by the library test
// (test_af2_train_step) and the program test (tests/apps/test_train_step):
//   - every loss term, unscaled_loss and loss within 1e-5 relative;
//   - every gradient tensor within 1e-3 relative L2, except those whose true gradient is zero (exact
//     zeros in the fixture: the template stack, all templates masked; and, zero up to rounding, the
//     feat_2d_norm offsets and the IPA attention_2d bias, which shift every logit of a softmax row
//     equally): their error norm is compared against the global gradient norm (≤ 1e-6 of it);
//   - the global gradient norm within 1e-4 relative.
// The fixture's float64 rerun moves terms by ≤ 4e-7 and gradient tensors by ≤ 1.2e-4 (its README).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "autograd/functions.h"
#include "core/tensor.h"
#include "data_pipeline/formats/npy.h"
#include "models/alphafold/model/features.h"
#include "test_util.h"

namespace foldcore::af2::train_compare {

constexpr double kTermTol = 1e-5, kGradTol = 1e-3, kNormTol = 1e-4, kZeroGradTol = 1e-6;

inline std::string train_dir() { return testing::shared_dir() + "/af2/ref/train"; }
inline std::string params_path() { return testing::shared_dir() + "/af2/ref/params.npz"; }

inline double rel(double got, double want) { return std::abs(got - want) / std::max(std::abs(want), 1e-30); }

inline nlohmann::json read_json(const std::string& path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return nlohmann::json::parse(s.str());
}

// The tensors whose true gradient is zero by symmetry (the fixture README).
inline bool zero_by_symmetry(const std::string& key) {
  return key.find("feat_2d_norm//offset") != std::string::npos ||
         key.find("invariant_point_attention/attention_2d//bias") != std::string::npos;
}

// `terms`: name → value for every term of losses.json's "terms" (unscaled_loss and loss included).
// Prints a line per term; returns how many are outside kTermTol (a missing one counts).
inline int compare_terms(const std::map<std::string, double>& terms) {
  const nlohmann::json ref = read_json(train_dir() + "/losses.json");
  int failed = 0;
  for (const auto& [name, v] : ref["terms"].items()) {
    const double want = v.get<double>();
    const auto it = terms.find(name);
    if (it == terms.end()) {
      std::printf("%-24s MISSING\n", name.c_str());
      ++failed;
      continue;
    }
    std::printf("%-24s ours %.9g  openfold %.9g  rel %.2e\n", name.c_str(), it->second, want, rel(it->second, want));
    failed += rel(it->second, want) <= kTermTol ? 0 : 1;
  }
  failed += terms.size() == ref["terms"].size() ? 0 : 1;  // no extra names either
  return failed;
}

struct GradComparison {
  int failed = 0;       // tensors outside tolerance, missing, extra or misshaped
  double ours_norm = 0, ref_norm = 0;
};

// Every gradient tensor against a reference set (`ref_name` in the printout: grads.npz below, or
// another run of ours, e.g. the CPU against CUDA); prints the worst rows (and every failing one).
inline GradComparison compare_grads(const std::map<std::string, Tensor>& ours,
                                    const std::map<std::string, Tensor>& reference, const char* ref_name) {
  GradComparison c;
  struct Row {
    std::string key;
    double err;  // relative L2, or |g − ref| / global norm for the zero-gradient tensors
    bool zero, ok;
  };
  std::vector<Row> rows;
  std::map<std::string, std::pair<double, double>> diff_norm;  // key → (|g − ref|, |ref|)
  double ours_sq = 0, ref_sq = 0;
  for (const auto& [key, want] : reference) {
    const auto it = ours.find(key);
    if (it == ours.end() || it->second.shape() != want.shape()) {
      std::printf("  FAIL %s: %s\n", key.c_str(), it == ours.end() ? "missing" : "shape differs");
      ++c.failed;
      continue;
    }
    const std::vector<float> a = it->second.to_vector(), b = want.to_vector();
    double d = 0, n = 0;
    for (size_t i = 0; i < a.size(); ++i) {
      d += (static_cast<double>(a[i]) - b[i]) * (static_cast<double>(a[i]) - b[i]);
      n += static_cast<double>(b[i]) * b[i];
      ours_sq += static_cast<double>(a[i]) * a[i];
    }
    ref_sq += n;
    diff_norm[key] = {std::sqrt(d), std::sqrt(n)};
  }
  if (ours.size() != reference.size()) {
    std::printf("  FAIL %zu gradient tensors, %s has %zu\n", ours.size(), ref_name, reference.size());
    ++c.failed;
  }
  c.ours_norm = std::sqrt(ours_sq);
  c.ref_norm = std::sqrt(ref_sq);
  for (const auto& [key, dn] : diff_norm) {
    const bool zero = dn.second == 0 || zero_by_symmetry(key);
    const double err = zero ? dn.first / c.ref_norm : dn.first / dn.second;
    rows.push_back({key, err, zero, err <= (zero ? kZeroGradTol : kGradTol)});
  }
  std::sort(rows.begin(), rows.end(), [](const Row& x, const Row& y) { return x.err > y.err; });
  int zeros = 0, failing = 0;
  for (const Row& row : rows) {
    zeros += row.zero ? 1 : 0;
    failing += row.ok ? 0 : 1;
  }
  c.failed += failing;
  std::printf("gradient tensors: %zu, failing: %d, zero-gradient tensors (vs global norm): %d\n", rows.size(),
              failing, zeros);
  int shown_rel = 0, shown_zero = 0;
  for (const Row& row : rows)
    if (!row.ok || (row.zero ? shown_zero++ < 4 : shown_rel++ < 10))
      std::printf("  %s %.2e %s %s\n", row.ok ? "ok  " : "FAIL", row.err, row.zero ? "(abs/global)" : "(rel L2)",
                  row.key.c_str());
  std::printf("global gradient norm: ours %.9g  %s %.9g  rel %.2e\n", c.ours_norm, ref_name, c.ref_norm,
              rel(c.ours_norm, c.ref_norm));
  return c;
}

// Against OpenFold's grads.npz.
inline GradComparison compare_grads(const std::map<std::string, Tensor>& ours) {
  const data::NpzReader file(train_dir() + "/grads.npz");
  std::map<std::string, Tensor> reference;
  for (const std::string& key : file.names()) reference.emplace(key, file.read(key).to_tensor());
  return compare_grads(ours, reference, "openfold");
}

// One array of the training fixture's batch cropped: residues [start, start + len) on every axis
// of the fixture's length (48) but the last (the recycling axis), and the first `msa` rows of the
// MSA arrays (the extra-MSA and template arrays are the caller's).
inline Tensor crop_fixture_array(const std::string& name, Tensor t, int64_t start, int64_t len, int64_t msa) {
  for (int ax = 0; ax + 1 < t.dim(); ++ax)
    if (t.size(ax) == 48) t = t.narrow(ax, start, len);
  if (name == "msa_feat" || name == "msa_mask" || name == "msa_row_mask" || name == "bert_mask" || name == "true_msa")
    t = t.narrow(0, 0, msa);
  return t;
}

// Template slot 0 of a batch's arrays (by name, every iteration) becomes the example's own
// structure, so the template pair stack runs and trains; the other slots keep their masks.
inline void fill_template_with_truth(std::map<std::string, Tensor>& a) {
  a["template_aatype"].select(0, 0).copy_(a["aatype"]);
  a["template_all_atom_positions"].select(0, 0).copy_(a["all_atom_positions"]);
  a["template_all_atom_mask"].select(0, 0).copy_(a["all_atom_mask"]);
  a["template_pseudo_beta"].select(0, 0).copy_(a["pseudo_beta"]);
  a["template_pseudo_beta_mask"].select(0, 0).copy_(a["pseudo_beta_mask"]);
  a["template_mask"].select(0, 0).fill_(1.0);
}

// A crop of the fixture's batch as a step reads it: residues [start, start + len), the first `msa`
// MSA rows, `extra_rows` extra-MSA rows (beyond the fixture's own rows they repeat: a deeper extra
// MSA), the first `templates` template slots with slot 0 the true structure (so the template pair
// stack runs), and every array's last recycling slice (what the loss reads).
struct CroppedBatch {
  Af2Features features;
  std::map<std::string, Tensor> last_slice;
};

inline CroppedBatch cropped_batch(int64_t start, int64_t len, int64_t msa, int64_t extra_rows, int64_t templates) {
  const data::NpzReader in(train_dir() + "/batch.npz");
  std::map<std::string, Tensor> a;
  for (const std::string& name : in.names()) {
    Tensor t = crop_fixture_array(name, in.read(name).to_tensor(), start, len, msa);
    if (name.rfind("extra_", 0) == 0) {
      std::vector<autograd::Variable> parts;
      for (int64_t r = 0; r < extra_rows; r += std::min(t.size(0), extra_rows - r))
        parts.emplace_back(t.narrow(0, 0, std::min(t.size(0), extra_rows - r)).contiguous());
      t = autograd::concat(parts, 0).value();
    }
    if (name.rfind("template_", 0) == 0) t = t.narrow(0, 0, templates);
    a[name] = t.contiguous();
  }
  a["seq_length"].fill_(static_cast<double>(len));
  fill_template_with_truth(a);
  CroppedBatch out;
  out.features = Af2Features::from_arrays(a, "training fixture cropped, template 0 filled");
  const int64_t last = out.features.num_iterations() - 1;
  for (const auto& [name, t] : a) out.last_slice[name] = t.select(-1, last).contiguous();
  return out;
}

}  // namespace foldcore::af2::train_compare
