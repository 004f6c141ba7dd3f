#include "data_pipeline/formats/msa.h"

#include <array>
#include <unordered_set>

#include "core/error.h"

namespace foldcore::data {
namespace {

constexpr std::array<int8_t, 256> make_hhblits_table() {
  std::array<int8_t, 256> t{};
  for (auto& v : t) v = -1;
  const char* order = "ACDEFGHIKLMNPQRSTVWYX";  // codes 0..20
  for (int i = 0; order[i]; ++i) t[static_cast<unsigned char>(order[i])] = static_cast<int8_t>(i);
  t['B'] = 2;   // Asx -> D
  t['Z'] = 3;   // Glx -> E
  t['U'] = 1;   // selenocysteine -> C
  t['O'] = 20;  // pyrrolysine -> X
  t['J'] = 20;  // Xle -> X
  t['-'] = kHhblitsGap;
  return t;
}
constexpr std::array<int8_t, 256> kHhblitsTable = make_hhblits_table();

}  // namespace

int hhblits_aa_to_id(char c) { return kHhblitsTable[static_cast<unsigned char>(c)]; }

void Msa::validate(const std::string& what) const {
  FC_CHECK(deletion_matrix.size() == sequences.size() && descriptions.size() == sequences.size(), what, ": ",
           sequences.size(), " sequences but ", deletion_matrix.size(), " deletion rows and ", descriptions.size(),
           " descriptions");
  const size_t n = num_columns();
  for (size_t i = 0; i < sequences.size(); ++i) {
    FC_CHECK(sequences[i].size() == n, what, ": sequence ", i, " ('", descriptions[i], "') has ", sequences[i].size(),
             " aligned columns, the query has ", n);
    FC_CHECK(deletion_matrix[i].size() == n, what, ": deletion row ", i, " ('", descriptions[i], "') has ",
             deletion_matrix[i].size(), " entries, expected ", n);
  }
}

Msa Msa::truncated(size_t max_sequences) const {
  const size_t n = std::min(max_sequences, sequences.size());
  Msa out;
  out.sequences.assign(sequences.begin(), sequences.begin() + static_cast<std::ptrdiff_t>(n));
  out.deletion_matrix.assign(deletion_matrix.begin(),
                             deletion_matrix.begin() + static_cast<std::ptrdiff_t>(std::min(n, deletion_matrix.size())));
  out.descriptions.assign(descriptions.begin(),
                          descriptions.begin() + static_cast<std::ptrdiff_t>(std::min(n, descriptions.size())));
  return out;
}

Msa merge_msas(const std::vector<const Msa*>& msas) {
  FC_CHECK(!msas.empty(), "merge_msas: at least one MSA is needed");
  Msa out;
  std::unordered_set<std::string> seen;
  size_t columns = 0;
  for (size_t m = 0; m < msas.size(); ++m) {
    FC_CHECK(msas[m] != nullptr && !msas[m]->empty(), "merge_msas: MSA ", m, " has no sequences");
    const Msa& msa = *msas[m];
    msa.validate("merge_msas: MSA " + std::to_string(m));
    if (m == 0) columns = msa.num_columns();
    FC_CHECK(msa.num_columns() == columns, "merge_msas: MSA ", m, " has ", msa.num_columns(),
             " columns, MSA 0 has ", columns);
    for (size_t i = 0; i < msa.depth(); ++i) {
      if (!seen.insert(msa.sequences[i]).second) continue;  // first occurrence wins
      out.sequences.push_back(msa.sequences[i]);
      out.deletion_matrix.push_back(msa.deletion_matrix[i]);
      out.descriptions.push_back(msa.descriptions[i]);
    }
  }
  return out;
}

Msa merge_monomer_msas(const Msa& uniref90, const Msa& bfd, const Msa& mgnify, size_t uniref_max_hits,
                       size_t mgnify_max_hits) {
  const Msa u = uniref90.truncated(uniref_max_hits);
  const Msa g = mgnify.truncated(mgnify_max_hits);
  return merge_msas({&u, &bfd, &g});
}

MsaFeatures msa_features(const Msa& msa) {
  msa.validate();
  MsaFeatures f;
  f.depth = static_cast<int64_t>(msa.depth());
  f.num_columns = static_cast<int64_t>(msa.num_columns());
  f.msa.resize(static_cast<size_t>(f.depth * f.num_columns));
  f.deletion_matrix.resize(f.msa.size());
  for (size_t i = 0; i < msa.depth(); ++i) {
    const std::string& s = msa.sequences[i];
    for (size_t j = 0; j < s.size(); ++j) {
      const int code = hhblits_aa_to_id(s[j]);
      FC_CHECK(code >= 0, "msa_features: sequence ", i, " ('", msa.descriptions[i], "') column ", j,
               ": character '", s[j], "' has no HHblits residue code");
      f.msa[i * s.size() + j] = code;
      f.deletion_matrix[i * s.size() + j] = msa.deletion_matrix[i][j];
    }
  }
  return f;
}

}  // namespace foldcore::data
