// Template featurisation (AlphaFold's TemplateHitFeaturizer, monomer) on query73's pdb70 hits and
// the shared mmCIFs, compared with DeepMind's af2_raw_features.npz: the 7 templates whose mmCIF is
// present match (positions within 1e-3 Å, everything else exactly); the missing 1hf9 is reported.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "data_pipeline/features/features.h"
#include "data_pipeline/formats/fasta.h"
#include "data_pipeline/formats/hhr.h"
#include "data_pipeline/search/kalign_align.h"
#include "data_pipeline/formats/npy.h"
#include "data_pipeline/features/templates.h"
#include "data_pipeline/data_test_util.h"
#include "test_util.h"

namespace foldcore::data {
namespace {

std::string shared(const std::string& f) { return testing::shared_dir() + "/data/" + f; }

std::string q73_sequence() { return read_fasta(shared("query73/query.fasta"))[0].sequence; }

TemplateFeaturizerOptions q73_template_options() {
  TemplateFeaturizerOptions o;
  o.mmcif_dir = shared("mmcifs");
  o.max_template_date = "2021-12-20";  // as DeepMind's run that made af2_raw_features.npz
  return o;
}

bool kalign_available() { return std::system("kalign --version > /dev/null 2>&1") == 0; }

TEST(Templates, PdbIdAndChainFromHitName) {
  EXPECT_EQ(pdb_id_and_chain("1HF9_B ATPASE INHIBITOR"), (std::pair<std::string, std::string>{"1hf9", "B"}));
  EXPECT_EQ(pdb_id_and_chain("7abc_AAA"), (std::pair<std::string, std::string>{"7abc", "AAA"}));
  EXPECT_EQ(pdb_id_and_chain("7abc_."), (std::pair<std::string, std::string>{"7abc", "."}));
  EXPECT_NE(error_of([] { pdb_id_and_chain("1hf9 B"); }), "");
  EXPECT_NE(error_of([] { pdb_id_and_chain("1h9_B"); }), "");
  EXPECT_NE(error_of([] { pdb_id_and_chain("1hf9_"); }), "");
}

TEST(Templates, QueryToHitMappingByHand) {
  // Query "XXACDEFG" (8), the hit aligns query residues 3..7 (1-based) to hit residues 11..14
  // with a gap in the hit after the second column.
  TemplateHit hit;
  hit.name = "1abc_A";
  hit.query = "ACDEF";
  hit.hit_sequence = "AC-EF";
  hit.indices_query = {2, 3, 4, 5, 6};
  hit.indices_hit = {10, 11, -1, 12, 13};
  const auto m = query_to_hit_mapping(hit, "XXACDEFG");
  EXPECT_EQ(m, (std::vector<std::pair<int, int>>{{2, 0}, {3, 1}, {5, 2}, {6, 3}}));
  hit.query = "WWW";
  EXPECT_NE(error_of([&] { query_to_hit_mapping(hit, "XXACDEFG"); }).find("does not occur"), std::string::npos);
}

TEST(Templates, Query73MatchesAlphaFoldTemplates) {
  const std::string query = q73_sequence();
  const std::vector<TemplateHit> hits = read_hhr(shared("query73/alignments/pdb70_hits.hhr"));
  const TemplateSearchResult r = featurize_templates(query, hits, q73_template_options());

  // Reports in processing order (sum_probs descending): 1hf9 and both 5kc1 hits lack an mmCIF.
  std::vector<std::string> used, missing;
  for (const TemplateHitReport& rep : r.reports) {
    if (rep.status == TemplateHitStatus::kUsed) used.push_back(rep.name);
    if (rep.status == TemplateHitStatus::kMissingMmcif) {
      missing.push_back(rep.name);
      EXPECT_NE(rep.message.find(rep.name.substr(0, 4) + ".cif"), std::string::npos) << rep.message;
    }
  }
  EXPECT_EQ(r.reports.size(), hits.size());
  EXPECT_EQ(missing, (std::vector<std::string>{"1hf9_B", "5kc1_F", "5kc1_J"}));
  EXPECT_EQ(used, (std::vector<std::string>{"3u8v_A", "2crb_A", "4zey_A", "1psm_A", "3zee_A", "4i6p_A", "2q2k_A"}));

  NpzReader ref(shared("query73/af2_raw_features.npz"));
  const std::vector<std::string> ref_names = ref.read("template_domain_names").strings();
  const std::vector<std::string> ref_seqs = ref.read("template_sequence").strings();
  const NpyArray ref_aatype = ref.read("template_aatype"), ref_masks = ref.read("template_all_atom_masks"),
                 ref_pos = ref.read("template_all_atom_positions"), ref_probs = ref.read("template_sum_probs");
  const int64_t n = static_cast<int64_t>(query.size());
  ASSERT_EQ(r.templates.size(), 7u);
  for (const TemplateFeatures& t : r.templates) {
    const auto it = std::find(ref_names.begin(), ref_names.end(), t.domain_name);
    ASSERT_NE(it, ref_names.end()) << t.domain_name;
    const size_t k = static_cast<size_t>(it - ref_names.begin());
    EXPECT_EQ(t.sequence, ref_seqs[k]) << t.domain_name;
    EXPECT_EQ(t.sum_probs, ref_probs.as<float>()[k]) << t.domain_name;
    const float* ra = ref_aatype.as<float>() + k * static_cast<size_t>(n) * 22;
    EXPECT_EQ(t.aatype, std::vector<float>(ra, ra + n * 22)) << t.domain_name;
    const float* rm = ref_masks.as<float>() + k * static_cast<size_t>(n) * 37;
    EXPECT_EQ(t.masks, std::vector<float>(rm, rm + n * 37)) << t.domain_name;
    const float* rp = ref_pos.as<float>() + k * static_cast<size_t>(n) * 37 * 3;
    double max_diff = 0;
    for (size_t i = 0; i < t.positions.size(); ++i) max_diff = std::max(max_diff, double(std::fabs(t.positions[i] - rp[i])));
    EXPECT_LE(max_diff, 1e-3) << t.domain_name;
  }
  // Output order is AlphaFold's (the reference's, without 1hf9_B).
  std::vector<std::string> ref_without_1hf9;
  for (const std::string& s : ref_names)
    if (s != "1hf9_B") ref_without_1hf9.push_back(s);
  std::vector<std::string> ours;
  for (const TemplateFeatures& t : r.templates) ours.push_back(t.domain_name);
  EXPECT_EQ(ours, ref_without_1hf9);

  // The arrays: AlphaFold's dtypes and shapes.
  const auto arrays = template_feature_arrays(r.templates, n);
  ASSERT_EQ(arrays.size(), 6u);
  for (const auto& [name, array] : arrays) {
    const NpyArray rr = ref.read(name);
    std::vector<int64_t> shape = rr.shape;
    shape[0] = 7;
    EXPECT_EQ(array.shape, shape) << name;
    if (rr.dtype.kind != 'S') {
      EXPECT_EQ(array.dtype, rr.dtype) << name;
    }
  }
}

TEST(Templates, MaxHitsAndDateFilter) {
  const std::string query = q73_sequence();
  const std::vector<TemplateHit> hits = read_hhr(shared("query73/alignments/pdb70_hits.hhr"));
  TemplateFeaturizerOptions o = q73_template_options();
  o.max_hits = 2;
  TemplateSearchResult r = featurize_templates(query, hits, o);
  ASSERT_EQ(r.templates.size(), 2u);
  EXPECT_EQ(r.templates[0].domain_name, "3u8v_A");
  EXPECT_EQ(r.templates[1].domain_name, "2crb_A");
  EXPECT_EQ(r.reports.size(), 3u);  // 3u8v, 1hf9 (missing), 2crb: processing stops there

  // A cutoff before every template's release: nothing survives, each hit says why.
  o = q73_template_options();
  o.max_template_date = "1990-01-01";
  r = featurize_templates(query, hits, o);
  EXPECT_TRUE(r.templates.empty());
  int after_date = 0;
  for (const TemplateHitReport& rep : r.reports) after_date += rep.status == TemplateHitStatus::kAfterDate;
  EXPECT_EQ(after_date, 7);

  o.max_template_date = "2021/12/20";
  EXPECT_NE(error_of([&] { featurize_templates(query, hits, o); }).find("YYYY-MM-DD"), std::string::npos);
  o = q73_template_options();
  o.mmcif_dir = "/nonexistent/mmcifs";
  EXPECT_NE(error_of([&] { featurize_templates(query, hits, o); }).find("/nonexistent/mmcifs"), std::string::npos);
}

TEST(Templates, PrefilterRejectsShortDuplicateAndUnaligned) {
  const std::string query = q73_sequence();
  std::vector<TemplateHit> hits = read_hhr(shared("query73/alignments/pdb70_hits.hhr"));
  ASSERT_GE(hits.size(), 4u);
  hits.resize(4);
  hits[0].aligned_cols = 7;  // 7/73 <= 0.1
  hits[1].hit_sequence = "HKGAEHH";  // fewer than 10 residues
  hits[2].hit_sequence = query;       // the query itself: a duplicate
  const TemplateSearchResult r = featurize_templates(query, hits, q73_template_options());
  int prefiltered = 0;
  for (const TemplateHitReport& rep : r.reports) {
    if (rep.status != TemplateHitStatus::kPrefiltered) continue;
    ++prefiltered;
    if (rep.hit_index == hits[0].index) {
      EXPECT_NE(rep.message.find("align ratio"), std::string::npos);
    }
    if (rep.hit_index == hits[1].index) {
      EXPECT_NE(rep.message.find("too short"), std::string::npos);
    }
    if (rep.hit_index == hits[2].index) {
      EXPECT_NE(rep.message.find("subsequence"), std::string::npos);
    }
  }
  EXPECT_EQ(prefiltered, 3);
  ASSERT_EQ(r.templates.size(), 1u);
  EXPECT_EQ(r.templates[0].domain_name, "3u8v_A");
}

// A hit whose sequence differs from the mmCIF chain (a point mutation) goes through realignment;
// with the same mapping the features equal those of the unmodified hit except that residue.
TEST(Templates, RealignmentWhenHitSequenceDiffers) {
  const std::string query = q73_sequence();
  std::vector<TemplateHit> hits = read_hhr(shared("query73/alignments/pdb70_hits.hhr"));
  const auto it = std::find_if(hits.begin(), hits.end(), [](const TemplateHit& h) { return h.name.rfind("3U8V_A", 0) == 0; });
  ASSERT_NE(it, hits.end());
  const std::vector<TemplateHit> original{*it};
  TemplateHit mutated = *it;
  size_t first = mutated.hit_sequence.find_first_not_of('-');
  mutated.hit_sequence[first + 3] = mutated.hit_sequence[first + 3] == 'W' ? 'Y' : 'W';

  TemplateFeaturizerOptions o = q73_template_options();
  int calls = 0;
  // An identity aligner (both sequences padded to a common frame by hand is kalign's job; here the
  // hit is a substring of the chain at a known offset, so align by that offset).
  o.aligner = [&calls](const std::string& a, const std::string& b) {
    ++calls;
    size_t best = 0, best_same = 0;
    for (size_t off = 0; off + a.size() <= b.size(); ++off) {
      size_t same = 0;
      for (size_t i = 0; i < a.size(); ++i) same += a[i] == b[off + i];
      if (same > best_same) best_same = same, best = off;
    }
    std::string pa = std::string(best, '-') + a + std::string(b.size() - best - a.size(), '-');
    return std::pair<std::string, std::string>{pa, b};
  };
  const TemplateSearchResult ref = featurize_templates(query, original, o);
  EXPECT_EQ(calls, 0);
  const TemplateSearchResult re = featurize_templates(query, {mutated}, o);
  EXPECT_EQ(calls, 1);
  ASSERT_EQ(ref.templates.size(), 1u);
  ASSERT_EQ(re.templates.size(), 1u);
  EXPECT_NE(re.reports[0].message.find("realigned"), std::string::npos);
  EXPECT_EQ(re.templates[0].sequence, ref.templates[0].sequence);
  EXPECT_EQ(re.templates[0].positions, ref.templates[0].positions);
  EXPECT_EQ(re.templates[0].masks, ref.templates[0].masks);

  // Below 90 % identity the realignment is refused (an error report, not an exception).
  TemplateHit unrelated = *it;
  for (char& c : unrelated.hit_sequence)
    if (c != '-') c = 'W';
  const TemplateSearchResult bad = featurize_templates(query, {unrelated}, o);
  EXPECT_TRUE(bad.templates.empty());
  ASSERT_EQ(bad.reports.size(), 1u);
  EXPECT_EQ(bad.reports[0].status, TemplateHitStatus::kFeatureError);
  EXPECT_NE(bad.reports[0].message.find("insufficient similarity"), std::string::npos) << bad.reports[0].message;

  // The same with the real kalign binary, when installed.
  if (kalign_available()) {
    o.aligner = nullptr;
    const TemplateSearchResult k = featurize_templates(query, {mutated}, o);
    ASSERT_EQ(k.templates.size(), 1u) << (k.reports.empty() ? "" : k.reports[0].message);
    EXPECT_EQ(k.templates[0].sequence, ref.templates[0].sequence);
    EXPECT_EQ(k.templates[0].positions, ref.templates[0].positions);
  }
}

TEST(Templates, KalignPairwise) {
  if (!kalign_available()) GTEST_SKIP() << "kalign not installed";
  const auto [a, b] = kalign_pairwise("THVGHGIKHLEDAIK", "MTHVGHGLKHLEDAIKAA");
  ASSERT_EQ(a.size(), b.size());
  std::string ua;
  for (char c : a)
    if (c != '-') ua.push_back(c);
  EXPECT_EQ(ua, "THVGHGIKHLEDAIK");
  EXPECT_EQ(a.find("THVGHG"), b.find("THVGHG"));  // the shared block lines up
  EXPECT_NE(error_of([] { kalign_pairwise("ACD", "ACDEFGH"); }).find("at least 6"), std::string::npos);
  EXPECT_NE(error_of([] { kalign_pairwise("ACDEFGH", "ACDEFGH", "/nonexistent/kalign"); }), "");
}

TEST(Templates, PipelineWithTemplatesMatchesReferenceKeys) {
  MonomerPipelineOptions o;
  o.fasta_path = shared("query73/query.fasta");
  o.msa_dir = shared("query73/alignments");
  o.template_hits_path = shared("query73/alignments/pdb70_hits.hhr");
  o.templates = q73_template_options();
  const MonomerPipelineResult r = run_monomer_pipeline(o);
  NpzReader ref(shared("query73/af2_raw_features.npz"));
  EXPECT_EQ(r.features.names(), ref.names());
  EXPECT_EQ(r.features.at("template_aatype").shape, (std::vector<int64_t>{7, 73, 22}));
  EXPECT_EQ(r.features.at("template_domain_names").strings().front(), "3u8v_A");
  EXPECT_EQ(r.template_reports.size(), 10u);
}

}  // namespace
}  // namespace foldcore::data
