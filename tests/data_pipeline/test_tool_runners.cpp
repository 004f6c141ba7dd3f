// Tool runners run end to end with the REAL tools (jackhmmer, hhblits, hhsearch, hmmbuild,
// hmmsearch, kalign, mmseqs) on query73 against tiny databases built from its real alignments'
// sequences (test_search_databases.h), single-threaded. Also: AlphaFold's exact flags, and the
// errors for a missing tool, a missing database and a failing run.
#include <gtest/gtest.h>

#include <filesystem>
#include <functional>
#include <map>

#include "core/error.h"
#include "data_pipeline/formats/a3m.h"
#include "data_pipeline/formats/stockholm.h"
#include "data_pipeline/search/subprocess.h"
#include "data_pipeline/formats/text_reader.h"
#include "data_pipeline/search/tool_runners.h"
#include "test_search_databases.h"
#include "data_pipeline/data_test_util.h"

namespace foldcore::data {
namespace {
namespace fs = std::filesystem;
using namespace search_test;

#define EXPECT_CONTAINS(haystack, needle) EXPECT_NE((haystack).find(needle), std::string::npos) << (haystack)

// Skips when a tool is not installed (setup.sh installs them all; other machines may not have them).
#define REQUIRE_TOOL(name)                                                           \
  do {                                                                               \
    if (find_program(name).empty()) GTEST_SKIP() << name << " is not installed";     \
  } while (0)

TEST(ToolRunners, AlphaFoldFlags) {
  JackhmmerOptions j;
  j.database_path = "db.fasta";
  j.tool.cpus = 8;
  EXPECT_EQ(format_command(jackhmmer_command(j, "q.fasta", "out.sto")),
            "jackhmmer -o /dev/null -A out.sto --noali --F1 0.0005 --F2 5e-05 --F3 5e-07 --incE 0.0001 -E 0.0001 "
            "--cpu 8 -N 1 q.fasta db.fasta");
  j.z_value = 135301051;
  j.dom_e = 0.5;
  j.incdom_e = 0.25;
  EXPECT_CONTAINS(format_command(jackhmmer_command(j, "q", "o")), "-N 1 -Z 135301051 --domE 0.5 --incdomE 0.25 q db");

  HhblitsOptions h;
  h.databases = {"bfd/bfd", "uniref30/UniRef30"};
  h.tool.cpus = 4;
  EXPECT_EQ(format_command(hhblits_command(h, "q.fasta", "o.a3m")),
            "hhblits -i q.fasta -cpu 4 -oa3m o.a3m -o /dev/null -n 3 -e 0.001 -maxseq 1000000 -realign_max 100000 "
            "-maxfilt 100000 -min_prefilter_hits 1000 -d bfd/bfd -d uniref30/UniRef30");

  HhsearchOptions s;
  s.databases = {"pdb70/pdb70"};
  EXPECT_EQ(format_command(hhsearch_command(s, "in.a3m", "out.hhr")),
            "hhsearch -i in.a3m -o out.hhr -maxseq 1000000 -cpu 1 -d pdb70/pdb70");

  HmmsearchOptions m;
  m.database_path = "pdb_seqres.txt";
  EXPECT_EQ(format_command(hmmsearch_command(m, "q.hmm", "out.sto")),
            "hmmsearch --noali --cpu 1 --F1 0.1 --F2 0.1 --F3 0.1 --incE 100 -E 100 --domE 100 --incdomE 100 "
            "-A out.sto q.hmm pdb_seqres.txt");
}

TEST(ToolRunners, JackhmmerFindsTheKnownUniref90Hits) {
  REQUIRE_TOOL("jackhmmer");
  const SearchTestData& d = search_test_data();
  TempDir out("fc_jackhmmer");
  JackhmmerOptions o;
  o.database_path = d.uniref90();
  const JackhmmerResult r = run_jackhmmer(o, d.query_fasta, out.file("uniref90_hits.sto"));
  EXPECT_CONTAINS(r.run.command, "--cpu 1 -N 1");
  r.msa.validate();
  ASSERT_GE(r.msa.depth(), 2u);
  EXPECT_EQ(r.msa.sequences[0], d.query_sequence);
  EXPECT_EQ(r.alignment.names[0], "query");
  // Every hit of DeepMind's uniref90_hits.sto for query73 is found again (hits are named
  // "<entry>/<from>-<to>"), aligned in the same register: where both alignments have a residue in
  // a query column it is the same residue, and ours aligns nearly as many columns. (Not exactly the
  // same: our database holds only the hit domains, so alignments near the ends can be shorter.)
  const Msa expected = read_stockholm(q73("alignments/uniref90_hits.sto"));
  std::map<std::string, size_t> ours;
  for (size_t i = 1; i < r.alignment.names.size(); ++i) {
    const std::string& n = r.alignment.names[i];
    ours[n.substr(0, n.rfind('/'))] = i;
  }
  size_t matched = 0;
  for (size_t i = 1; i < expected.depth(); ++i) {
    const auto it = ours.find(safe_name(expected.descriptions[i]));
    ASSERT_NE(it, ours.end()) << expected.descriptions[i];
    const std::string& a = r.msa.sequences[it->second];
    const std::string& b = expected.sequences[i];
    int both = 0, same = 0, theirs = 0;
    for (size_t k = 0; k < a.size(); ++k) {
      theirs += b[k] != '-';
      if (a[k] == '-' || b[k] == '-') continue;
      ++both;
      same += a[k] == b[k];
    }
    EXPECT_EQ(same, both) << expected.descriptions[i] << "\n" << a << "\n" << b;
    EXPECT_GE(both, theirs - 8) << expected.descriptions[i] << "\n" << a << "\n" << b;
    matched += same == both;
  }
  EXPECT_EQ(matched, 56u);
  EXPECT_EQ(run_jackhmmer(o, d.query_fasta, out.file("t.sto"), 5).msa.depth(), 5u);  // max_sequences
  // No temporary file is left next to the output.
  for (const auto& e : fs::directory_iterator(out.path())) EXPECT_EQ(e.path().string().find(".tmp."), std::string::npos);
}

TEST(ToolRunners, MissingToolMissingDatabaseAndFailedRun) {
  const SearchTestData& d = search_test_data();
  TempDir out("fc_jackhmmer");
  JackhmmerOptions o;
  o.database_path = d.uniref90();
  {
    ScopedEnv path("PATH", out.path());  // a PATH without hmmer
    EXPECT_CONTAINS(error_of([&] { run_jackhmmer(o, d.query_fasta, out.file("x.sto")); }),
                    "jackhmmer not found in PATH; install hmmer");
    HhblitsOptions h;
    h.databases = {d.data_dir + "/uniref30/UniRef30_2021_03"};  // the tool is checked first
    EXPECT_CONTAINS(error_of([&] { run_hhblits(h, d.query_fasta, out.file("x.a3m")); }),
                    "hhblits not found in PATH; install hhsuite");
    MmseqsOptions m;
    m.database_path = d.data_dir + "/mmseqs/uniref90";
    EXPECT_CONTAINS(error_of([&] { run_mmseqs(m, d.query_fasta, out.file("x.a3m")); }),
                    "mmseqs not found in PATH; install mmseqs2");
    EXPECT_CONTAINS(error_of([&] { run_kalign({}, {"ACDEFGH", "ACDEFGHI"}); }), "kalign not found in PATH; install kalign");
  }
  REQUIRE_TOOL("jackhmmer");
  o.tool.binary = "/nonexistent/bin/jackhmmer";
  EXPECT_CONTAINS(error_of([&] { run_jackhmmer(o, d.query_fasta, out.file("x.sto")); }),
                  "/nonexistent/bin/jackhmmer is not an executable file; install hmmer");
  o.tool.binary = "";
  o.database_path = d.data_dir + "/uniref90/missing.fasta";
  EXPECT_CONTAINS(error_of([&] { run_jackhmmer(o, d.query_fasta, out.file("x.sto")); }),
                  "Jackhmmer database " + d.data_dir + "/uniref90/missing.fasta not found");
  HhblitsOptions h;
  h.databases = {d.data_dir + "/bfd/nothing_here"};
  EXPECT_CONTAINS(error_of([&] { run_hhblits(h, d.query_fasta, out.file("x.a3m")); }),
                  "HHblits database " + d.data_dir + "/bfd/nothing_here not found");
  HhsearchOptions s;
  s.databases = {d.data_dir + "/pdb70/pdb71"};
  EXPECT_CONTAINS(error_of([&] { run_hhsearch(s, d.query_fasta, out.file("x.hhr")); }),
                  "HHsearch database " + d.data_dir + "/pdb70/pdb71 not found");
  HmmsearchOptions hs;
  hs.database_path = d.data_dir + "/pdb_seqres/none.txt";
  EXPECT_CONTAINS(error_of([&] { run_hmmsearch(hs, "q.hmm", out.file("x.sto")); }), "hmmsearch database");
  MmseqsOptions m;
  m.database_path = d.data_dir + "/mmseqs/none";
  EXPECT_CONTAINS(error_of([&] { run_mmseqs(m, d.query_fasta, out.file("x.a3m")); }),
                  "MMseqs2 database " + d.data_dir + "/mmseqs/none not found");

  // A run that fails: the error names the tool, its exit status, the command and stderr's tail,
  // and no output (or temporary) file is left.
  o.database_path = d.uniref90();
  write_file_atomic(out.file("bad.fasta"), "this is not a FASTA file\n");
  const std::string e = error_of([&] { run_jackhmmer(o, out.file("bad.fasta"), out.file("bad.sto")); });
  EXPECT_CONTAINS(e, "failed (exit status");
  EXPECT_CONTAINS(e, "--noali");
  EXPECT_CONTAINS(e, "stderr (last lines)");
  EXPECT_CONTAINS(e, "while running jackhmmer on " + out.file("bad.fasta"));
  EXPECT_EQ(fs::directory_iterator(out.path())->path().filename(), "bad.fasta");
  EXPECT_EQ(std::distance(fs::directory_iterator(out.path()), fs::directory_iterator()), 1);
}

TEST(ToolRunners, TimeoutKillsAHangingToolAndLeavesNoOutput) {
  const SearchTestData& d = search_test_data();
  TempDir out("fc_timeout");
  // A stand-in "jackhmmer" that starts writing its -A output ($4) and then hangs.
  const std::string fake = out.file("jackhmmer");
  write_file_atomic(fake, "#!/bin/sh\necho partial > \"$4\"\nexec sleep 30\n");
  fs::permissions(fake, fs::perms::owner_all);
  JackhmmerOptions o;
  o.tool.binary = fake;
  o.tool.timeout_s = 0.3;
  o.database_path = d.uniref90();
  const std::string e = error_of([&] { run_jackhmmer(o, d.query_fasta, out.file("hits.sto")); });
  EXPECT_CONTAINS(e, "failed (timed out after 0.3 s and was killed)");
  EXPECT_FALSE(fs::exists(out.file("hits.sto")));
  EXPECT_EQ(std::distance(fs::directory_iterator(out.path()), fs::directory_iterator()), 1);  // only the script
  for (const auto& entry : fs::directory_iterator(out.path()))
    EXPECT_EQ(entry.path().string().find(".tmp."), std::string::npos) << entry.path();
}

TEST(ToolRunners, HhblitsBuildsAnMsaFromATinyHhsuiteDatabase) {
  REQUIRE_TOOL("hhblits");
  const SearchTestData& d = search_test_data();
  TempDir out("fc_hhblits");
  HhblitsOptions o;
  o.databases = {d.uniref30()};
  const HhblitsResult r = run_hhblits(o, d.query_fasta, out.file("bfd_uniref_hits.a3m"));
  r.msa.validate();
  EXPECT_EQ(r.msa.descriptions[0], "query");
  EXPECT_EQ(r.msa.sequences[0], d.query_sequence);
  // Most of the 56 uniref90 homologs are found (the one identical to the query, D7BIZ4, is
  // filtered out by hhblits as redundant), each row an entry of the database.
  EXPECT_GE(r.msa.depth(), 40u);
  std::map<std::string, std::string> db;
  for (const FastaRecord& rec : d.uniref90_records) db[rec.description] = rec.sequence;
  for (size_t i = 1; i < r.msa.depth(); ++i) {
    const std::string name = safe_name(r.msa.descriptions[i]);
    ASSERT_TRUE(db.count(name)) << name;
    // Aligned residues are the entry's residues in order (the A3M parser removed insertions).
    const std::string res = ungapped(r.msa.sequences[i]);
    EXPECT_NE(res, "");
    size_t pos = 0;
    for (char c : res) {
      pos = db[name].find(c, pos);
      ASSERT_NE(pos, std::string::npos) << name;
      ++pos;
    }
  }
}

TEST(ToolRunners, HhsearchFindsTemplatesInATinyPdb70) {
  REQUIRE_TOOL("hhsearch");
  const SearchTestData& d = search_test_data();
  TempDir out("fc_hhsearch");
  // Query: DeepMind's uniref90 MSA for query73 as A3M (what AlphaFold's template search feeds hhsearch).
  write_file_atomic(out.file("query.a3m"),
                    stockholm_to_a3m(read_stockholm_alignment(q73("alignments/uniref90_hits.sto"))));
  HhsearchOptions o;
  o.databases = {d.pdb70()};
  const HhsearchResult r = run_hhsearch(o, out.file("query.a3m"), out.file("pdb70_hits.hhr"));
  ASSERT_GE(r.hits.size(), 2u);
  EXPECT_EQ(r.hits[0].name.rfind("HOMOLOG_A", 0), 0u);  // the homolog control first, confidently
  EXPECT_GT(r.hits[0].probability, 90.0);
  bool template_hit = false;
  for (const TemplateHit& h : r.hits) {
    template_hit = template_hit || h.name.find("mol:protein") != std::string::npos;
    // Each aligned query residue is the query's residue at that index.
    ASSERT_EQ(h.query.size(), h.indices_query.size());
    for (size_t k = 0; k < h.query.size(); ++k)
      if (h.indices_query[k] >= 0) {
        EXPECT_EQ(h.query[k], d.query_sequence.at(h.indices_query[k])) << h.name;
      }
  }
  EXPECT_TRUE(template_hit);  // and at least one real PDB chain
}

TEST(ToolRunners, HmmsearchTemplateSearchOnPdbSeqres) {
  REQUIRE_TOOL("hmmsearch");
  const SearchTestData& d = search_test_data();
  TempDir out("fc_hmmsearch");
  HmmsearchOptions o;
  o.database_path = d.pdb_seqres();
  const HmmsearchResult r =
      run_hmmsearch_on_msa({}, o, q73("alignments/uniref90_hits.sto"), out.file("pdb_hits.sto"));
  EXPECT_CONTAINS(r.run.command, "--hand");
  ASSERT_FALSE(r.hits.empty());
  std::map<std::string, std::string> seqres;
  for (const FastaRecord& rec : d.seqres_records()) seqres[safe_name(rec.description)] = rec.sequence;
  bool his_rich = false;
  for (const HmmsearchHit& h : r.hits) {
    // --hand with the query's RF columns: every hit has one residue or gap per query position.
    EXPECT_EQ(h.aligned.size(), d.query_sequence.size()) << h.name;
    ASSERT_TRUE(seqres.count(h.name)) << h.name;
    ASSERT_GE(h.start, 1);
    // The row's residues are exactly the target's residues start..end.
    size_t k = 0;
    while (k < r.alignment.names.size() && r.alignment.names[k].rfind(h.name + "/" + std::to_string(h.start), 0) != 0) ++k;
    ASSERT_LT(k, r.alignment.names.size());
    EXPECT_EQ(ungapped(r.alignment.rows[k]), seqres[h.name].substr(h.start - 1, h.end - h.start + 1)) << h.name;
    his_rich = his_rich || h.name.rfind("3u8v_", 0) == 0;  // the His-rich metal-binding protein
  }
  EXPECT_TRUE(his_rich);
}

TEST(ToolRunners, HmmsearchHitsFromAnAlignment) {
  StockholmAlignment sto;
  sto.names = {"1abc_A/3-9", "odd/name", "2xyz_B/x-4"};
  sto.rows = {"AC.dE-FgH", "AC.-E-F.H", "--.-E-F.H"};
  sto.descriptions = {"mol:protein", "", ""};
  const std::vector<HmmsearchHit> hits = hmmsearch_hits(sto);
  ASSERT_EQ(hits.size(), 3u);
  EXPECT_EQ(hits[0].name, "1abc_A");
  EXPECT_EQ(hits[0].start, 3);
  EXPECT_EQ(hits[0].end, 9);
  EXPECT_EQ(hits[0].aligned, "ACE-FH");  // insertions (lower case) and '.' removed
  EXPECT_EQ(hits[0].description, "mol:protein");
  EXPECT_EQ(hits[1].name, "odd/name");
  EXPECT_EQ(hits[1].start, 0);
  EXPECT_EQ(hits[2].name, "2xyz_B/x-4");  // not a range: kept whole
}

TEST(ToolRunners, KalignAlignsInInputOrder) {
  REQUIRE_TOOL("kalign");
  const SearchTestData& d = search_test_data();
  std::map<std::string, std::string> seqres;
  for (const FastaRecord& rec : d.seqres_records()) seqres[safe_name(rec.description)] = rec.sequence;
  // Two NRBF2 MIT domains (human 4zey, mouse 2crb) and the unrelated query73.
  const std::vector<std::string> in = {seqres.at("4zey_A"), seqres.at("2crb_A"), d.query_sequence};
  ToolRun run;
  const Msa m = run_kalign({}, in, &run);
  EXPECT_CONTAINS(run.command, "-format fasta");
  ASSERT_EQ(m.depth(), 3u);
  m.validate();
  for (size_t i = 0; i < in.size(); ++i) {
    EXPECT_EQ(ungapped(m.sequences[i]), in[i]);
    EXPECT_EQ(m.descriptions[i], "sequence " + std::to_string(i + 1));
  }
  // The homologous pair aligns with high identity over aligned columns.
  int same = 0, both = 0;
  for (size_t k = 0; k < m.num_columns(); ++k) {
    const char a = m.sequences[0][k], b = m.sequences[1][k];
    if (a == '-' || b == '-') continue;
    ++both;
    same += a == b;
  }
  EXPECT_GT(both, 70);
  EXPECT_GT(same, both * 8 / 10);
  EXPECT_CONTAINS(error_of([] { run_kalign({}, {"ACDEFGH", "ACDE"}); }), "at least 6 residues long; got ACDE (4");
}

TEST(ToolRunners, MmseqsFastPathMakesAnA3m) {
  REQUIRE_TOOL("mmseqs");
  const SearchTestData& d = search_test_data();
  TempDir out("fc_mmseqs");
  MmseqsOptions o;
  o.database_path = d.mmseqs_db();
  o.num_iterations = 1;  // a plain sequence search keeps the test fast (default: 3 profile iterations)
  const MmseqsResult r = run_mmseqs(o, d.query_fasta, out.file("mmseqs_hits.a3m"));
  r.msa.validate();
  EXPECT_EQ(r.msa.sequences[0], d.query_sequence);
  EXPECT_GE(r.msa.depth(), 5u);
  bool identical = false;
  for (size_t i = 1; i < r.msa.depth(); ++i)
    identical = identical || (r.msa.descriptions[i].rfind("UniRef90_D7BIZ4", 0) == 0 && r.msa.sequences[i] == d.query_sequence);
  EXPECT_TRUE(identical);
  EXPECT_EQ(read_text_file(out.file("mmseqs_hits.a3m")).find('\0'), std::string::npos);
  EXPECT_CONTAINS(r.run.command, "--threads 1");
}

}  // namespace
}  // namespace foldcore::data
