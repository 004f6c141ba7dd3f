// FASTA parsing (multi-record, multi-line, alphabets, errors) and writing.
#include <gtest/gtest.h>
#include <unistd.h>
#include <zlib.h>

#include <filesystem>

#include "data_pipeline/formats/fasta.h"
#include "data_pipeline/data_test_util.h"
#include "test_util.h"

namespace foldcore::data {
namespace {

TEST(Fasta, RealQuery) {
  const std::string dir = testing::shared_dir() + "/data";
  const auto q = read_fasta(dir + "/query73/query.fasta");
  ASSERT_EQ(q.size(), 1u);
  EXPECT_EQ(q[0].description, "query");
  EXPECT_EQ(q[0].sequence, "MAAHKGAEHHHKAAEHHEQAAKHHHAAAEHHEKGEHEQAAHHADTAYAHHKHAEEHAAQAAKHDAEHHAPKPH");
  const auto k = read_fasta(dir + "/6kwc/6kwc.fasta");
  ASSERT_EQ(k.size(), 1u);
  EXPECT_EQ(k[0].sequence.size(), 191u);
}

TEST(Fasta, MultiRecordMultiLineBlankLines) {
  const auto r = parse_fasta("; comment\n\n>a first one  \nACDE\nFGHI\n\n>b\r\nklmn\n>c\nW\n");
  ASSERT_EQ(r.size(), 3u);
  EXPECT_EQ(r[0].description, "a first one");
  EXPECT_EQ(r[0].sequence, "ACDEFGHI");
  EXPECT_EQ(r[1].description, "b");
  EXPECT_EQ(r[1].sequence, "klmn");
  EXPECT_EQ(r[2].sequence, "W");
  FastaOptions up;
  up.uppercase = true;
  EXPECT_EQ(parse_fasta(">b\nklmn\n", "s", up)[0].sequence, "KLMN");
}

TEST(Fasta, Alphabets) {
  FastaOptions nuc;
  nuc.alphabet = Alphabet::kNucleic;
  EXPECT_EQ(parse_fasta(">d\nACGTUNacgt\n", "s", nuc)[0].sequence, "ACGTUNacgt");
  EXPECT_NE(error_of([&] { parse_fasta(">d\nACGTE\n", "dna.fa", nuc); }).find("dna.fa:2: invalid nucleic acid character 'E' at column 5"),
            std::string::npos);
  FastaOptions aligned;
  aligned.alphabet = Alphabet::kProteinAligned;
  EXPECT_EQ(parse_fasta(">a\n-AcD.\n", "s", aligned)[0].sequence, "-AcD.");
  EXPECT_NE(error_of([] { parse_fasta(">a\nAC-D\n", "p.fa"); }).find("p.fa:2: invalid protein character '-' at column 3"),
            std::string::npos);
  EXPECT_NE(error_of([] { parse_fasta(">a\nAC1D\n", "p.fa"); }).find("'1'"), std::string::npos);
  FastaOptions any;
  any.alphabet = Alphabet::kAny;
  EXPECT_EQ(parse_fasta(">a\nA*1\n", "s", any)[0].sequence, "A*1");
}

TEST(Fasta, Errors) {
  EXPECT_NE(error_of([] { parse_fasta("", "e.fa"); }).find("e.fa: empty file"), std::string::npos);
  EXPECT_NE(error_of([] { parse_fasta("\n\n", "e.fa"); }).find("no FASTA records"), std::string::npos);
  EXPECT_NE(error_of([] { parse_fasta("ACDE\n>a\nAC\n", "s.fa"); }).find("s.fa:1: sequence data before the first '>'"),
            std::string::npos);
  EXPECT_NE(error_of([] { parse_fasta(">a\n>b\nAC\n", "s.fa"); }).find("s.fa:1: record 'a' has an empty sequence"),
            std::string::npos);
  FastaOptions lax;
  lax.allow_empty_sequence = true;
  lax.allow_no_records = true;
  EXPECT_EQ(parse_fasta(">a\n>b\nAC\n", "s", lax).size(), 2u);
  EXPECT_TRUE(parse_fasta("", "s", lax).empty());
  EXPECT_NE(error_of([] { read_fasta("/nonexistent.fa"); }).find("cannot open"), std::string::npos);
  // A binary file is rejected as bad characters, not crashed on.
  const std::string bin("\x93NUMPY\x01\x00\xff\xfe", 10);
  EXPECT_NE(error_of([&] { parse_fasta(">x\n" + bin, "b.fa"); }).find("b.fa:2: invalid protein character"),
            std::string::npos);
}

TEST(Fasta, WriteReadRoundTripPlainAndGzip) {
  const std::vector<FastaRecord> recs = {{"first record", std::string(203, 'A') + "CDE"}, {"second", "MKV"}};
  const std::string text = format_fasta(recs, 60);
  EXPECT_EQ(text.substr(0, 14 + 61), ">first record\n" + std::string(60, 'A') + "\n");
  const auto back = parse_fasta(text);
  ASSERT_EQ(back.size(), 2u);
  EXPECT_EQ(back[0].sequence, recs[0].sequence);
  EXPECT_EQ(back[1].description, "second");
  EXPECT_EQ(format_fasta(recs, 0), ">first record\n" + recs[0].sequence + "\n>second\nMKV\n");

  const auto dir = std::filesystem::temp_directory_path() / ("fc_fasta_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string p = (dir / "out.fasta").string();
  write_fasta(p, recs);
  EXPECT_EQ(read_fasta(p)[0].sequence, recs[0].sequence);
  const std::string gz = (dir / "out.fa.gz").string();
  gzFile g = gzopen(gz.c_str(), "wb");
  gzwrite(g, text.data(), static_cast<unsigned>(text.size()));
  gzclose(g);
  const auto z = read_fasta(gz);
  ASSERT_EQ(z.size(), 2u);
  EXPECT_EQ(z[0].sequence, recs[0].sequence);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace foldcore::data
