#include "models/alphafold/synthetic_target.h"

#include <algorithm>
#include <filesystem>
#include <string>
#include <unistd.h>

#include "data_pipeline/feature_processing.h"

namespace foldcore::af2 {
namespace {

// Raw features of a random query with a synthetic MSA (row 0 = the query).
data::FeatureDict synthetic_raw(int64_t n, int64_t rows, std::mt19937& g) {
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
  f.update(data::empty_template_features(n));
  return f;
}

}  // namespace

Af2Features synthetic_target(const SyntheticTargetOptions& o, std::mt19937& g) {
  data::FeatureProcessingConfig pc;
  pc.num_recycles = static_cast<int>(o.recycles);
  pc.max_templates = o.max_templates;
  if (o.max_msa_clusters > 0) pc.max_msa_clusters = o.max_msa_clusters + o.max_templates;  // minus the template rows
  if (o.max_extra_msa > 0) pc.max_extra_msa = o.max_extra_msa;
  // Unique per process and call (tests run in parallel under ctest -j); random_device rather than
  // `g`, so the name does not change the target.
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("foldcore_synthetic_" + std::to_string(::getpid()) + "_" +
                             std::to_string(std::random_device{}()) + "_" + std::to_string(o.num_res) + ".npz"))
                               .string();
  data::write_processed_features(path, data::process_features(synthetic_raw(o.num_res, o.msa_rows, g), pc));
  Af2Features features = Af2Features::read_npz(path);
  std::filesystem::remove(path);
  return features;
}

}  // namespace foldcore::af2
