// check_processed_layout / write_processed_features (feature_processing.h): the processed layout as a
// table of symbolic shapes, checked key by key.
#include <algorithm>
#include <cctype>
#include <map>
#include <sstream>
#include <span>

#include "core/error.h"
#include "data_pipeline/features/feature_processing.h"

namespace foldcore::data {
namespace {

// The order of ../shared/af2/ref/features.npz.
constexpr ProcessedKeyLayout kLayout[] = {
    {"aatype", "N R", false, false},
    {"residue_index", "N R", false, false},
    {"seq_length", "R", false, false},
    {"template_aatype", "T N R", false, true},
    {"template_all_atom_positions", "T N 37 3 R", true, true},
    {"template_sum_probs", "T 1 R", true, true},
    {"template_all_atom_mask", "T N 37 R", true, true},
    {"seq_mask", "N R", true, false},
    {"msa_mask", "S N R", true, false},
    {"msa_row_mask", "S R", true, false},
    {"template_mask", "T R", true, true},
    {"template_pseudo_beta", "T N 3 R", true, true},
    {"template_pseudo_beta_mask", "T N R", true, true},
    {"template_torsion_angles_sin_cos", "T N 7 2 R", true, true},
    {"template_alt_torsion_angles_sin_cos", "T N 7 2 R", true, true},
    {"template_torsion_angles_mask", "T N 7 R", true, true},
    {"atom14_atom_exists", "N 14 R", true, false},
    {"residx_atom14_to_atom37", "N 14 R", false, false},
    {"residx_atom37_to_atom14", "N 37 R", false, false},
    {"atom37_atom_exists", "N 37 R", true, false},
    {"extra_msa", "E N R", false, false},
    {"extra_msa_mask", "E N R", true, false},
    {"extra_msa_row_mask", "E R", true, false},
    {"bert_mask", "S N R", true, false},
    {"true_msa", "S N R", false, false},
    {"extra_has_deletion", "E N R", true, false},
    {"extra_deletion_value", "E N R", true, false},
    {"msa_feat", "S N 49 R", true, false},
    {"target_feat", "N 22 R", true, false},
    {"use_clamped_fape", "R", true, false},
};

}  // namespace

std::span<const ProcessedKeyLayout> processed_layout() { return kLayout; }

void check_processed_layout(const FeatureDict& features) {
  const bool with_templates = features.contains("template_aatype");
  std::vector<std::string> expected;
  for (const ProcessedKeyLayout& k : kLayout)
    if (with_templates || !k.is_template) expected.push_back(k.name);
  const std::vector<std::string> names = features.names();
  for (size_t i = 0; i < std::max(names.size(), expected.size()); ++i) {
    FC_CHECK(i < names.size() && i < expected.size() && names[i] == expected[i], "processed features: key ", i,
             " is '", i < names.size() ? names[i] : "(none)", "', expected '",
             i < expected.size() ? expected[i] : "(none)", "'",
             with_templates ? "" : " (layout without template keys)");
  }
  std::map<char, int64_t> sizes;
  for (const ProcessedKeyLayout& k : kLayout) {
    if (!with_templates && k.is_template) continue;
    const NpyArray& a = features.at(k.name);
    const NpyDType want = k.is_float ? NpyDType::f32() : NpyDType::i64();
    FC_CHECK(a.dtype == want, "processed features: '", k.name, "' has dtype ", a.dtype.descr(), ", expected ",
             want.descr());
    std::istringstream dims(k.dims);
    std::vector<std::string> tokens;
    for (std::string t; dims >> t;) tokens.push_back(t);
    FC_CHECK(a.shape.size() == tokens.size(), "processed features: '", k.name, "' has shape ", npy_shape_str(a.shape),
             ", expected [", k.dims, "]");
    for (size_t d = 0; d < tokens.size(); ++d) {
      const std::string& t = tokens[d];
      if (std::isdigit(static_cast<unsigned char>(t[0]))) {
        FC_CHECK(a.shape[d] == std::stoll(t), "processed features: '", k.name, "' has shape ", npy_shape_str(a.shape),
                 ", expected [", k.dims, "]");
        continue;
      }
      const auto [it, inserted] = sizes.emplace(t[0], a.shape[d]);
      FC_CHECK(inserted || it->second == a.shape[d], "processed features: '", k.name, "' has shape ",
               npy_shape_str(a.shape), " ([", k.dims, "]) but ", t, " = ", it->second, " elsewhere");
    }
    FC_CHECK(static_cast<int64_t>(a.data.size()) == a.numel() * static_cast<int64_t>(a.dtype.itemsize),
             "processed features: '", k.name, "' holds ", a.data.size(), " bytes for shape ", npy_shape_str(a.shape));
  }
  for (const char axis : {'N', 'R', 'S', 'E'})
    FC_CHECK(sizes[axis] >= 1, "processed features: axis ", axis, " is empty");
}

void write_processed_features(const std::string& path, const FeatureDict& features) {
  check_processed_layout(features);
  write_npz(path, features.arrays());
}

}  // namespace foldcore::data
