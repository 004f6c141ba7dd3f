#include "models/alphafold/model/features.h"

#include <cctype>
#include <string_view>
#include <vector>
#include <utility>

#include "core/error.h"
#include "data_pipeline/formats/npy.h"
#include "kernels/af2_features.h"

namespace foldcore::af2 {
namespace {

// Per-iteration shape of each feature the model reads: symbolic extents (N, S, E, T, F = the
// feature width a config decides) or fixed numbers; `integer` features become i64, others f32.
struct FeatureSpec {
  const char* name;
  std::vector<std::string> dims;
  bool integer;
};

const std::vector<FeatureSpec>& feature_specs() {
  static const std::vector<FeatureSpec> specs = {
      {"aatype", {"N"}, true},
      {"residue_index", {"N"}, true},
      {"seq_mask", {"N"}, false},
      {"target_feat", {"N", "Ft"}, false},
      {"msa_feat", {"S", "N", "Fm"}, false},
      {"msa_mask", {"S", "N"}, false},
      {"extra_msa", {"E", "N"}, true},
      {"extra_msa_mask", {"E", "N"}, false},
      {"extra_has_deletion", {"E", "N"}, false},
      {"extra_deletion_value", {"E", "N"}, false},
      {"atom14_atom_exists", {"N", "14"}, false},
      {"atom37_atom_exists", {"N", "37"}, false},
      {"residx_atom14_to_atom37", {"N", "14"}, true},
      {"residx_atom37_to_atom14", {"N", "37"}, true},
      {"template_aatype", {"T", "N"}, true},
      {"template_all_atom_positions", {"T", "N", "37", "3"}, false},
      {"template_all_atom_mask", {"T", "N", "37"}, false},
      {"template_mask", {"T"}, false},
      {"template_pseudo_beta", {"T", "N", "3"}, false},
      {"template_pseudo_beta_mask", {"T", "N"}, false},
      {"template_torsion_angles_sin_cos", {"T", "N", "7", "2"}, false},
      {"template_alt_torsion_angles_sin_cos", {"T", "N", "7", "2"}, false},
      {"template_torsion_angles_mask", {"T", "N", "7"}, false},
      {"bert_mask", {"S", "N"}, false},
      {"true_msa", {"S", "N"}, true},
  };
  return specs;
}

std::string shape_str(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

}  // namespace

const std::vector<std::string>& af2_required_features() {
  static const std::vector<std::string> names = {
      "aatype", "residue_index", "seq_mask", "target_feat", "msa_feat", "msa_mask", "extra_msa",
      "extra_msa_mask", "extra_has_deletion", "extra_deletion_value", "atom14_atom_exists",
      "atom37_atom_exists", "residx_atom14_to_atom37", "residx_atom37_to_atom14"};
  return names;
}

const std::vector<std::string>& af2_template_features() {
  static const std::vector<std::string> names = {
      "template_aatype", "template_all_atom_positions", "template_all_atom_mask", "template_mask",
      "template_pseudo_beta", "template_pseudo_beta_mask", "template_torsion_angles_sin_cos",
      "template_alt_torsion_angles_sin_cos", "template_torsion_angles_mask"};
  return names;
}

Af2Features Af2Features::read_npz(const std::string& path) {
  const data::NpzReader reader(path);  // throws on an unreadable or corrupt archive
  std::map<std::string, Tensor> arrays;
  for (const FeatureSpec& spec : feature_specs()) {
    if (!reader.contains(spec.name)) continue;
    const data::NpyArray a = reader.read(spec.name);
    FC_CHECK(a.dtype.kind == 'f' || a.dtype.kind == 'i' || a.dtype.kind == 'u' || a.dtype.kind == 'b', path,
             ": feature '", spec.name, "' ", shape_str(a.shape), ": not a numeric array (dtype ", a.dtype.descr(), ")");
    arrays.emplace(spec.name, a.to_tensor());
  }
  return from_arrays(arrays, path);
}

Af2Features Af2Features::from_arrays(const std::map<std::string, Tensor>& arrays, const std::string& origin) {
  Af2Features f;
  f.path_ = origin;
  const std::string& path = origin;
  for (const std::string& name : af2_required_features())
    FC_CHECK(arrays.count(name), path, ": required feature '", name, "' is missing (is this a processed AlphaFold feature file?)");
  int present_templates = 0;
  for (const std::string& name : af2_template_features()) present_templates += arrays.count(name) ? 1 : 0;
  FC_CHECK(present_templates == 0 || present_templates == static_cast<int>(af2_template_features().size()), path,
           ": template features are incomplete (", present_templates, " of ", af2_template_features().size(),
           " present)");

  std::map<std::string, int64_t> extents;  // symbol → extent, fixed by the first feature using it
  int64_t iterations = -1;
  std::string iterations_from;
  for (const FeatureSpec& spec : feature_specs()) {
    const auto found = arrays.find(spec.name);
    if (found == arrays.end()) continue;
    const Tensor& in = found->second;
    const std::vector<int64_t> shape = in.shape().vec();
    const std::string what = path + ": feature '" + spec.name + "' " + shape_str(shape);
    FC_CHECK(shape.size() == spec.dims.size() + 1, what, ": expected rank ", spec.dims.size() + 1,
             " (per-iteration rank ", spec.dims.size(), " + the recycling axis last)");
    const int64_t r = shape.back();
    if (iterations < 0) {
      iterations = r;
      iterations_from = spec.name;
    }
    FC_CHECK(r == iterations, what, ": recycling axis (last) has ", r, " iterations, '", iterations_from, "' has ",
             iterations);
    for (size_t d = 0; d < spec.dims.size(); ++d) {
      const std::string& sym = spec.dims[d];
      const int64_t got = shape[d];
      if (std::isdigit(static_cast<unsigned char>(sym[0]))) {
        FC_CHECK(got == std::stoll(sym), what, ": axis ", d, " must be ", sym);
      } else {
        const auto [it, fresh] = extents.emplace(sym, got);
        FC_CHECK(fresh || it->second == got, what, ": axis ", d, " (", sym, ") is ", got, " but other features have ",
                 it->second);
      }
    }
    Tensor t = in;
    const DType want = spec.integer ? DType::i64 : DType::f32;
    if (t.dtype() != want) t = t.to(want);
    if (std::string_view(spec.name) == "extra_msa" && t.device().is_cpu()) {
      // Checked here, on the host, once per file: the model builds its one-hot features on the
      // batch's device, where an out-of-range class would silently give zeros.
      ops::check_extra_msa_classes(t, what);
    }
    f.arrays_.emplace(spec.name, std::move(t));
  }
  FC_CHECK(iterations >= 1, path, ": the recycling axis is empty");
  FC_CHECK(extents["N"] >= 1, path, ": no residues");
  FC_CHECK(extents["S"] >= 1, path, ": the MSA has no rows (msa_feat needs at least the query)");
  f.num_iterations_ = iterations;
  return f;
}

Af2Batch Af2Features::iteration(int64_t r) const {
  FC_CHECK(r >= 0 && r < num_iterations_, path_, ": iteration ", r, " out of range (the file holds ",
           num_iterations_, ")");
  auto get = [&](const char* name) -> Tensor {
    const auto it = arrays_.find(name);
    if (it == arrays_.end()) return {};
    return it->second.select(-1, r).contiguous();
  };
  Af2Batch b;
  b.aatype = get("aatype");
  b.residue_index = get("residue_index");
  b.seq_mask = get("seq_mask");
  b.target_feat = get("target_feat");
  b.msa_feat = get("msa_feat");
  b.msa_mask = get("msa_mask");
  b.extra_msa = get("extra_msa");
  b.extra_msa_mask = get("extra_msa_mask");
  b.extra_has_deletion = get("extra_has_deletion");
  b.extra_deletion_value = get("extra_deletion_value");
  b.template_aatype = get("template_aatype");
  b.template_all_atom_positions = get("template_all_atom_positions");
  b.template_all_atom_mask = get("template_all_atom_mask");
  b.template_mask = get("template_mask");
  b.template_pseudo_beta = get("template_pseudo_beta");
  b.template_pseudo_beta_mask = get("template_pseudo_beta_mask");
  b.template_torsion_angles_sin_cos = get("template_torsion_angles_sin_cos");
  b.template_alt_torsion_angles_sin_cos = get("template_alt_torsion_angles_sin_cos");
  b.template_torsion_angles_mask = get("template_torsion_angles_mask");
  b.atom14_atom_exists = get("atom14_atom_exists");
  b.atom37_atom_exists = get("atom37_atom_exists");
  b.residx_atom14_to_atom37 = get("residx_atom14_to_atom37");
  b.residx_atom37_to_atom14 = get("residx_atom37_to_atom14");
  b.bert_mask = get("bert_mask");
  b.true_msa = get("true_msa");
  return b;
}

}  // namespace foldcore::af2
