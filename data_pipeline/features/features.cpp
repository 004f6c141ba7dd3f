#include "data_pipeline/features/features.h"

#include <filesystem>

#include "core/error.h"
#include "data_pipeline/formats/a3m.h"
#include "data_pipeline/formats/fasta.h"
#include "data_pipeline/formats/hhr.h"
#include "data_pipeline/structure/residue_constants.h"
#include "data_pipeline/formats/stockholm.h"

namespace foldcore::data {

void FeatureDict::set(const std::string& name, NpyArray array) {
  for (auto& [n, a] : arrays_)
    if (n == name) {
      a = std::move(array);
      return;
    }
  arrays_.emplace_back(name, std::move(array));
}

bool FeatureDict::contains(const std::string& name) const {
  for (const auto& entry : arrays_)
    if (entry.first == name) return true;
  return false;
}

const NpyArray& FeatureDict::at(const std::string& name) const {
  for (const auto& [n, a] : arrays_)
    if (n == name) return a;
  FC_THROW("feature dict: no feature '", name, "'");
}

void FeatureDict::update(const FeatureDict& other) {
  for (const auto& [n, a] : other.arrays_) set(n, a);
}

std::vector<std::string> FeatureDict::names() const {
  std::vector<std::string> out;
  for (const auto& entry : arrays_) out.push_back(entry.first);
  return out;
}

FeatureDict make_sequence_features(const std::string& sequence, const std::string& description) {
  FC_CHECK(!sequence.empty(), "make_sequence_features: empty sequence (", description, ")");
  const int64_t n = static_cast<int64_t>(sequence.size());
  // sequence_to_onehot(sequence, restype_order_with_x, map_unknown_to_x=True): int32 one-hot.
  std::vector<int32_t> aatype(static_cast<size_t>(n) * rc::kRestypeNumWithX, 0);
  for (int64_t i = 0; i < n; ++i) {
    const int idx = rc::restype_order_with_x(sequence[static_cast<size_t>(i)], /*map_unknown_to_x=*/true);
    FC_CHECK(idx >= 0, "make_sequence_features: invalid character '", sequence[static_cast<size_t>(i)],
             "' at position ", i + 1, " of sequence ", description);
    aatype[static_cast<size_t>(i) * rc::kRestypeNumWithX + static_cast<size_t>(idx)] = 1;
  }
  std::vector<int32_t> residue_index(static_cast<size_t>(n)), seq_length(static_cast<size_t>(n), static_cast<int32_t>(n));
  for (int64_t i = 0; i < n; ++i) residue_index[static_cast<size_t>(i)] = static_cast<int32_t>(i);
  FeatureDict f;
  f.set("aatype", NpyArray::from_i32(aatype, {n, rc::kRestypeNumWithX}));
  f.set("between_segment_residues", NpyArray::from_i32(std::vector<int32_t>(static_cast<size_t>(n), 0), {n}));
  f.set("domain_name", NpyArray::from_strings({description}, {1}));
  f.set("residue_index", NpyArray::from_i32(residue_index, {n}));
  f.set("seq_length", NpyArray::from_i32(seq_length, {n}));
  f.set("sequence", NpyArray::from_strings({sequence}, {1}));
  return f;
}

FeatureDict make_msa_features(const std::vector<const Msa*>& msas) {
  FC_CHECK(!msas.empty() && msas[0] != nullptr && !msas[0]->empty(), "make_msa_features: at least one non-empty MSA is needed");
  const Msa merged = merge_msas(msas);
  const MsaFeatures mf = msa_features(merged);
  FeatureDict f;
  f.set("deletion_matrix_int", NpyArray::from_i32(mf.deletion_matrix, {mf.depth, mf.num_columns}));
  f.set("msa", NpyArray::from_i32(mf.msa, {mf.depth, mf.num_columns}));
  f.set("num_alignments",
        NpyArray::from_i32(std::vector<int32_t>(static_cast<size_t>(mf.num_columns), static_cast<int32_t>(mf.depth)),
                           {mf.num_columns}));
  return f;
}

FeatureDict empty_template_features(int64_t num_res) {
  FeatureDict f;
  for (auto& [name, array] : template_feature_arrays({}, num_res)) f.set(name, std::move(array));
  return f;
}

std::string find_alignment_file(const std::string& dir, const std::vector<std::string>& names) {
  for (const std::string& n : names)
    for (const std::string& suffix : {std::string(), std::string(".gz")}) {
      const std::string p = (std::filesystem::path(dir) / (n + suffix)).string();
      if (std::filesystem::is_regular_file(p)) return p;
    }
  return "";
}

namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

Msa read_query_alignment(const std::string& path, const std::string& query, size_t max_sequences,
                         const std::string& query_source) {
  const std::string base = ends_with(path, ".gz") ? path.substr(0, path.size() - 3) : path;
  Msa msa = ends_with(base, ".a3m") ? read_a3m(path, max_sequences) : read_stockholm(path, max_sequences);
  FC_CHECK(!msa.empty(), path, ": alignment has no sequences");
  std::string row0 = msa.sequences[0];
  for (char& c : row0) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  FC_CHECK(row0 == query, path, ": the alignment's query (first sequence, ", row0.size(), " columns: ", row0,
           ") does not match the ", query_source, " (", query.size(), " residues: ", query, ")");
  return msa;
}

MonomerPipelineResult run_monomer_pipeline(const MonomerPipelineOptions& options) {
  FastaOptions fasta_options;
  fasta_options.alphabet = Alphabet::kProtein;
  fasta_options.uppercase = true;
  const std::vector<FastaRecord> records = read_fasta(options.fasta_path, fasta_options);
  FC_CHECK(records.size() == 1, options.fasta_path, ": expected exactly one sequence for a monomer, found ",
           records.size());
  const std::string& query = records[0].sequence;
  const std::string& description = records[0].description;
  FC_CHECK(!query.empty(), options.fasta_path, ": empty sequence");

  MonomerPipelineResult result;
  // AlphaFold's merge order (uniref90, BFD, MGnify); each database is optional, so a search
  // against some of them, or one uploaded A3M, is enough. AlphaFold truncates uniref90 and mgnify
  // (Msa.truncate after parsing; reading only the first rows is the same) and keeps the whole BFD.
  struct Source {
    std::vector<std::string> names;
    size_t max_hits;
  };
  const Source sources[] = {
      {{"uniref90_hits.sto", "uniref90_hits.a3m"}, options.uniref_max_hits},
      {{"bfd_uniref_hits.a3m", "bfd_uniclust_hits.a3m", "small_bfd_hits.sto", "bfd_uniref_hits.sto"}, 0},
      {{"mgnify_hits.sto", "mgnify_hits.a3m"}, options.mgnify_max_hits},
  };
  std::vector<Msa> msas;
  if (!options.msa_dir.empty()) {
    FC_CHECK(std::filesystem::is_directory(options.msa_dir), "msa_dir ", options.msa_dir, " is not a folder");
    for (const Source& src : sources) {
      const std::string path = find_alignment_file(options.msa_dir, src.names);
      if (path.empty()) continue;
      msas.push_back(read_query_alignment(path, query, src.max_hits));
      result.msa_files.push_back(path);
    }
  }
  for (const std::string& path : options.extra_alignments) {
    FC_CHECK(std::filesystem::is_regular_file(path), path, ": alignment file not found");
    msas.push_back(read_query_alignment(path, query, 0, "FASTA sequence of " + options.fasta_path));
    result.msa_files.push_back(path);
  }
  if (msas.empty()) {
    std::string list;
    for (const Source& src : sources)
      for (const std::string& n : src.names) list += (list.empty() ? "" : ", ") + n;
    FC_THROW("msa_dir ", options.msa_dir.empty() ? "(none)" : options.msa_dir,
             ": missing alignment file: none of ", list, " is there and no other alignment was given");
  }
  std::vector<const Msa*> msa_ptrs;
  for (const Msa& m : msas) msa_ptrs.push_back(&m);

  FeatureDict features = make_sequence_features(query, description);
  features.update(make_msa_features(msa_ptrs));

  if (!options.template_hits_path.empty()) {
    const std::vector<TemplateHit> hits = read_hhr(options.template_hits_path);
    TemplateSearchResult templates = featurize_templates(query, hits, options.templates);
    for (auto& [name, array] : template_feature_arrays(templates.templates, static_cast<int64_t>(query.size())))
      features.set(name, std::move(array));
    result.template_reports = std::move(templates.reports);
  } else {
    features.update(empty_template_features(static_cast<int64_t>(query.size())));
  }
  result.features = std::move(features);
  return result;
}

void write_features(const std::string& path, const FeatureDict& features) {
  write_npz(path, features.arrays(), /*compress=*/true);
}

}  // namespace foldcore::data
