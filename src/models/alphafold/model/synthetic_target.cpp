#include "models/alphafold/model/synthetic_target.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <string>
#include <unistd.h>

#include "data_pipeline/features/feature_processing.h"
#include "data_pipeline/formats/msa.h"
#include "data_pipeline/structure/residue_constants.h"
#include "data_pipeline/features/templates.h"

namespace foldcore::af2 {
namespace {

namespace rc = data::rc;

// A template of the query itself on a random chain: CA a random walk of 3.8 Å steps (each step
// turned at most ~60° from the last), N, C and CB (not for Gly) at fixed offsets from CA in the
// local frame of the walk. Not a protein-like fold, but every atom the template features read is
// present (backbone mask 1), so the template pair stack and the pointwise attention run in full.
data::TemplateFeatures synthetic_template(const std::string& query, int64_t index, std::mt19937& g) {
  const int64_t n = static_cast<int64_t>(query.size());
  std::normal_distribution<double> normal(0.0, 1.0);
  data::TemplateFeatures t;
  t.domain_name = "synthetic_" + std::to_string(index);
  t.sequence = query;
  t.sum_probs = static_cast<float>(n);
  t.aatype.assign(static_cast<size_t>(n * 22), 0.f);
  t.masks.assign(static_cast<size_t>(n * rc::kAtomTypeNum), 0.f);
  t.positions.assign(static_cast<size_t>(n * rc::kAtomTypeNum * 3), 0.f);
  const int in = rc::atom_order("N"), ica = rc::atom_order("CA"), ic = rc::atom_order("C"), icb = rc::atom_order("CB");
  double ca[3] = {0, 0, 0}, dir[3] = {1, 0, 0};
  for (int64_t i = 0; i < n; ++i) {
    const int id = data::hhblits_aa_to_id(query[static_cast<size_t>(i)]);
    t.aatype[static_cast<size_t>(i * 22 + (id < 0 ? data::kHhblitsUnknown : id))] = 1.f;
    if (i > 0) {
      double step[3], len = 0;
      for (int d = 0; d < 3; ++d) step[d] = dir[d] + 0.6 * normal(g);
      for (double v : step) len += v * v;
      len = std::sqrt(len);
      for (int d = 0; d < 3; ++d) {
        dir[d] = step[d] / len;
        ca[d] += 3.8 * dir[d];
      }
    }
    // A unit vector perpendicular to the walk for the side atoms.
    double perp[3] = {-dir[1], dir[0], 0.0}, pl = std::sqrt(perp[0] * perp[0] + perp[1] * perp[1]);
    if (pl < 1e-6) perp[0] = 1.0, perp[1] = 0.0, pl = 1.0;
    for (double& v : perp) v /= pl;
    auto put = [&](int atom, double along, double side, double up) {
      for (int d = 0; d < 3; ++d)
        t.positions[static_cast<size_t>((i * rc::kAtomTypeNum + atom) * 3 + d)] =
            static_cast<float>(ca[d] + along * dir[d] + side * perp[d] + (d == 2 ? up : 0.0));
      t.masks[static_cast<size_t>(i * rc::kAtomTypeNum + atom)] = 1.f;
    };
    put(in, -1.2, 0.7, 0.0);
    put(ica, 0.0, 0.0, 0.0);
    put(ic, 1.2, 0.7, 0.0);
    if (query[static_cast<size_t>(i)] != 'G') put(icb, 0.0, -1.0, 1.0);
  }
  return t;
}

// Raw features of a random query with a synthetic MSA (row 0 = the query) and `templates`
// synthetic templates (0: AlphaFold's empty template features).
data::FeatureDict synthetic_raw(int64_t n, int64_t rows, int64_t templates, std::mt19937& g) {
  const std::string letters = "ARNDCQEGHILKMFPSTWYV";
  std::uniform_real_distribution<float> unit(0.0f, 1.0f);
  auto pick = [&](int64_t k) {
    return static_cast<size_t>(std::min<int64_t>(k - 1, static_cast<int64_t>(unit(g) * static_cast<float>(k))));
  };
  std::string query;
  for (int64_t i = 0; i < n; ++i) query += letters[pick(20)];
  data::Msa msa;
  for (int64_t r = 0; r < rows; ++r) {
    std::string s = query;
    if (r > 0)
      for (char& ch : s) {
        const float u = unit(g);
        if (u < 0.10f) ch = '-';
        else if (u < 0.25f) ch = letters[pick(20)];
      }
    msa.sequences.push_back(s);
    msa.deletion_matrix.emplace_back(n, 0);
    msa.descriptions.push_back("row" + std::to_string(r));
  }
  data::FeatureDict f = data::make_sequence_features(query, "synthetic");
  f.update(data::make_msa_features({&msa}));
  if (templates == 0) {
    f.update(data::empty_template_features(n));
  } else {
    std::vector<data::TemplateFeatures> t;
    for (int64_t k = 0; k < templates; ++k) t.push_back(synthetic_template(query, k, g));
    for (auto& [name, array] : data::template_feature_arrays(t, n)) f.set(name, std::move(array));
  }
  return f;
}

}  // namespace

Af2Features synthetic_target(const SyntheticTargetOptions& o, std::mt19937& g) {
  data::FeatureProcessingConfig pc;
  pc.num_recycles = static_cast<int>(o.recycles);
  FC_CHECK(o.templates >= 0 && o.templates <= o.max_templates, "synthetic_target: ", o.templates,
           " templates for ", o.max_templates, " template slots");
  pc.max_templates = o.max_templates;
  if (o.max_msa_clusters > 0) pc.max_msa_clusters = o.max_msa_clusters + o.max_templates;  // minus the template rows
  if (o.max_extra_msa > 0) pc.max_extra_msa = o.max_extra_msa;
  // Unique per process and call (tests run in parallel under ctest -j); random_device rather than
  // `g`, so the name does not change the target.
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("foldcore_synthetic_" + std::to_string(::getpid()) + "_" +
                             std::to_string(std::random_device{}()) + "_" + std::to_string(o.num_res) + ".npz"))
                               .string();
  data::write_processed_features(path, data::process_features(synthetic_raw(o.num_res, o.msa_rows, o.templates, g), pc));
  Af2Features features = Af2Features::read_npz(path);
  std::filesystem::remove(path);
  return features;
}

}  // namespace foldcore::af2
