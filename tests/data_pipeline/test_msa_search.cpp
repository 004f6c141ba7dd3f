// AlphaFold's monomer search stage end to end with the real tools on query73 against a tiny
// data_dir in AlphaFold's layout (test_search_databases.h): file names, the precomputed-MSA
// cache (checked by hiding every tool from PATH on the second run), db presets, template
// searchers, the MMseqs2 path, truncation, and the errors for missing databases.
#include <gtest/gtest.h>

#include <filesystem>
#include <functional>

#include "core/error.h"
#include "data_pipeline/search/msa_search.h"
#include "data_pipeline/formats/text_reader.h"
#include "test_search_databases.h"
#include "data_pipeline/data_test_util.h"

namespace foldcore::data {
namespace {
namespace fs = std::filesystem;
using namespace search_test;

#define EXPECT_CONTAINS(haystack, needle) EXPECT_NE((haystack).find(needle), std::string::npos) << (haystack)
#define REQUIRE_TOOLS(...)                                                        \
  do {                                                                            \
    for (const char* t : {__VA_ARGS__})                                           \
      if (find_program(t).empty()) GTEST_SKIP() << t << " is not installed";      \
  } while (0)

std::vector<std::string> sorted(std::vector<std::string> v) {
  std::sort(v.begin(), v.end());
  return v;
}

MsaSearchOptions tiny_options() {
  MsaSearchOptions o;
  o.databases = DatabasePaths::from_data_dir(search_test_data().data_dir);
  o.cpus = 1;
  o.timeout_s = 120;
  return o;
}

TEST(MsaSearch, StockholmHelpers) {
  StockholmAlignment sto;
  sto.names = {"query", "a/1-5", "b/2-6", "c/1-4"};
  sto.rows = {"AC-DE-", "AC-DE-", "ACxDE-", "-C-D--"};
  sto.descriptions = {"", "first", "", "third"};
  // b equals a on the query's columns (its 'x' sits in a query gap column): a duplicate.
  const StockholmAlignment d = deduplicate_stockholm(sto);
  EXPECT_EQ(d.names, (std::vector<std::string>{"query", "c/1-4"}));
  EXPECT_EQ(d.descriptions, (std::vector<std::string>{"", "third"}));
  // Columns 2 and 5 are all gaps once b is gone.
  const StockholmAlignment e = remove_empty_columns(d);
  EXPECT_EQ(e.rows, (std::vector<std::string>{"ACDE", "-CD-"}));
  EXPECT_EQ(remove_empty_columns(sto).rows[2], "ACxDE");

  const std::string text = format_stockholm(sto, /*query_rf=*/true);
  EXPECT_CONTAINS(text, "#=GS a/1-5 DE first\n");
  EXPECT_CONTAINS(text, "\n#=GC RF xx.xx.\n//\n");
  LineReader reader = LineReader::from_string(text, "fmt");
  const StockholmAlignment back = read_stockholm_alignment(reader);
  EXPECT_EQ(back.names, sto.names);
  EXPECT_EQ(back.rows, sto.rows);
  EXPECT_EQ(back.descriptions, sto.descriptions);

  EXPECT_EQ(msa_output_dir("/out", "/in/T1050.fasta"), "/out/T1050/msas");
  EXPECT_EQ(parse_db_preset("reduced_dbs"), DbPreset::kReducedDbs);
  EXPECT_CONTAINS(error_of([] { parse_db_preset("big"); }), "unknown db_preset 'big'");
  EXPECT_EQ(parse_template_searcher("hmmsearch"), TemplateSearcher::kHmmsearch);
  const DatabasePaths p = DatabasePaths::from_data_dir("/data");
  EXPECT_EQ(p.uniref90, "/data/uniref90/uniref90.fasta");
  EXPECT_EQ(p.mgnify, "/data/mgnify/mgy_clusters_2022_05.fa");
  EXPECT_EQ(p.pdb70, "/data/pdb70/pdb70");
  EXPECT_EQ(p.pdb_seqres, "/data/pdb_seqres/pdb_seqres.txt");
}

TEST(MsaSearch, FullDbsWithHhsearchThenReusedWithoutAnyTool) {
  REQUIRE_TOOLS("jackhmmer", "hhblits", "hhsearch");
  const SearchTestData& d = search_test_data();
  d.uniref90(), d.mgnify(), d.bfd(), d.uniref30(), d.pdb70();
  TempDir out("fc_msa_search");
  const std::string msa_dir = msa_output_dir(out.path(), d.query_fasta);
  MsaSearchOptions o = tiny_options();
  const MsaSearchResult r = run_msa_search(d.query_fasta, msa_dir, o);
  EXPECT_EQ(sorted(r.written),
            (std::vector<std::string>{"bfd_uniref_hits.a3m", "mgnify_hits.sto", "pdb70_hits.hhr", "uniref90_hits.sto"}));
  EXPECT_TRUE(r.reused.empty());
  for (const std::string& f : r.written) EXPECT_TRUE(fs::is_regular_file(msa_dir + "/" + f)) << f;
  EXPECT_EQ(r.uniref90.depth(), 57u);  // the query and its 56 known hits
  EXPECT_EQ(r.uniref90.sequences[0], d.query_sequence);
  EXPECT_GE(r.mgnify.depth(), 20u);
  EXPECT_EQ(r.mgnify.sequences[0], d.query_sequence);
  EXPECT_GE(r.bfd.depth(), 20u);
  EXPECT_EQ(r.bfd.sequences[0], d.query_sequence);
  ASSERT_FALSE(r.template_hits.empty());
  EXPECT_EQ(r.template_hits[0].name.rfind("HOMOLOG_A", 0), 0u);
  EXPECT_CONTAINS(r.commands, "jackhmmer");
  EXPECT_CONTAINS(r.commands, "-d " + o.databases.bfd + " -d " + o.databases.uniref30);
  // The merged monomer MSA builds from the three.
  EXPECT_GE(merge_monomer_msas(r.uniref90, r.bfd, r.mgnify).depth(), 57u);

  // Second run with --use_precomputed_msas and no tool on PATH: everything is read back.
  o.use_precomputed_msas = true;
  ScopedEnv path("PATH", out.path());
  const MsaSearchResult again = run_msa_search(d.query_fasta, msa_dir, o);
  EXPECT_TRUE(again.written.empty());
  EXPECT_EQ(sorted(again.reused), sorted(r.written));
  EXPECT_EQ(again.uniref90.sequences, r.uniref90.sequences);
  EXPECT_EQ(again.mgnify.deletion_matrix, r.mgnify.deletion_matrix);
  EXPECT_EQ(again.bfd.sequences, r.bfd.sequences);
  ASSERT_EQ(again.template_hits.size(), r.template_hits.size());
  EXPECT_EQ(again.template_hits[0].name, r.template_hits[0].name);
  // Without the flag the tools are needed again.
  o.use_precomputed_msas = false;
  EXPECT_CONTAINS(error_of([&] { run_msa_search(d.query_fasta, msa_dir, o); }),
                  "jackhmmer not found in PATH; install hmmer");
}

TEST(MsaSearch, ReducedDbsWithHmmsearchAndTruncation) {
  REQUIRE_TOOLS("jackhmmer", "hmmbuild", "hmmsearch");
  const SearchTestData& d = search_test_data();
  d.uniref90(), d.mgnify(), d.small_bfd(), d.pdb_seqres();
  TempDir out("fc_msa_search");
  MsaSearchOptions o = tiny_options();
  o.db_preset = DbPreset::kReducedDbs;
  o.template_searcher = TemplateSearcher::kHmmsearch;
  o.uniref_max_hits = 10;
  o.mgnify_max_hits = 7;
  const MsaSearchResult r = run_msa_search(d.query_fasta, out.path() + "/msas", o);
  EXPECT_EQ(sorted(r.written),
            (std::vector<std::string>{"mgnify_hits.sto", "pdb_hits.sto", "small_bfd_hits.sto", "uniref90_hits.sto"}));
  EXPECT_EQ(r.uniref90.depth(), 10u);
  EXPECT_EQ(r.mgnify.depth(), 7u);
  EXPECT_GE(r.bfd.depth(), 10u);  // small BFD: not truncated
  // The stored files are truncated too, and keep the reference line for hmmbuild --hand.
  const StockholmAlignment stored = read_stockholm_alignment(out.path() + "/msas/uniref90_hits.sto");
  EXPECT_EQ(stored.names.size(), 10u);
  EXPECT_EQ(stored.names[0], "query");
  EXPECT_CONTAINS(read_text_file(out.path() + "/msas/uniref90_hits.sto"), "#=GC RF");
  ASSERT_FALSE(r.hmmsearch_hits.empty());
  for (const HmmsearchHit& h : r.hmmsearch_hits) EXPECT_EQ(h.aligned.size(), d.query_sequence.size()) << h.name;
  EXPECT_CONTAINS(r.commands, "hmmbuild");
  EXPECT_CONTAINS(r.commands, "--incdomE 100");
}

TEST(MsaSearch, MmseqsFastPath) {
  REQUIRE_TOOLS("mmseqs", "hhsearch");
  const SearchTestData& d = search_test_data();
  d.mmseqs_db(), d.pdb70();
  TempDir out("fc_msa_search");
  MsaSearchOptions o = tiny_options();
  o.use_mmseqs = true;
  o.mmseqs_num_iterations = 1;  // fast; the default 3 is the same code path
  const MsaSearchResult r = run_msa_search(d.query_fasta, out.path() + "/msas", o);
  EXPECT_EQ(sorted(r.written), (std::vector<std::string>{"mmseqs_hits.a3m", "pdb70_hits.hhr"}));
  EXPECT_EQ(r.bfd.sequences[0], d.query_sequence);
  EXPECT_GE(r.bfd.depth(), 5u);
  EXPECT_TRUE(r.uniref90.empty());
  ASSERT_FALSE(r.template_hits.empty());
  EXPECT_EQ(r.template_hits[0].name.rfind("HOMOLOG_A", 0), 0u);
  o.template_searcher = TemplateSearcher::kHmmsearch;
  EXPECT_CONTAINS(error_of([&] { run_msa_search(d.query_fasta, out.path() + "/msas2", o); }),
                  "hmmsearch template search needs jackhmmer's uniref90");
}

TEST(MsaSearch, MissingDatabasesAndBadQueries) {
  const SearchTestData& d = search_test_data();
  TempDir out("fc_msa_search");
  MsaSearchOptions o;
  o.databases = DatabasePaths::from_data_dir(out.path() + "/nodata");
  const std::string e = error_of([&] { run_msa_search(d.query_fasta, out.path() + "/msas", o); });
  EXPECT_CONTAINS(e, "database(s) not found:");
  EXPECT_CONTAINS(e, "uniref90 " + out.path() + "/nodata/uniref90/uniref90.fasta");
  EXPECT_CONTAINS(e, "mgnify " + out.path() + "/nodata/mgnify/mgy_clusters_2022_05.fa");
  EXPECT_CONTAINS(e, "bfd " + out.path() + "/nodata/bfd/");
  EXPECT_CONTAINS(e, "uniref30 " + out.path() + "/nodata/uniref30/UniRef30_2021_03 (no ");
  EXPECT_CONTAINS(e, "pdb70 " + out.path() + "/nodata/pdb70/pdb70");
  EXPECT_EQ(e.find("small_bfd"), std::string::npos);  // not needed by full_dbs
  EXPECT_FALSE(fs::exists(out.path() + "/msas"));      // nothing started
  o.db_preset = DbPreset::kReducedDbs;
  o.template_searcher = TemplateSearcher::kHmmsearch;
  const std::string e2 = error_of([&] { run_msa_search(d.query_fasta, out.path() + "/msas", o); });
  EXPECT_CONTAINS(e2, "small_bfd " + out.path() + "/nodata/small_bfd/bfd-first_non_consensus_sequences.fasta");
  EXPECT_CONTAINS(e2, "pdb_seqres ");
  EXPECT_EQ(e2.find("pdb70"), std::string::npos);

  // A missing tool is reported before any other tool runs.
  {
    const SearchTestData& data = search_test_data();
    MsaSearchOptions t = tiny_options();
    t.db_preset = DbPreset::kReducedDbs;
    t.template_searcher = TemplateSearcher::kHmmsearch;
    t.databases.small_bfd = t.databases.pdb_seqres = data.uniref90();  // present: only the tool is missing
    data.mgnify();
    fs::create_directories(out.path() + "/bin");
    t.hmmsearch_binary = out.path() + "/bin/hmmsearch";
    const std::string e3 = error_of([&] { run_msa_search(d.query_fasta, out.path() + "/msas3", t); });
    EXPECT_CONTAINS(e3, out.path() + "/bin/hmmsearch is not an executable file; install hmmer");
    EXPECT_FALSE(fs::exists(out.path() + "/msas3"));
  }
  write_file_atomic(out.file("two.fasta"), ">a\nACDEFGHIK\n>b\nACDEFGHIK\n");
  EXPECT_CONTAINS(error_of([&] { run_msa_search(out.file("two.fasta"), out.path() + "/msas", o); }),
                  "expected exactly one sequence in " + out.file("two.fasta") + " (found 2)");
  EXPECT_CONTAINS(error_of([&] { run_msa_search(out.file("none.fasta"), out.path() + "/msas", o); }), "none.fasta");
}

}  // namespace
}  // namespace foldcore::data
