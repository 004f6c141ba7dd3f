// Runners for the MSA and template search tools with AlphaFold2's default flags
// (alphafold/data/tools/{jackhmmer,hhblits,hhsearch,hmmbuild,hmmsearch,kalign}.py), plus MMseqs2
// as a fast MSA path (ColabFold's search flags). Each runner:
//   - finds its program (ToolOptions::binary: a name looked up in PATH, or a path), failing with
//     "<tool> not found in PATH; install <package>";
//   - checks its database files first, failing with "<Tool> database <path> not found ...";
//   - runs with the given thread count and timeout, stderr captured (its tail is in the error of
//     a failed run);
//   - writes its output file atomically (the tool writes a temporary name that is renamed on
//     success, so a killed or failed run never leaves a half file) and parses it with our parsers.
// Scratch files go to a TempDir under ToolOptions::tmp_dir, removed afterwards.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "data_pipeline/formats/hhr.h"
#include "data_pipeline/formats/msa.h"
#include "data_pipeline/formats/stockholm.h"

namespace foldcore::data {

struct ToolOptions {
  std::string binary;       // "" = the tool's usual program name, looked up in PATH
  int cpus = 1;             // --cpu / -cpu / --threads
  double timeout_s = 0.0;   // <= 0: no limit
  std::string tmp_dir;      // parent of scratch directories; "" = $TMPDIR or /tmp
};

// What was run: the command lines (one per line), the tail of stderr, the wall time.
struct ToolRun {
  std::string command;
  std::string stderr_text;
  double seconds = 0.0;
};

// ---------------------------------------------------------------- jackhmmer (HMMER)
struct JackhmmerOptions {
  ToolOptions tool;
  std::string database_path;  // a FASTA file
  int n_iter = 1;
  double e_value = 1e-4;      // --incE and -E
  int64_t z_value = 0;        // -Z when > 0
  double filter_f1 = 5e-4;
  double filter_f2 = 5e-5;
  double filter_f3 = 5e-7;
  std::optional<double> dom_e;     // --domE
  std::optional<double> incdom_e;  // --incdomE
};
struct JackhmmerResult {
  StockholmAlignment alignment;  // the query is the first row
  Msa msa;                       // AlphaFold's parse_stockholm of it
  ToolRun run;
};
// jackhmmer -o /dev/null -A <sto> --noali --F1 --F2 --F3 --incE -E --cpu -N [-Z --domE --incdomE]
// <query.fasta> <database>.
std::vector<std::string> jackhmmer_command(const JackhmmerOptions& o, const std::string& query_fasta,
                                           const std::string& output_sto);
// Runs jackhmmer and writes its Stockholm output to `output_sto`; parses the first
// `max_sequences` rows (0: all).
JackhmmerResult run_jackhmmer(const JackhmmerOptions& o, const std::string& query_fasta,
                              const std::string& output_sto, size_t max_sequences = 0);

// ---------------------------------------------------------------- hhblits / hhsearch (HH-suite)
struct HhblitsOptions {
  ToolOptions tool;
  std::vector<std::string> databases;  // prefixes: <db>_a3m.ffdata, <db>_hhm.ffdata, <db>_cs219...
  int n_iter = 3;
  double e_value = 1e-3;
  int64_t maxseq = 1000000;
  int64_t realign_max = 100000;
  int64_t maxfilt = 100000;
  int64_t min_prefilter_hits = 1000;
  bool all_seqs = false;  // -all
  int alt = 0;            // -alt when > 0
  int p = 20;             // -p when not HHblits' default 20
  int z = 500;            // -Z when not HHblits' default 500
};
struct HhblitsResult {
  Msa msa;
  ToolRun run;
};
std::vector<std::string> hhblits_command(const HhblitsOptions& o, const std::string& query_fasta,
                                         const std::string& output_a3m);
HhblitsResult run_hhblits(const HhblitsOptions& o, const std::string& query_fasta, const std::string& output_a3m);

struct HhsearchOptions {
  ToolOptions tool;
  std::vector<std::string> databases;  // e.g. <data_dir>/pdb70/pdb70
  int64_t maxseq = 1000000;
};
struct HhsearchResult {
  std::vector<TemplateHit> hits;
  ToolRun run;
};
// hhsearch -i <query.a3m> -o <hhr> -maxseq N -cpu N -d <db>... (AlphaFold passes no -cpu; we pass
// the thread count like the other tools).
std::vector<std::string> hhsearch_command(const HhsearchOptions& o, const std::string& query_a3m,
                                          const std::string& output_hhr);
HhsearchResult run_hhsearch(const HhsearchOptions& o, const std::string& query_a3m, const std::string& output_hhr);

// ---------------------------------------------------------------- hmmbuild + hmmsearch (HMMER)
enum class HmmConstruction {
  kFast,  // match columns chosen by hmmbuild's rule
  kHand,  // match columns from the "#=GC RF" line (AlphaFold's template search: the query columns)
};
struct HmmbuildOptions {
  ToolOptions tool;
  bool singlemx = false;
};
// hmmbuild [--hand] [--singlemx] --amino <out.hmm> <msa>; returns the HMM text. `msa_path` is a
// Stockholm file (with "#=GC RF" for kHand).
std::string run_hmmbuild(const HmmbuildOptions& o, const std::string& msa_path, HmmConstruction construction,
                         ToolRun* run = nullptr);

// AlphaFold's hmmsearch flags for the template search (run_alphafold.py, multimer pipeline).
std::vector<std::string> alphafold_hmmsearch_template_flags();

struct HmmsearchOptions {
  ToolOptions tool;
  std::string database_path;  // a FASTA file, e.g. <data_dir>/pdb_seqres/pdb_seqres.txt
  std::vector<std::string> flags = alphafold_hmmsearch_template_flags();
};
// One aligned domain of the -A output: "<name>/<start>-<end>" split up, and the row on the
// model's match columns (insertions, i.e. lower case letters, and '.' removed).
struct HmmsearchHit {
  std::string name;    // e.g. "1abc_A"
  int64_t start = 0;   // 1-based first residue of the domain in the target sequence
  int64_t end = 0;
  std::string aligned;
  std::string description;
};
struct HmmsearchResult {
  StockholmAlignment alignment;  // rows as written (no query row: hmmsearch aligns to the model)
  std::vector<HmmsearchHit> hits;
  ToolRun run;
};
// hmmsearch --noali --cpu N <flags> -A <sto> <query.hmm> <database>.
std::vector<std::string> hmmsearch_command(const HmmsearchOptions& o, const std::string& hmm_path,
                                           const std::string& output_sto);
HmmsearchResult run_hmmsearch(const HmmsearchOptions& o, const std::string& hmm_path, const std::string& output_sto);
// AlphaFold's Hmmsearch.query(msa_sto): hmmbuild --hand --amino on the MSA, then hmmsearch.
HmmsearchResult run_hmmsearch_on_msa(const HmmbuildOptions& build, const HmmsearchOptions& search,
                                     const std::string& msa_sto_path, const std::string& output_sto);
// The hits of a hmmsearch -A alignment (names without "/start-end" keep start = end = 0).
std::vector<HmmsearchHit> hmmsearch_hits(const StockholmAlignment& sto);

// ---------------------------------------------------------------- kalign
struct KalignOptions {
  ToolOptions tool;  // cpus unused (AlphaFold runs kalign single-threaded)
};
// kalign -i <in.fasta> -o <out.fasta> -format fasta, with the sequences named "sequence 1..n" as
// AlphaFold does; every sequence needs >= 6 residues (kalign's limit). Returns the alignment in
// input order.
Msa run_kalign(const KalignOptions& o, const std::vector<std::string>& sequences, ToolRun* run = nullptr);

// ---------------------------------------------------------------- MMseqs2
struct MmseqsOptions {
  ToolOptions tool;
  std::string database_path;  // an MMseqs2 database prefix (<db>.dbtype exists; see mmseqs_createdb)
  double sensitivity = 8.0;   // -s (ColabFold: 8)
  double e_value = 0.1;       // -e
  int64_t max_seqs = 10000;   // --max-seqs
  int num_iterations = 3;     // --num-iterations (profile search)
};
struct MmseqsResult {
  Msa msa;
  ToolRun run;
};
// createdb (query) → search -a → result2msa --msa-format-mode 6 (A3M), the A3M written to
// `output_a3m` (the database entry separators removed).
MmseqsResult run_mmseqs(const MmseqsOptions& o, const std::string& query_fasta, const std::string& output_a3m);
// mmseqs createdb <fasta> <db_prefix>.
void mmseqs_createdb(const ToolOptions& tool, const std::string& fasta, const std::string& db_prefix);

// ---------------------------------------------------------------- HH-suite database building
// Builds a small HH-suite database (the files hhsearch and hhblits read: <prefix>_a3m, _cs219
// and, with `with_hhm`, _hhm, each .ffdata + .ffindex; both tools need _cs219, and take the
// profile from _a3m when _hhm is absent) with one entry per HhsuiteEntry. Steps: ffindex_build -s,
// ffindex_apply hhmake, cstranslate (found on PATH or in HH-suite's libexec folder, with
// cs219.lib and context_data.lib from $HHLIB/data or /usr/share/hhsuite/data). For custom
// template databases and tests; the real pdb70/BFD/UniRef30 are downloaded prebuilt.
struct HhsuiteEntry {
  std::string name;  // entry name (no '/' or whitespace)
  std::string a3m;   // A3M text of the entry (one sequence, or an MSA whose first row represents it)
};
void build_hhsuite_database(const ToolOptions& tool, const std::vector<HhsuiteEntry>& entries,
                            const std::string& prefix, bool with_hhm = true);

// "%g" of a number, as Python's str() writes AlphaFold's flag values (0.0001, 5e-05).
std::string format_flag_number(double v);

}  // namespace foldcore::data
