// Stockholm parsing with AlphaFold's parse_stockholm conversion, truncation, Stockholm -> A3M.
#include <gtest/gtest.h>
#include <unistd.h>
#include <zlib.h>

#include <filesystem>

#include "data_pipeline/formats/a3m.h"
#include "data_pipeline/formats/stockholm.h"
#include "data_pipeline/data_test_util.h"
#include "test_util.h"

namespace foldcore::data {
namespace {

std::string q73(const std::string& f) { return testing::shared_dir() + "/data/query73/alignments/" + f; }

const char* kInterleaved =
    "# STOCKHOLM 1.0\n"
    "#=GF ID test\n"
    "#=GS s1/1-9 DE first hit\n"
    "#=GS s2/3-8 DE\n"
    "\n"
    "query   AC-D\n"
    "s1/1-9  ACxD\n"
    "s2/3-8  -C-D\n"
    "#=GR s1/1-9 PP 9999\n"
    "\n"
    "query   E--F\n"
    "s1/1-9  EklF\n"
    "s2/3-8  E-m-\n"
    "#=GC RF xxxx\n"
    "//\n";

TEST(Stockholm, InterleavedBlocksGapColumnsAndDeletions) {
  LineReader r = LineReader::from_string(kInterleaved, "t.sto");
  const StockholmAlignment sto = read_stockholm_alignment(r);
  EXPECT_EQ(sto.names, (std::vector<std::string>{"query", "s1/1-9", "s2/3-8"}));
  EXPECT_EQ(sto.rows[1], "ACxDEklF");
  EXPECT_EQ(sto.descriptions, (std::vector<std::string>{"", "first hit", ""}));
  const Msa m = stockholm_to_msa(sto);
  // Query columns 2, 5, 6 are gaps: removed; residues there count into the next kept column.
  EXPECT_EQ(m.sequences, (std::vector<std::string>{"ACDEF", "ACDEF", "-CDE-"}));
  EXPECT_EQ(m.deletion_matrix[0], (std::vector<int32_t>{0, 0, 0, 0, 0}));
  EXPECT_EQ(m.deletion_matrix[1], (std::vector<int32_t>{0, 0, 1, 0, 2}));
  EXPECT_EQ(m.deletion_matrix[2], (std::vector<int32_t>{0, 0, 0, 0, 1}));
  EXPECT_EQ(m.descriptions, sto.names);  // AlphaFold keeps the names as descriptions
  // max_sequences keeps the first names only.
  EXPECT_EQ(parse_stockholm(kInterleaved, "t.sto", 2).depth(), 2u);
  // Stockholm -> A3M: query-gap columns become lower-case insertions; reading it back as A3M
  // gives the same Msa.
  const std::string a3m = stockholm_to_a3m(sto);
  EXPECT_EQ(a3m, ">query \nACDEF\n>s1/1-9 first hit\nACxDEklF\n>s2/3-8 \n-CDEm-\n");
  const Msa back = parse_a3m(a3m);
  EXPECT_EQ(back.sequences[0], m.sequences[0]);
  EXPECT_EQ(back.sequences, m.sequences);
  EXPECT_EQ(back.deletion_matrix, m.deletion_matrix);
}

TEST(Stockholm, RealUniref90AndMgnify) {
  const StockholmAlignment sto = read_stockholm_alignment(q73("uniref90_hits.sto"));
  ASSERT_EQ(sto.names.size(), 57u);  // query + 56 hits
  EXPECT_EQ(sto.names[0], "query");
  EXPECT_EQ(sto.names[1], "UniRef90_D7BIZ4/1-73");
  EXPECT_EQ(sto.descriptions[1].rfind("[subseq from] Uncharacterized protein n=1 Tax=Meiothermus silvanus", 0), 0u);
  const Msa m = stockholm_to_msa(sto);
  m.validate();
  EXPECT_EQ(m.num_columns(), 73u);
  EXPECT_EQ(m.sequences[0], "MAAHKGAEHHHKAAEHHEQAAKHHHAAAEHHEKGEHEQAAHHADTAYAHHKHAEEHAAQAAKHDAEHHAPKPH");
  // The query has gaps at file columns 34, 63 and 67. Checked by hand in the file text:
  // row 9 (A0A402A866) has 'K' at column 63 -> one deletion before aligned column 62;
  // row 14 (A0A2N3PRK8/17-83) has 'H' at 34 -> aligned column 34; row 33 'H' at 67 -> 65.
  EXPECT_EQ(m.descriptions[9], "UniRef90_A0A402A866/4-68");
  EXPECT_EQ(m.deletion_matrix[9][62], 1);
  EXPECT_EQ(m.deletion_matrix[14][34], 1);
  EXPECT_EQ(m.deletion_matrix[33][65], 1);
  int total = 0;
  for (const auto& row : m.deletion_matrix)
    for (int v : row) total += v;
  EXPECT_EQ(total, 3);  // those three are the only residues in query-gap columns

  const Msa g = read_stockholm(q73("mgnify_hits.sto"));
  EXPECT_EQ(g.depth(), 59u);  // query + 58 hits
  EXPECT_EQ(g.num_columns(), 73u);
  EXPECT_EQ(read_stockholm(q73("mgnify_hits.sto"), 10).depth(), 10u);
}

TEST(Stockholm, Real2q2k) {
  const std::string d = testing::shared_dir() + "/data/2q2k_A/alignments/";
  const StockholmAlignment u = read_stockholm_alignment(d + "uniprot_hits.sto");
  EXPECT_EQ(u.names.size(), 21u);  // query + 20 hits
  EXPECT_EQ(u.names[1].rfind("tr|", 0), 0u);
  const Msa g = read_stockholm(d + "mgnify_hits.sto");
  ASSERT_EQ(g.depth(), 7u);
  EXPECT_EQ(g.num_columns(), 70u);
  EXPECT_EQ(g.sequences[4], "------------------------------VKKSDLGQVTSFLKEVPEGKKQDVLDEVLK----------");
  EXPECT_EQ(read_stockholm(d + "uniref90_hits.sto").num_columns(), 70u);
}

TEST(Stockholm, GzipGivesTheSameParse) {
  const auto bytes = read_file_bytes(q73("uniref90_hits.sto"));
  const auto dir = std::filesystem::temp_directory_path() / ("fc_sto_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string gz = (dir / "u.sto.gz").string();
  gzFile f = gzopen(gz.c_str(), "wb");
  gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size()));
  gzclose(f);
  const Msa a = read_stockholm(q73("uniref90_hits.sto")), b = read_stockholm(gz);
  EXPECT_EQ(a.sequences, b.sequences);
  EXPECT_EQ(a.deletion_matrix, b.deletion_matrix);
  std::filesystem::remove_all(dir);
}

TEST(Stockholm, BadInputs) {
  EXPECT_NE(error_of([] { parse_stockholm("", "e.sto"); }).find("e.sto: empty file"), std::string::npos);
  EXPECT_NE(error_of([] { parse_stockholm(">q\nACD\n", "f.sto"); }).find("f.sto:1: not a Stockholm file"),
            std::string::npos);
  EXPECT_NE(error_of([] { parse_stockholm("# STOCKHOLM 1.0\nq ACD\ns AC-\n", "t.sto"); }).find("truncated Stockholm file"),
            std::string::npos);
  EXPECT_NE(error_of([] { parse_stockholm("# STOCKHOLM 1.0\n//\n", "t.sto"); }).find("no sequences"), std::string::npos);
  EXPECT_NE(error_of([] { parse_stockholm("# STOCKHOLM 1.0\nq ACD\ns AC\n//\n", "t.sto"); })
                .find("sequence 's' has 2 alignment columns, the query 'q' has 3"),
            std::string::npos);
  EXPECT_NE(error_of([] { parse_stockholm("# STOCKHOLM 1.0\nq ACD\ns\n//\n", "t.sto"); }).find("t.sto:3: sequence line without"),
            std::string::npos);
  EXPECT_NE(error_of([] { parse_stockholm("# STOCKHOLM 1.0\nq AC1\n//\n", "t.sto"); }).find("t.sto:2: invalid character '1'"),
            std::string::npos);
  EXPECT_NE(error_of([] { parse_stockholm("# STOCKHOLM 1.0\n#=GS x\nq A\n//\n", "t.sto"); }).find("malformed #=GS"),
            std::string::npos);
  // A real file cut in half has no terminator.
  const auto bytes = read_file_bytes(q73("mgnify_hits.sto"));
  const std::string cut(bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(bytes.size() / 2));
  EXPECT_NE(error_of([&] { parse_stockholm(cut, "cut.sto"); }).find("cut.sto"), std::string::npos);
}

}  // namespace
}  // namespace foldcore::data
