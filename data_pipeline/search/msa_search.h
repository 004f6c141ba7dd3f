// AlphaFold2's monomer search stage (alphafold/data/pipeline.py DataPipeline.process, the tool
// part): for one query sequence, into <output_dir>/<target>/msas/ with AlphaFold's file names:
//
//   uniref90_hits.sto      jackhmmer vs uniref90, truncated to uniref_max_hits (10000) sequences
//   mgnify_hits.sto        jackhmmer vs MGnify, truncated to mgnify_max_hits (501)
//   bfd_uniref_hits.a3m    hhblits vs BFD + UniRef30            (--db_preset full_dbs)
//   small_bfd_hits.sto     jackhmmer vs small BFD               (--db_preset reduced_dbs)
//   pdb70_hits.hhr         hhsearch vs pdb70 (template searcher hhsearch, the monomer default)
//   pdb_hits.sto           hmmbuild --hand + hmmsearch vs pdb_seqres (template searcher hmmsearch)
//   mmseqs_hits.a3m        MMseqs2 fast path: one search replacing the three MSA tools
//
// Template search input, as AlphaFold does it: the uniref90 Stockholm truncated to
// uniref_max_hits, deduplicated (on the query's columns), emptied columns removed, then converted
// to A3M (hhsearch) or kept as Stockholm with a reference line marking the query's columns
// (hmmsearch, built with hmmbuild --hand).
//
// use_precomputed_msas: an output that already exists is read instead of re-running its tool
// (AlphaFold's run_msa_tool semantics; unlike AlphaFold, the template hits are reused too).
// Without it every tool runs and overwrites. Every output is written atomically.
#pragma once

#include <string>
#include <vector>

#include "data_pipeline/formats/hhr.h"
#include "data_pipeline/formats/msa.h"
#include "data_pipeline/formats/stockholm.h"
#include "data_pipeline/search/tool_runners.h"

namespace foldcore::data {

enum class DbPreset { kFullDbs, kReducedDbs };
enum class TemplateSearcher { kHhsearch, kHmmsearch, kNone };

DbPreset parse_db_preset(const std::string& s);                  // "full_dbs" | "reduced_dbs"
TemplateSearcher parse_template_searcher(const std::string& s);  // "hhsearch" | "hmmsearch" | "none"

// Database locations. from_data_dir gives AlphaFold's download layout (scripts/download_all_data.sh):
struct DatabasePaths {
  std::string uniref90;    // <data_dir>/uniref90/uniref90.fasta
  std::string mgnify;      // <data_dir>/mgnify/mgy_clusters_2022_05.fa
  std::string bfd;         // <data_dir>/bfd/bfd_metaclust_clu_complete_id30_c90_final_seq.sorted_opt
  std::string uniref30;    // <data_dir>/uniref30/UniRef30_2021_03
  std::string small_bfd;   // <data_dir>/small_bfd/bfd-first_non_consensus_sequences.fasta
  std::string pdb70;       // <data_dir>/pdb70/pdb70
  std::string pdb_seqres;  // <data_dir>/pdb_seqres/pdb_seqres.txt
  std::string mmseqs;      // <data_dir>/mmseqs/uniref90 (an `mmseqs createdb` database; ours, not AF's)
  static DatabasePaths from_data_dir(const std::string& data_dir);
};

struct MsaSearchOptions {
  DatabasePaths databases;
  DbPreset db_preset = DbPreset::kFullDbs;
  TemplateSearcher template_searcher = TemplateSearcher::kHhsearch;
  bool use_precomputed_msas = false;
  bool use_mmseqs = false;
  int cpus = 8;               // threads per tool (AlphaFold: jackhmmer 8, hhblits 4)
  double timeout_s = 0.0;     // per tool run; <= 0: none
  size_t uniref_max_hits = 10000;
  size_t mgnify_max_hits = 501;
  int mmseqs_num_iterations = 3;  // profile search iterations of the MMseqs2 path (ColabFold: 3)
  std::string tmp_dir;        // scratch parent ("" = $TMPDIR or /tmp)
  // Program names or paths ("" = the usual name on PATH).
  std::string jackhmmer_binary, hhblits_binary, hhsearch_binary, hmmbuild_binary, hmmsearch_binary, mmseqs_binary;
};

struct MsaSearchResult {
  std::string msa_dir;
  std::vector<std::string> written;  // file names (in msa_dir) produced by a tool in this run
  std::vector<std::string> reused;   // file names read from a previous run
  Msa uniref90, mgnify;              // empty in the MMseqs2 path
  Msa bfd;                           // bfd_uniref / small_bfd / mmseqs MSA
  std::vector<TemplateHit> template_hits;   // hhsearch
  std::vector<HmmsearchHit> hmmsearch_hits; // hmmsearch
  std::string commands;              // the tool command lines run, one per line
};

// Runs the search stage for the single-sequence FASTA `query_fasta` into `msa_dir` (created).
MsaSearchResult run_msa_search(const std::string& query_fasta, const std::string& msa_dir,
                               const MsaSearchOptions& options);

// <output_dir>/<fasta file name without its extension>/msas (AlphaFold's layout).
std::string msa_output_dir(const std::string& output_dir, const std::string& fasta_path);

// ---- Stockholm helpers for the template search input (AlphaFold's parsers.py equivalents).
// Drops rows whose residues on the query's non-gap columns equal an earlier row's.
StockholmAlignment deduplicate_stockholm(const StockholmAlignment& sto);
// Drops columns in which every row has a gap ('-' or '.').
StockholmAlignment remove_empty_columns(const StockholmAlignment& sto);
// Stockholm text: "#=GS <name> DE" lines for non-empty descriptions, one block of rows, and with
// `query_rf` a "#=GC RF" line with 'x' on the query's residue columns and '.' elsewhere.
std::string format_stockholm(const StockholmAlignment& sto, bool query_rf);

}  // namespace foldcore::data
