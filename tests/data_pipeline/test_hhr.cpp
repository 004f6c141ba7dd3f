// HHR parsing (AlphaFold parse_hhr / TemplateHit semantics) on real hhsearch output.
#include <gtest/gtest.h>

#include "data_pipeline/formats/hhr.h"
#include "data_pipeline/data_test_util.h"
#include "test_util.h"

namespace foldcore::data {
namespace {

std::vector<int32_t> iota_from(int32_t start, int n) {
  std::vector<int32_t> v(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) v[static_cast<size_t>(i)] = start + i;
  return v;
}

TEST(Hhr, Query73Pdb70) {
  const auto hits = read_hhr(testing::shared_dir() + "/data/query73/alignments/pdb70_hits.hhr");
  ASSERT_EQ(hits.size(), 10u);
  // Names, Aligned_cols and Sum_probs as written in the file.
  const char* names[] = {"1HF9_B", "2CRB_A", "4ZEY_A", "3U8V_A", "1PSM_A", "5KC1_F", "5KC1_J", "3ZEE_A", "4I6P_A", "2Q2K_A"};
  const int cols[] = {22, 20, 20, 32, 18, 17, 17, 15, 16, 17};
  const double sums[] = {13.1, 11.0, 10.8, 15.8, 8.0, 0.0, 0.0, 7.4, 0.0, 0.0};
  for (int i = 0; i < 10; ++i) {
    const TemplateHit& h = hits[static_cast<size_t>(i)];
    EXPECT_EQ(h.index, i + 1);
    EXPECT_EQ(h.name.rfind(std::string(names[i]) + " ", 0), 0u) << h.name;
    EXPECT_EQ(h.aligned_cols, cols[i]) << i;
    EXPECT_DOUBLE_EQ(h.sum_probs, sums[i]) << i;
    EXPECT_EQ(h.query.size(), h.hit_sequence.size());
    EXPECT_EQ(h.indices_query.size(), h.query.size());
    EXPECT_EQ(h.indices_hit.size(), h.hit_sequence.size());
  }
  const TemplateHit& h = hits[0];
  EXPECT_EQ(h.name,
            "1HF9_B ATPASE INHIBITOR (MITOCHONDRIAL); ATPASE INHIBITOR, F1 ATPASE INHIBITOR; NMR {BOS TAURUS} "
            "SCOP: h.4.8.1");
  EXPECT_DOUBLE_EQ(h.probability, 7.51);
  EXPECT_DOUBLE_EQ(h.e_value, 380.0);
  EXPECT_EQ(h.query, "AEHHHKAAEHHEQAAKHHHAAA");         // "Q query 7 ... 28"
  EXPECT_EQ(h.hit_sequence, "ISHHAKEIERLQKEIERHKQSI");  // "T 1HF9_B 10 ... 31"
  EXPECT_EQ(h.indices_query, iota_from(6, 22));
  EXPECT_EQ(h.indices_hit, iota_from(9, 22));
  EXPECT_EQ(hits[9].indices_query.front(), 55);  // 2Q2K_A: query 56-72, template 54-70
  EXPECT_EQ(hits[9].indices_hit.front(), 53);
}

TEST(Hhr, MultiBlockAndGaps6kwc) {
  const auto hits = read_hhr(testing::shared_dir() + "/data/6kwc/hhsearch_output.hhr");
  ASSERT_EQ(hits.size(), 60u);
  // Hit 1 (2DFB_A) spans three blocks: query 3-82, 83-162, 163-191; template 2-190.
  const TemplateHit& a = hits[0];
  EXPECT_EQ(a.name.rfind("2DFB_A Endo-1,4-beta-xylanase 2", 0), 0u);
  EXPECT_EQ(a.aligned_cols, 189);
  EXPECT_DOUBLE_EQ(a.sum_probs, 182.2);
  ASSERT_EQ(a.query.size(), 189u);
  EXPECT_EQ(a.indices_query, iota_from(2, 189));
  EXPECT_EQ(a.indices_hit, iota_from(1, 189));
  EXPECT_EQ(a.query.substr(0, 10), "TIQPGTGYNN");
  EXPECT_EQ(a.query.substr(160), "QGLTLGTMDYQIVAVQGYFSSGSASITVS");
  // Hit 7 (1PVX_A): last block "Q 6KWC_1 164 GLTL-GTMDY..." has a query gap -> -1, and the
  // template residue there still advances the template index.
  const TemplateHit& g = hits[6];
  EXPECT_EQ(g.name.rfind("1PVX_A ", 0), 0u);
  const size_t last = g.query.size() - 29;  // start of the last 29-column block
  EXPECT_EQ(g.query.substr(last), "GLTL-GTMDYQIVAVQGYFSSGSASITVS");
  EXPECT_EQ(g.indices_query[last], 163);
  EXPECT_EQ(g.indices_query[last + 3], 166);
  EXPECT_EQ(g.indices_query[last + 4], -1);
  EXPECT_EQ(g.indices_query[last + 5], 167);
  EXPECT_EQ(g.hit_sequence.substr(last), "GLNVTGDHYYQIVATEGYFSSGYARITVA");
  EXPECT_EQ(g.indices_hit[last], 162);
  EXPECT_EQ(g.indices_hit[last + 4], 166);
  EXPECT_EQ(g.indices_hit.back(), 190);
  // Template gaps elsewhere: every '-' in either sequence is -1 and only there.
  for (const TemplateHit& h : hits)
    for (size_t i = 0; i < h.query.size(); ++i) {
      ASSERT_EQ(h.query[i] == '-', h.indices_query[i] == -1);
      ASSERT_EQ(h.hit_sequence[i] == '-', h.indices_hit[i] == -1);
    }
}

const char* kMini =
    "Query         q\n"
    "Match_columns 4\n"
    "\n"
    "No 1\n"
    ">1ABC_A something\n"
    "Probab=50.0  E-value=1e-3  Score=10.0  Aligned_cols=4  Identities=25%  Similarity=0.1  Sum_probs=2.5  "
    "Template_Neff=1.0\n"
    "\n"
    "Q q                 1 AC-DE    4 (4)\n"
    "T 1ABC_A            5 A-KDE    8 (20)\n";

TEST(Hhr, SyntheticAndBadInputs) {
  const auto hits = parse_hhr(kMini, "m.hhr");
  ASSERT_EQ(hits.size(), 1u);
  EXPECT_EQ(hits[0].query, "AC-DE");
  EXPECT_EQ(hits[0].indices_query, (std::vector<int32_t>{0, 1, -1, 2, 3}));
  EXPECT_EQ(hits[0].indices_hit, (std::vector<int32_t>{4, -1, 5, 6, 7}));
  EXPECT_DOUBLE_EQ(hits[0].sum_probs, 2.5);
  EXPECT_TRUE(parse_hhr("Query q\nMatch_columns 4\n", "none.hhr").empty());  // no hits is valid

  const std::string mini = kMini;
  auto replace = [&](const std::string& from, const std::string& to) {
    std::string s = mini;
    s.replace(s.find(from), from.size(), to);
    return s;
  };
  EXPECT_NE(error_of([] { parse_hhr("", "e.hhr"); }).find("e.hhr: empty file"), std::string::npos);
  EXPECT_NE(error_of([] { parse_hhr(">x\nACD\n", "f.hhr"); }).find("f.hhr:1: not an HHR file"), std::string::npos);
  // Block length disagrees with start/end and gaps (AlphaFold asserts the same).
  EXPECT_NE(error_of([&] { parse_hhr(replace("    4 (4)", "    5 (4)"), "b.hhr"); }).find("b.hhr:8: hit 1: query block"),
            std::string::npos);
  EXPECT_NE(error_of([&] { parse_hhr(replace("A-KDE", "A-KD"), "b.hhr"); }).find("b.hhr:9: hit 1: template block has 4"),
            std::string::npos);
  EXPECT_NE(error_of([&] { parse_hhr(replace("Sum_probs=2.5", "Sum_probs=x"), "b.hhr"); }).find("bad number 'x' for Sum_probs"),
            std::string::npos);
  EXPECT_NE(error_of([&] { parse_hhr(replace("Aligned_cols=4", "Cols=4"), "b.hhr"); }).find("summary line lacks"),
            std::string::npos);
  EXPECT_NE(error_of([&] { parse_hhr(replace(">1ABC_A", "1ABC_A"), "b.hhr"); }).find("b.hhr:5: hit 1: expected a '>' name"),
            std::string::npos);
  EXPECT_NE(error_of([&] { parse_hhr(replace("No 1", "No one"), "b.hhr"); }).find("bad hit number"), std::string::npos);
  EXPECT_NE(error_of([&] { parse_hhr(replace("AC-DE    4", "AC-DE"), "b.hhr"); }).find("cannot parse alignment line"),
            std::string::npos);
  // Truncated: the template line is missing.
  EXPECT_NE(error_of([&] { parse_hhr(mini.substr(0, mini.find("T 1ABC_A")), "t.hhr"); }).find("hit 1 is incomplete"),
            std::string::npos);
  EXPECT_NE(error_of([&] { parse_hhr(mini.substr(0, mini.find("Probab")), "t.hhr"); }).find("incomplete"),
            std::string::npos);
}

}  // namespace
}  // namespace foldcore::data
