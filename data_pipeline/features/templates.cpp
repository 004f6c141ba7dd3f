#include "data_pipeline/features/templates.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <memory>
#include <numeric>

#include "core/error.h"
#include "data_pipeline/formats/fasta.h"
#include "data_pipeline/search/kalign_align.h"
#include "data_pipeline/formats/mmcif_parser.h"
#include "data_pipeline/formats/msa.h"
#include "data_pipeline/structure/residue_constants.h"
#include "data_pipeline/structure/structure.h"

namespace foldcore::data {
namespace {

constexpr int kTemplateAatypeClasses = 22;  // HHblits codes incl. gap
constexpr double kMaxSubsequenceRatio = 0.95;
constexpr double kMinAlignRatio = 0.1;
constexpr size_t kMinTemplateLength = 10;
constexpr double kMinRealignIdentity = 0.9;
constexpr double kMaxCaCaDistance = 150.0;  // "essentially infinity" in AlphaFold
constexpr float kMinMaskedAtoms = 5;        // alanine's atom count (N CA C CB O)

// A hit that could not be featurised: its status and the reason.
struct HitFailure {
  TemplateHitStatus status;
  std::string message;
};

std::string without_gaps(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s)
    if (c != '-') out.push_back(c);
  return out;
}

bool valid_date(const std::string& d) {
  if (d.size() != 10 || d[4] != '-' || d[7] != '-') return false;
  for (size_t i : {0, 1, 2, 3, 5, 6, 8, 9})
    if (d[i] < '0' || d[i] > '9') return false;
  return true;
}

// A protein chain as AlphaFold's MmcifObject sees it: author chain id → seqres.
struct SeqresChain {
  std::string auth_id;
  std::string seqres;
  const Chain* chain = nullptr;
};

// Protein chains in entity order, then the entity's chain order (AlphaFold's chain_to_seqres
// dict order); a repeated author id keeps its first chain.
std::vector<SeqresChain> protein_chains(const Structure& s) {
  std::vector<SeqresChain> out;
  for (const Entity& e : s.entities)
    for (const std::string& label : e.chain_ids) {
      const Chain* c = s.find_chain_by_label(label);
      if (c == nullptr || !s.is_protein_chain(*c) || c->seqres_to_residue.empty()) continue;
      if (std::any_of(out.begin(), out.end(), [&](const SeqresChain& x) { return x.auth_id == c->auth_id; })) continue;
      out.push_back({c->auth_id, chain_sequence(s, *c, SequenceSource::kSeqres), c});
    }
  return out;
}

const SeqresChain* find_auth(const std::vector<SeqresChain>& chains, const std::string& auth_id) {
  for (const SeqresChain& c : chains)
    if (c.auth_id == auth_id) return &c;
  return nullptr;
}

// Leftmost position where `templ` matches `chain` with 'X' as a wildcard on either side
// (AlphaFold's regex: template X matches anything; a template letter matches itself or X).
size_t fuzzy_find(const std::string& chain, const std::string& templ) {
  if (templ.size() > chain.size()) return std::string::npos;
  for (size_t start = 0; start + templ.size() <= chain.size(); ++start) {
    bool ok = true;
    for (size_t i = 0; i < templ.size() && ok; ++i)
      ok = templ[i] == 'X' || chain[start + i] == templ[i] || chain[start + i] == 'X';
    if (ok) return start;
  }
  return std::string::npos;
}

// _find_template_in_pdb: (chain, offset of the hit sequence in its seqres), or chain nullptr.
std::pair<const SeqresChain*, size_t> find_template_in_chains(const std::vector<SeqresChain>& chains,
                                                              const std::string& chain_id, const std::string& templ) {
  if (const SeqresChain* c = find_auth(chains, chain_id); c != nullptr && !c->seqres.empty()) {
    const size_t pos = c->seqres.find(templ);
    if (pos != std::string::npos) return {c, pos};
  }
  for (const SeqresChain& c : chains) {
    const size_t pos = c.seqres.empty() ? std::string::npos : c.seqres.find(templ);
    if (pos != std::string::npos) return {&c, pos};
  }
  for (const SeqresChain& c : chains) {
    const size_t pos = fuzzy_find(c.seqres, templ);
    if (pos != std::string::npos) return {&c, pos};
  }
  return {nullptr, 0};
}

// _realign_pdb_template_to_query: the chain's seqres and the query → seqres mapping (-1 where
// the old template residue has no counterpart). Throws HitFailure (kFeatureError).
std::pair<std::string, std::vector<std::pair<int, int>>> realign(const std::string& old_seq, const std::string& chain_id,
                                                                 const std::vector<SeqresChain>& chains,
                                                                 const std::vector<std::pair<int, int>>& old_mapping,
                                                                 const PairAligner& aligner, const std::string& pdb_id) {
  const SeqresChain* c = find_auth(chains, chain_id);
  if (c == nullptr || c->seqres.empty()) {
    if (chains.size() != 1)
      throw HitFailure{TemplateHitStatus::kFeatureError,
                       "could not find chain " + chain_id + " in " + pdb_id + " (not a protein chain?)"};
    c = &chains[0];
  }
  const std::string& new_seq = c->seqres;
  std::pair<std::string, std::string> aligned;
  try {
    aligned = aligner(old_seq, new_seq);
  } catch (const Error& e) {
    throw HitFailure{TemplateHitStatus::kFeatureError, "could not align template " + old_seq + " to " + pdb_id +
                                                           "_" + chain_id + " " + new_seq + ": " + e.what()};
  }
  std::map<int, int> old_to_new;
  int old_i = -1, new_i = -1, num_same = 0;
  for (size_t k = 0; k < std::min(aligned.first.size(), aligned.second.size()); ++k) {
    const char a = aligned.first[k], b = aligned.second[k];
    if (a != '-') ++old_i;
    if (b != '-') ++new_i;
    if (a != '-' && b != '-') {
      old_to_new[old_i] = new_i;
      if (a == b) ++num_same;
    }
  }
  const double identity = static_cast<double>(num_same) / static_cast<double>(std::min(old_seq.size(), new_seq.size()));
  if (identity < kMinRealignIdentity)
    throw HitFailure{TemplateHitStatus::kFeatureError,
                     "insufficient similarity of the hit sequence " + old_seq + " to the mmCIF sequence of " + pdb_id +
                         "_" + chain_id + " " + new_seq + " (" + std::to_string(identity) + " < 0.9)"};
  std::vector<std::pair<int, int>> mapping;
  for (const auto& [q, o] : old_mapping) {
    const auto it = old_to_new.find(o);
    mapping.emplace_back(q, it == old_to_new.end() ? -1 : it->second);
  }
  return {without_gaps(new_seq), mapping};
}

// _get_atom_positions for the chain with author id `chain_id`: [L,37,3] positions, [L,37] mask.
void atom_positions(const std::vector<SeqresChain>& chains, const std::string& chain_id, std::vector<float>& pos,
                    std::vector<float>& mask, const std::string& pdb_id) {
  const SeqresChain* c = find_auth(chains, chain_id);
  if (c == nullptr)
    throw HitFailure{TemplateHitStatus::kFeatureWarning, "could not get atom data (" + pdb_id + "_" + chain_id +
                                                             "): no protein chain " + chain_id};
  const size_t n = c->seqres.size();
  seqres_atom37(*c->chain, pos, mask);
  pos.resize(n * rc::kAtomTypeNum * 3, 0.0f);  // a seqres longer than the residue map: unobserved tail
  mask.resize(n * rc::kAtomTypeNum, 0.0f);
  // _check_residue_distances: consecutive seqres positions that both have a CA.
  const size_t ca = static_cast<size_t>(rc::atom_order("CA"));
  for (size_t p = 1; p < n; ++p) {
    if (mask[p * rc::kAtomTypeNum + ca] == 0 || mask[(p - 1) * rc::kAtomTypeNum + ca] == 0) continue;
    const float* a = &pos[(p * rc::kAtomTypeNum + ca) * 3];
    const float* b = &pos[((p - 1) * rc::kAtomTypeNum + ca) * 3];
    const double d = std::sqrt(double(a[0] - b[0]) * (a[0] - b[0]) + double(a[1] - b[1]) * (a[1] - b[1]) +
                               double(a[2] - b[2]) * (a[2] - b[2]));
    if (d > kMaxCaCaDistance)
      throw HitFailure{TemplateHitStatus::kFeatureWarning,
                       "could not get atom data (" + pdb_id + "_" + chain_id + "): CA distance between residues " +
                           std::to_string(p - 1) + " and " + std::to_string(p) + " is " + std::to_string(d) + " Å"};
  }
}

// _extract_template_features.
TemplateFeatures extract_features(const Structure& s, const std::string& pdb_id, std::vector<std::pair<int, int>> mapping,
                                  std::string templ, const std::string& query, const std::string& chain_id,
                                  const TemplateFeaturizerOptions& options, std::string& note) {
  const std::vector<SeqresChain> chains = protein_chains(s);
  if (chains.empty())
    throw HitFailure{TemplateHitStatus::kFeatureWarning, "no protein chains in " + pdb_id + "_" + chain_id};
  auto [found, offset] = find_template_in_chains(chains, chain_id, templ);
  std::string used_chain = chain_id;
  if (found != nullptr) {
    // The hit sequence sits at `offset` in this chain's seqres; mapping values index the hit
    // sequence, whose letters are the output (as in AlphaFold).
    used_chain = found->auth_id;
  } else {
    note = "the exact sequence " + templ + " was not found in " + pdb_id + "_" + chain_id +
           "; realigned the template to the actual sequence";
    const PairAligner aligner = options.aligner ? options.aligner : PairAligner([&](const std::string& a, const std::string& b) {
      return kalign_pairwise(a, b, options.kalign_binary);
    });
    auto [seqres, new_mapping] = realign(templ, chain_id, chains, mapping, aligner, pdb_id);
    templ = std::move(seqres);
    mapping = std::move(new_mapping);
    offset = 0;
  }
  std::vector<float> pos, mask;
  atom_positions(chains, used_chain, pos, mask, pdb_id);
  const size_t num_res = mask.size() / rc::kAtomTypeNum;

  const size_t n = query.size();
  TemplateFeatures f;
  f.domain_name = pdb_id + "_" + used_chain;
  f.sequence.assign(n, '-');
  f.positions.assign(n * rc::kAtomTypeNum * 3, 0.0f);
  f.masks.assign(n * rc::kAtomTypeNum, 0.0f);
  float mask_sum = 0;
  for (const auto& [q, v] : mapping) {
    if (v < 0) continue;  // lost in realignment (see the header)
    const size_t t = static_cast<size_t>(v) + offset;
    if (t >= num_res || static_cast<size_t>(v) >= templ.size() || q < 0 || static_cast<size_t>(q) >= n)
      throw HitFailure{TemplateHitStatus::kFeatureError, "mapping of query residue " + std::to_string(q) +
                                                             " to template residue " + std::to_string(t) +
                                                             " is outside " + pdb_id + "_" + used_chain +
                                                             " (length " + std::to_string(num_res) + ")"};
    const size_t qi = static_cast<size_t>(q);
    std::copy_n(&pos[t * rc::kAtomTypeNum * 3], rc::kAtomTypeNum * 3, &f.positions[qi * rc::kAtomTypeNum * 3]);
    std::copy_n(&mask[t * rc::kAtomTypeNum], rc::kAtomTypeNum, &f.masks[qi * rc::kAtomTypeNum]);
    f.sequence[qi] = templ[static_cast<size_t>(v)];
  }
  for (float m : f.masks) mask_sum += m;
  if (mask_sum < kMinMaskedAtoms)
    throw HitFailure{TemplateHitStatus::kFeatureWarning, "template all atom mask was all zeros: " + pdb_id + "_" + used_chain};
  f.aatype.assign(n * kTemplateAatypeClasses, 0.0f);
  for (size_t i = 0; i < n; ++i) {
    int id = hhblits_aa_to_id(f.sequence[i]);
    if (id < 0) id = kHhblitsUnknown;
    f.aatype[i * kTemplateAatypeClasses + static_cast<size_t>(id)] = 1.0f;
  }
  return f;
}

// _assess_hhsearch_hit (no release-date table and no query PDB code: those checks never apply).
std::string prefilter(const TemplateHit& hit, const std::string& query) {
  const double n = static_cast<double>(query.size());
  const double align_ratio = hit.aligned_cols / n;
  const std::string templ = without_gaps(hit.hit_sequence);
  const double length_ratio = static_cast<double>(templ.size()) / n;
  const bool duplicate = query.find(templ) != std::string::npos && length_ratio > kMaxSubsequenceRatio;
  if (align_ratio <= kMinAlignRatio)
    return "proportion of residues aligned to the query too small (align ratio " + std::to_string(align_ratio) + ")";
  if (duplicate)
    return "template is an exact subsequence of the query with large coverage (length ratio " +
           std::to_string(length_ratio) + ")";
  if (templ.size() < kMinTemplateLength) return "template too short (" + std::to_string(templ.size()) + " residues)";
  return "";
}

}  // namespace

const char* to_string(TemplateHitStatus status) {
  switch (status) {
    case TemplateHitStatus::kUsed: return "used";
    case TemplateHitStatus::kPrefiltered: return "prefiltered";
    case TemplateHitStatus::kAfterDate: return "after max_template_date";
    case TemplateHitStatus::kMissingMmcif: return "missing mmCIF";
    case TemplateHitStatus::kFeatureWarning: return "no usable atom data";
    case TemplateHitStatus::kFeatureError: return "feature error";
  }
  return "?";
}

std::pair<std::string, std::string> pdb_id_and_chain(const std::string& hit_name) {
  auto alnum = [](char c) { return (c >= '0' && c <= '9') || is_ascii_letter(c); };
  bool ok = hit_name.size() >= 6 && hit_name[4] == '_';
  for (size_t i = 0; ok && i < 4; ++i) ok = alnum(hit_name[i]);
  size_t end = 5;
  while (ok && end < hit_name.size() && (alnum(hit_name[end]) || hit_name[end] == '.')) ++end;
  FC_CHECK(ok && end > 5, "template hit name does not start with PDBID_chain: '", hit_name, "'");
  std::string id = hit_name.substr(0, 4);
  for (char& c : id) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return {id, hit_name.substr(5, end - 5)};
}

std::vector<std::pair<int, int>> query_to_hit_mapping(const TemplateHit& hit, const std::string& query) {
  if (hit.query.empty()) return {};
  const std::string hh_query = without_gaps(hit.query);
  const size_t hit_len = without_gaps(hit.hit_sequence).size();
  const size_t offset = query.find(hh_query);
  FC_CHECK(offset != std::string::npos, "template hit ", hit.name, ": its query segment ", hh_query,
           " does not occur in the query sequence");
  auto min_index = [](const std::vector<int32_t>& v) {
    int32_t m = -1;
    for (int32_t x : v)
      if (x > -1 && (m < 0 || x < m)) m = x;
    return m;
  };
  const int32_t min_hit = min_index(hit.indices_hit), min_query = min_index(hit.indices_query);
  std::map<int, int> mapping;
  if (min_hit < 0 || min_query < 0) return {};
  for (size_t k = 0; k < std::min(hit.indices_query.size(), hit.indices_hit.size()); ++k) {
    if (hit.indices_query[k] < 0 || hit.indices_hit[k] < 0) continue;
    const size_t q = static_cast<size_t>(hit.indices_query[k] - min_query) + offset;
    const size_t t = static_cast<size_t>(hit.indices_hit[k] - min_hit);
    if (t >= hit_len || q >= query.size()) continue;
    mapping[static_cast<int>(q)] = static_cast<int>(t);
  }
  return {mapping.begin(), mapping.end()};
}

TemplateSearchResult featurize_templates(const std::string& query, const std::vector<TemplateHit>& hits,
                                         const TemplateFeaturizerOptions& options) {
  FC_CHECK(!query.empty(), "featurize_templates: empty query sequence");
  FC_CHECK(valid_date(options.max_template_date), "featurize_templates: max_template_date must be YYYY-MM-DD, got '",
           options.max_template_date, "'");
  FC_CHECK(std::filesystem::is_directory(options.mmcif_dir), "featurize_templates: mmCIF folder '", options.mmcif_dir,
           "' does not exist");
  FC_CHECK(options.max_hits >= 0, "featurize_templates: max_hits must be >= 0");

  std::vector<size_t> order(hits.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return hits[a].sum_probs > hits[b].sum_probs; });

  // Each mmCIF is parsed once (several hits may come from one entry).
  std::map<std::string, std::shared_ptr<const Structure>> structures;
  std::map<std::string, std::string> parse_errors;

  TemplateSearchResult result;
  for (size_t k : order) {
    if (static_cast<int>(result.templates.size()) >= options.max_hits) break;
    const TemplateHit& hit = hits[k];
    TemplateHitReport report;
    report.hit_index = hit.index;
    report.sum_probs = hit.sum_probs;
    try {
      std::pair<std::string, std::string> id_chain;
      try {
        id_chain = pdb_id_and_chain(hit.name);
      } catch (const Error& e) {
        throw HitFailure{TemplateHitStatus::kFeatureError, e.what()};
      }
      const auto& [pdb_id, chain_id] = id_chain;
      report.name = pdb_id + "_" + chain_id;
      if (std::string why = prefilter(hit, query); !why.empty()) throw HitFailure{TemplateHitStatus::kPrefiltered, why};
      std::vector<std::pair<int, int>> mapping;
      try {
        mapping = query_to_hit_mapping(hit, query);
      } catch (const Error& e) {
        throw HitFailure{TemplateHitStatus::kFeatureError, e.what()};
      }

      if (!structures.count(pdb_id) && !parse_errors.count(pdb_id)) {
        const std::filesystem::path dir(options.mmcif_dir);
        std::string path = (dir / (pdb_id + ".cif")).string();
        if (!std::filesystem::exists(path)) path = (dir / (pdb_id + ".cif.gz")).string();
        if (!std::filesystem::exists(path))
          throw HitFailure{TemplateHitStatus::kMissingMmcif, "no mmCIF file " + (dir / (pdb_id + ".cif")).string()};
        try {
          structures[pdb_id] = std::make_shared<const Structure>(read_mmcif(path));
        } catch (const Error& e) {
          parse_errors[pdb_id] = e.what();
        }
      }
      if (parse_errors.count(pdb_id))
        throw HitFailure{TemplateHitStatus::kFeatureWarning, "mmCIF parsing error: " + parse_errors[pdb_id]};
      const Structure& s = *structures[pdb_id];
      const std::string& date = s.metadata.release_date;
      if (!date.empty() && date > options.max_template_date)
        throw HitFailure{TemplateHitStatus::kAfterDate,
                         "release date " + date + " > max template date " + options.max_template_date};

      TemplateFeatures f = extract_features(s, pdb_id, std::move(mapping), without_gaps(hit.hit_sequence), query,
                                            chain_id, options, report.message);
      f.sum_probs = static_cast<float>(hit.sum_probs);
      report.name = f.domain_name;
      report.status = TemplateHitStatus::kUsed;
      result.templates.push_back(std::move(f));
    } catch (const HitFailure& failure) {
      report.status = failure.status;
      report.message = failure.message;
    }
    result.reports.push_back(std::move(report));
  }
  return result;
}

std::vector<std::pair<std::string, NpyArray>> template_feature_arrays(const std::vector<TemplateFeatures>& templates,
                                                                      int64_t num_res) {
  const int64_t t = static_cast<int64_t>(templates.size());
  std::vector<float> aatype, masks, positions, sum_probs;
  std::vector<std::string> names, sequences;
  for (const TemplateFeatures& f : templates) {
    FC_CHECK(static_cast<int64_t>(f.sequence.size()) == num_res, "template_feature_arrays: template ", f.domain_name,
             " has ", f.sequence.size(), " residues, expected ", num_res);
    aatype.insert(aatype.end(), f.aatype.begin(), f.aatype.end());
    masks.insert(masks.end(), f.masks.begin(), f.masks.end());
    positions.insert(positions.end(), f.positions.begin(), f.positions.end());
    names.push_back(f.domain_name);
    sequences.push_back(f.sequence);
    sum_probs.push_back(f.sum_probs);
  }
  return {
      {"template_aatype", NpyArray::from_f32(aatype, {t, num_res, kTemplateAatypeClasses})},
      {"template_all_atom_masks", NpyArray::from_f32(masks, {t, num_res, rc::kAtomTypeNum})},
      {"template_all_atom_positions", NpyArray::from_f32(positions, {t, num_res, rc::kAtomTypeNum, 3})},
      {"template_domain_names", NpyArray::from_strings(names, {t})},
      {"template_sequence", NpyArray::from_strings(sequences, {t})},
      {"template_sum_probs", NpyArray::from_f32(sum_probs, {t, 1})},
  };
}

}  // namespace foldcore::data
