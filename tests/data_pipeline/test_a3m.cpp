// A3M parsing (AlphaFold parse_a3m semantics), Msa helpers, HHblits codes, and the monomer MSA
// merge checked row by row against DeepMind's af2_raw_features.npz for query73.
#include <gtest/gtest.h>
#include <unistd.h>
#include <zlib.h>

#include <filesystem>

#include "data_pipeline/formats/a3m.h"
#include "data_pipeline/formats/msa.h"
#include "data_pipeline/formats/npy.h"
#include "data_pipeline/formats/stockholm.h"
#include "data_pipeline/data_test_util.h"
#include "test_util.h"

namespace foldcore::data {
namespace {

std::string q73(const std::string& f) { return testing::shared_dir() + "/data/query73/" + f; }

int row_sum(const std::vector<int32_t>& v) {
  int s = 0;
  for (int x : v) s += x;
  return s;
}

TEST(A3m, InsertionsBecomeDeletionCounts) {
  const Msa m = parse_a3m("#A3M#\n>q desc\nACDEF\n>s1\nAabcC-EF\n>s2\n-xyCDE.Fz\n");
  ASSERT_EQ(m.depth(), 3u);
  EXPECT_EQ(m.descriptions, (std::vector<std::string>{"q desc", "s1", "s2"}));
  EXPECT_EQ(m.sequences, (std::vector<std::string>{"ACDEF", "AC-EF", "-CDEF"}));
  EXPECT_EQ(m.deletion_matrix[0], (std::vector<int32_t>{0, 0, 0, 0, 0}));
  EXPECT_EQ(m.deletion_matrix[1], (std::vector<int32_t>{0, 3, 0, 0, 0}));
  // Trailing insertions ('z') have no following column and are dropped, as in AlphaFold.
  EXPECT_EQ(m.deletion_matrix[2], (std::vector<int32_t>{0, 2, 0, 0, 0}));
  EXPECT_EQ(parse_a3m(">q\nACDEF\n>s1\nAabcC-EF\n>s2\n-CDEF\n", "s", 2).depth(), 2u);
}

TEST(A3m, RealBfdHandVerifiedRows) {
  const Msa m = read_a3m(q73("alignments/bfd_uniclust_hits.a3m"));
  m.validate();
  ASSERT_EQ(m.depth(), 1024u);
  ASSERT_EQ(m.num_columns(), 73u);
  EXPECT_EQ(m.descriptions[0], "query");
  EXPECT_EQ(row_sum(m.deletion_matrix[0]), 0);
  EXPECT_EQ(m.descriptions[1].rfind("tr|A0A2A6NXF8|A0A2A6NXF8_9BRAD", 0), 0u);
  EXPECT_EQ(m.sequences[1], "MSDHAGVEHHHKAAEHHEHAARHHREAARHHEAGDHHKAAHHAHSAHGHASHAQHHHTEASRHHAEHHGEH--");
  // Rows checked by hand against the file text (file lines 224, 374, 400, 602):
  // "LMSKKAVEHh-HKA..." one insertion before aligned column 9.
  EXPECT_EQ(m.deletion_matrix[111][9], 1);
  EXPECT_EQ(row_sum(m.deletion_matrix[111]), 1);
  EXPECT_EQ(m.sequences[111].substr(0, 12), "LMSKKAVEH-HK");
  // "VSKHEddkhqekaaehqekvalhhedkAAEHH..." 22 insertions before column 5.
  EXPECT_EQ(m.deletion_matrix[186][5], 22);
  EXPECT_EQ(row_sum(m.deletion_matrix[186]), 22);
  EXPECT_EQ(m.sequences[186].substr(0, 8), "VSKHEAAE");
  // 24 insertions ("lhaapharvasrprhhahiahghg") before column 50; 22 before column 8.
  EXPECT_EQ(m.deletion_matrix[199][50], 24);
  EXPECT_EQ(row_sum(m.deletion_matrix[199]), 24);
  EXPECT_EQ(m.deletion_matrix[300][8], 22);
  EXPECT_EQ(row_sum(m.deletion_matrix[300]), 22);
}

TEST(A3m, OtherRealFiles) {
  const Msa k = read_a3m(testing::shared_dir() + "/data/6kwc/bfd_uniref_hits.a3m");
  k.validate();
  EXPECT_EQ(k.depth(), 1428u);
  EXPECT_EQ(k.num_columns(), 191u);
  const Msa q = read_a3m(testing::shared_dir() + "/data/2q2k_A/alignments/bfd_uniclust_hits.a3m");
  EXPECT_EQ(q.depth(), 4u);
  EXPECT_EQ(q.sequences[0], "MGSSHHHHHHSSGLVPGSHMDKKETKHLLKIKKEDYPQIFDFLENVPRGTKTAHIREALRRYIEEIGENP");
  EXPECT_EQ(q.sequences[1], "-------------------MDKKETQHLLKIKKQDYPQIFNFLEGLPKGTKTAHIREALMRYIAEEGNTP");
}

TEST(A3m, GzipGivesTheSameParse) {
  const std::string src = q73("alignments/bfd_uniclust_hits.a3m");
  const auto bytes = read_file_bytes(src);
  const auto dir = std::filesystem::temp_directory_path() / ("fc_a3m_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string gz = (dir / "bfd.a3m.gz").string();
  gzFile g = gzopen(gz.c_str(), "wb");
  gzwrite(g, bytes.data(), static_cast<unsigned>(bytes.size()));
  gzclose(g);
  const Msa a = read_a3m(src), b = read_a3m(gz);
  EXPECT_EQ(a.sequences, b.sequences);
  EXPECT_EQ(a.deletion_matrix, b.deletion_matrix);
  EXPECT_EQ(a.descriptions, b.descriptions);
  std::filesystem::remove_all(dir);
}

TEST(A3m, BadInputs) {
  EXPECT_NE(error_of([] { parse_a3m("", "e.a3m"); }).find("e.a3m: empty file"), std::string::npos);
  EXPECT_NE(error_of([] { parse_a3m("# only a comment\n", "e.a3m"); }).find("no A3M records"), std::string::npos);
  EXPECT_NE(error_of([] { parse_a3m("ACD\n>q\nACD\n", "x.a3m"); }).find("x.a3m:1: A3M sequence data before"),
            std::string::npos);
  EXPECT_NE(error_of([] { parse_a3m(">q\nACD\n>s\nAC\n", "x.a3m"); })
                .find("x.a3m:3: A3M record 's' has 2 aligned columns (upper case and '-'), the query has 3"),
            std::string::npos);
  EXPECT_NE(error_of([] { parse_a3m(">q\nAC*D\n", "x.a3m"); }).find("x.a3m:2: invalid A3M character '*' at column 3"),
            std::string::npos);
  EXPECT_NE(error_of([] { parse_a3m(">q\nabc\n", "x.a3m"); }).find("no aligned columns"), std::string::npos);
  // A file cut mid-row fails on the short last row, naming the file and line.
  const auto bytes = read_file_bytes(q73("alignments/bfd_uniclust_hits.a3m"));
  const std::string cut(bytes.begin(), bytes.begin() + 5000);
  EXPECT_NE(error_of([&] { parse_a3m(cut, "cut.a3m"); }).find("cut.a3m:"), std::string::npos);
}

TEST(Msa, HhblitsCodes) {
  const std::string order = "ACDEFGHIKLMNPQRSTVWYX";
  for (size_t i = 0; i < order.size(); ++i) EXPECT_EQ(hhblits_aa_to_id(order[i]), static_cast<int>(i)) << order[i];
  EXPECT_EQ(hhblits_aa_to_id('-'), 21);
  EXPECT_EQ(hhblits_aa_to_id('B'), 2);
  EXPECT_EQ(hhblits_aa_to_id('Z'), 3);
  EXPECT_EQ(hhblits_aa_to_id('U'), 1);
  EXPECT_EQ(hhblits_aa_to_id('O'), 20);
  EXPECT_EQ(hhblits_aa_to_id('J'), 20);
  EXPECT_EQ(hhblits_aa_to_id('a'), -1);
  EXPECT_EQ(hhblits_aa_to_id('.'), -1);
  Msa bad{{"AC", "a-"}, {{0, 0}, {0, 0}}, {"q", "s"}};
  EXPECT_NE(error_of([&] { msa_features(bad); }).find("sequence 1 ('s') column 0: character 'a'"), std::string::npos);
}

TEST(Msa, TruncateMergeValidate) {
  const Msa a{{"AAA", "CCC", "AAA"}, {{0, 0, 0}, {1, 0, 0}, {0, 2, 0}}, {"q", "c", "dup"}};
  const Msa b{{"CCC", "DDD"}, {{0, 0, 5}, {0, 0, 0}}, {"c2", "d"}};
  EXPECT_EQ(a.truncated(2).depth(), 2u);
  EXPECT_EQ(a.truncated(10).depth(), 3u);
  const Msa m = merge_msas({&a, &b});
  EXPECT_EQ(m.sequences, (std::vector<std::string>{"AAA", "CCC", "DDD"}));
  EXPECT_EQ(m.descriptions, (std::vector<std::string>{"q", "c", "d"}));  // first occurrence wins
  EXPECT_EQ(m.deletion_matrix[1], (std::vector<int32_t>{1, 0, 0}));
  const Msa wrong{{"AC"}, {{0, 0}}, {"w"}};
  EXPECT_NE(error_of([&] { merge_msas({&a, &wrong}); }).find("MSA 1 has 2 columns, MSA 0 has 3"), std::string::npos);
  const Msa ragged{{"AAA", "CC"}, {{0, 0, 0}, {0, 0}}, {"q", "r"}};
  EXPECT_NE(error_of([&] { ragged.validate("x"); }).find("sequence 1 ('r') has 2 aligned columns"), std::string::npos);
  const Msa empty;
  EXPECT_NE(error_of([&] { merge_msas({&a, &empty}); }).find("MSA 1 has no sequences"), std::string::npos);
}

// AlphaFold's monomer pipeline merges uniref90 (truncated to 10000), bfd and mgnify (truncated
// to 501), deduplicating by aligned sequence; the result must be DeepMind's msa feature exactly.
TEST(Msa, Query73MergeMatchesAlphaFoldFeatures) {
  const Msa uniref = read_stockholm(q73("alignments/uniref90_hits.sto"));
  const Msa bfd = read_a3m(q73("alignments/bfd_uniclust_hits.a3m"));
  const Msa mgnify = read_stockholm(q73("alignments/mgnify_hits.sto"));
  ASSERT_EQ(uniref.depth(), 57u);
  ASSERT_EQ(mgnify.depth(), 59u);
  const Msa merged = merge_monomer_msas(uniref, bfd, mgnify);
  EXPECT_EQ(merged.depth(), 1136u);
  const MsaFeatures f = msa_features(merged);

  NpzReader npz(q73("af2_raw_features.npz"));
  const NpyArray msa = npz.read("msa");
  const NpyArray del = npz.read("deletion_matrix_int");
  ASSERT_EQ(msa.shape, (std::vector<int64_t>{1136, 73}));
  ASSERT_EQ(f.depth, 1136);
  const int32_t* em = msa.as<int32_t>();
  const int32_t* ed = del.as<int32_t>();
  int64_t msa_mismatch = 0, del_mismatch = 0, first_bad_row = -1;
  for (int64_t i = 0; i < 1136 * 73; ++i) {
    if (em[i] != f.msa[static_cast<size_t>(i)]) {
      ++msa_mismatch;
      if (first_bad_row < 0) first_bad_row = i / 73;
    }
    del_mismatch += ed[i] != f.deletion_matrix[static_cast<size_t>(i)];
  }
  EXPECT_EQ(msa_mismatch, 0) << "first differing row " << first_bad_row;
  EXPECT_EQ(del_mismatch, 0);
  const NpyArray num = npz.read("num_alignments");
  EXPECT_EQ(num.as<int32_t>()[0], 1136);
}

}  // namespace
}  // namespace foldcore::data
