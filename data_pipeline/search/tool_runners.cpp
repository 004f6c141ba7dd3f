#include "data_pipeline/search/tool_runners.h"

#include <unistd.h>

#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "core/error.h"
#include "data_pipeline/formats/a3m.h"
#include "data_pipeline/formats/fasta.h"
#include "data_pipeline/search/subprocess.h"
#include "data_pipeline/formats/text_reader.h"

namespace foldcore::data {
namespace fs = std::filesystem;
namespace {

std::string program_of(const ToolOptions& tool, const char* default_name) {
  return tool.binary.empty() ? default_name : tool.binary;
}

// The program path, or "<name> not found in PATH; install <package>".
std::string resolve(const ToolOptions& tool, const char* default_name, const char* package) {
  return require_program(program_of(tool, default_name), std::string("install ") + package);
}

ProcessOptions process_options(const ToolOptions& tool, const char* package) {
  ProcessOptions p;
  p.timeout_s = tool.timeout_s;
  p.install_hint = std::string("install ") + package;
  p.max_capture_bytes = size_t{4} << 20;  // tools log a lot; 4 MB of stderr tail is plenty
  return p;
}

void require_file(const std::string& what, const std::string& path) {
  FC_CHECK(!path.empty(), what, " database path is empty");
  if (!fs::is_regular_file(path)) FC_THROW(what, " database ", path, " not found");
}

// AlphaFold checks an HH-suite database by glob(<prefix>_*): some <prefix>_a3m/_hhm/_cs219 file.
void require_hh_database(const std::string& what, const std::string& prefix) {
  FC_CHECK(!prefix.empty(), what, " database path is empty");
  const fs::path p(prefix);
  const fs::path dir = p.has_parent_path() ? p.parent_path() : fs::path(".");
  const std::string stem = p.filename().string() + "_";
  std::error_code ec;
  if (fs::is_directory(dir, ec)) {
    for (const auto& entry : fs::directory_iterator(dir, ec))
      if (entry.path().filename().string().rfind(stem, 0) == 0) return;
  }
  FC_THROW(what, " database ", prefix, " not found (no files ", prefix, "_*: expected ", prefix, "_a3m.ffdata, ",
           prefix, "_hhm.ffdata, ", prefix, "_cs219.ffdata and their .ffindex)");
}

// A temporary name next to `output`: the tool writes it, commit() renames it into place, and the
// destructor removes it if the run failed.
class PendingOutput {
 public:
  explicit PendingOutput(std::string output)
      : output_(std::move(output)), tmp_(output_ + ".tmp." + std::to_string(::getpid())) {
    const fs::path parent = fs::path(output_).parent_path();
    if (!parent.empty() && !fs::is_directory(parent)) FC_THROW("output directory ", parent.string(), " does not exist");
  }
  ~PendingOutput() {
    if (!committed_) std::remove(tmp_.c_str());
  }
  PendingOutput(const PendingOutput&) = delete;
  PendingOutput& operator=(const PendingOutput&) = delete;
  const std::string& tmp() const { return tmp_; }
  void commit(const std::string& tool) {
    if (!fs::exists(tmp_)) FC_THROW(tool, " exited successfully but wrote no output file ", tmp_);
    std::error_code ec;
    fs::rename(tmp_, output_, ec);
    if (ec) FC_THROW("cannot rename ", tmp_, " to ", output_, ": ", ec.message());
    committed_ = true;
  }

 private:
  std::string output_, tmp_;
  bool committed_ = false;
};

void record(ToolRun* run, const std::vector<std::string>& argv, const ProcessResult& r) {
  if (run == nullptr) return;
  if (!run->command.empty()) run->command += '\n';
  run->command += format_command(argv);
  run->stderr_text += tail_lines(r.stderr_text, 200, 64 * 1024);
  run->seconds += r.seconds;
}

// Runs a step with the tool's process options and records it.
ProcessResult run_step(const std::vector<std::string>& argv, const ToolOptions& tool, const char* package,
                       ToolRun* run) {
  const ProcessResult r = run_checked(argv, process_options(tool, package));
  record(run, argv, r);
  return r;
}

std::string cpu_string(const ToolOptions& tool) { return std::to_string(std::max(1, tool.cpus)); }

}  // namespace

std::string format_flag_number(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

// ---------------------------------------------------------------- jackhmmer

std::vector<std::string> jackhmmer_command(const JackhmmerOptions& o, const std::string& query_fasta,
                                           const std::string& output_sto) {
  // F1/F2/F3: fractions passing the MSV, Viterbi and Forward filters; AlphaFold sets them low so
  // that searching MGnify takes a reasonable time.
  std::vector<std::string> cmd = {program_of(o.tool, "jackhmmer"),
                                  "-o", "/dev/null",  // keep the per-target report off stdout
                                  "-A", output_sto,
                                  "--noali",
                                  "--F1", format_flag_number(o.filter_f1),
                                  "--F2", format_flag_number(o.filter_f2),
                                  "--F3", format_flag_number(o.filter_f3),
                                  "--incE", format_flag_number(o.e_value),
                                  "-E", format_flag_number(o.e_value),
                                  "--cpu", cpu_string(o.tool),
                                  "-N", std::to_string(o.n_iter)};
  if (o.z_value > 0) cmd.insert(cmd.end(), {"-Z", std::to_string(o.z_value)});
  if (o.dom_e) cmd.insert(cmd.end(), {"--domE", format_flag_number(*o.dom_e)});
  if (o.incdom_e) cmd.insert(cmd.end(), {"--incdomE", format_flag_number(*o.incdom_e)});
  cmd.insert(cmd.end(), {query_fasta, o.database_path});
  return cmd;
}

JackhmmerResult run_jackhmmer(const JackhmmerOptions& o, const std::string& query_fasta, const std::string& output_sto,
                              size_t max_sequences) {
  std::vector<std::string> cmd;
  JackhmmerResult result;
  return with_context("while running jackhmmer on " + query_fasta + " against " + o.database_path, [&] {
    cmd = jackhmmer_command(o, query_fasta, "");
    cmd[0] = resolve(o.tool, "jackhmmer", "hmmer");
    require_file("Jackhmmer", o.database_path);
    PendingOutput out(output_sto);
    cmd[4] = out.tmp();
    run_step(cmd, o.tool, "hmmer", &result.run);
    out.commit("jackhmmer");
    result.alignment = read_stockholm_alignment(output_sto, max_sequences);
    result.msa = stockholm_to_msa(result.alignment);
    return std::move(result);
  });
}

// ---------------------------------------------------------------- hhblits / hhsearch

std::vector<std::string> hhblits_command(const HhblitsOptions& o, const std::string& query_fasta,
                                         const std::string& output_a3m) {
  std::vector<std::string> cmd = {program_of(o.tool, "hhblits"),
                                  "-i", query_fasta,
                                  "-cpu", cpu_string(o.tool),
                                  "-oa3m", output_a3m,
                                  "-o", "/dev/null",
                                  "-n", std::to_string(o.n_iter),
                                  "-e", format_flag_number(o.e_value),
                                  "-maxseq", std::to_string(o.maxseq),
                                  "-realign_max", std::to_string(o.realign_max),
                                  "-maxfilt", std::to_string(o.maxfilt),
                                  "-min_prefilter_hits", std::to_string(o.min_prefilter_hits)};
  if (o.all_seqs) cmd.push_back("-all");
  if (o.alt > 0) cmd.insert(cmd.end(), {"-alt", std::to_string(o.alt)});
  if (o.p != 20) cmd.insert(cmd.end(), {"-p", std::to_string(o.p)});
  if (o.z != 500) cmd.insert(cmd.end(), {"-Z", std::to_string(o.z)});
  for (const std::string& db : o.databases) cmd.insert(cmd.end(), {"-d", db});
  return cmd;
}

HhblitsResult run_hhblits(const HhblitsOptions& o, const std::string& query_fasta, const std::string& output_a3m) {
  HhblitsResult result;
  return with_context("while running hhblits on " + query_fasta, [&] {
    std::vector<std::string> cmd = hhblits_command(o, query_fasta, "");
    cmd[0] = resolve(o.tool, "hhblits", "hhsuite");
    FC_CHECK(!o.databases.empty(), "hhblits: no database given");
    for (const std::string& db : o.databases) require_hh_database("HHblits", db);
    PendingOutput out(output_a3m);
    cmd[6] = out.tmp();
    run_step(cmd, o.tool, "hhsuite", &result.run);
    out.commit("hhblits");
    result.msa = read_a3m(output_a3m);
    return std::move(result);
  });
}

std::vector<std::string> hhsearch_command(const HhsearchOptions& o, const std::string& query_a3m,
                                          const std::string& output_hhr) {
  std::vector<std::string> cmd = {program_of(o.tool, "hhsearch"), "-i", query_a3m,     "-o", output_hhr,
                                  "-maxseq", std::to_string(o.maxseq), "-cpu", cpu_string(o.tool)};
  for (const std::string& db : o.databases) cmd.insert(cmd.end(), {"-d", db});
  return cmd;
}

HhsearchResult run_hhsearch(const HhsearchOptions& o, const std::string& query_a3m, const std::string& output_hhr) {
  HhsearchResult result;
  return with_context("while running hhsearch on " + query_a3m, [&] {
    std::vector<std::string> cmd = hhsearch_command(o, query_a3m, "");
    cmd[0] = resolve(o.tool, "hhsearch", "hhsuite");
    FC_CHECK(!o.databases.empty(), "hhsearch: no database given");
    for (const std::string& db : o.databases) require_hh_database("HHsearch", db);
    PendingOutput out(output_hhr);
    cmd[4] = out.tmp();
    run_step(cmd, o.tool, "hhsuite", &result.run);
    out.commit("hhsearch");
    result.hits = read_hhr(output_hhr);
    return std::move(result);
  });
}

// ---------------------------------------------------------------- hmmbuild / hmmsearch

std::string run_hmmbuild(const HmmbuildOptions& o, const std::string& msa_path, HmmConstruction construction,
                         ToolRun* run) {
  return with_context("while running hmmbuild on " + msa_path, [&] {
    std::vector<std::string> cmd = {resolve(o.tool, "hmmbuild", "hmmer")};
    if (!fs::is_regular_file(msa_path)) FC_THROW("hmmbuild input MSA ", msa_path, " not found");
    TempDir scratch("foldcore_hmmbuild", o.tool.tmp_dir);
    const std::string hmm_path = scratch.file("output.hmm");
    if (construction == HmmConstruction::kHand) cmd.push_back("--hand");
    if (o.singlemx) cmd.push_back("--singlemx");
    cmd.insert(cmd.end(), {"--cpu", cpu_string(o.tool), "--amino", hmm_path, msa_path});
    ProcessOptions p = process_options(o.tool, "hmmer");
    p.stdout_path = scratch.file("stdout.txt");  // hmmbuild's summary table
    const ProcessResult r = run_checked(cmd, p);
    record(run, cmd, r);
    return read_text_file(hmm_path);
  });
}

std::vector<std::string> alphafold_hmmsearch_template_flags() {
  return {"--F1", "0.1", "--F2", "0.1", "--F3", "0.1", "--incE", "100", "-E", "100", "--domE", "100", "--incdomE", "100"};
}

std::vector<std::string> hmmsearch_command(const HmmsearchOptions& o, const std::string& hmm_path,
                                           const std::string& output_sto) {
  std::vector<std::string> cmd = {program_of(o.tool, "hmmsearch"), "--noali", "--cpu", cpu_string(o.tool)};
  cmd.insert(cmd.end(), o.flags.begin(), o.flags.end());  // flags go before the output and inputs
  cmd.insert(cmd.end(), {"-A", output_sto, hmm_path, o.database_path});
  return cmd;
}

std::vector<HmmsearchHit> hmmsearch_hits(const StockholmAlignment& sto) {
  std::vector<HmmsearchHit> hits;
  hits.reserve(sto.names.size());
  for (size_t i = 0; i < sto.names.size(); ++i) {
    HmmsearchHit h;
    const std::string& full = sto.names[i];
    h.name = full;
    const size_t slash = full.rfind('/');
    const size_t dash = slash == std::string::npos ? std::string::npos : full.find('-', slash);
    if (dash != std::string::npos) {
      const std::string a = full.substr(slash + 1, dash - slash - 1), b = full.substr(dash + 1);
      const auto digits = [](const std::string& s) {
        return !s.empty() && s.find_first_not_of("0123456789") == std::string::npos && s.size() < 16;
      };
      if (digits(a) && digits(b)) {
        h.name = full.substr(0, slash);
        h.start = std::stoll(a);
        h.end = std::stoll(b);
      }
    }
    for (char c : sto.rows[i])
      if (c != '.' && !(c >= 'a' && c <= 'z')) h.aligned += c;  // match columns only
    h.description = i < sto.descriptions.size() ? sto.descriptions[i] : "";
    hits.push_back(std::move(h));
  }
  return hits;
}

HmmsearchResult run_hmmsearch(const HmmsearchOptions& o, const std::string& hmm_path, const std::string& output_sto) {
  HmmsearchResult result;
  return with_context("while running hmmsearch with " + hmm_path + " against " + o.database_path, [&] {
    std::vector<std::string> cmd = hmmsearch_command(o, hmm_path, "");
    cmd[0] = resolve(o.tool, "hmmsearch", "hmmer");
    require_file("hmmsearch", o.database_path);
    PendingOutput out(output_sto);
    cmd[cmd.size() - 3] = out.tmp();
    ProcessOptions p = process_options(o.tool, "hmmer");
    TempDir scratch("foldcore_hmmsearch", o.tool.tmp_dir);
    p.stdout_path = scratch.file("stdout.txt");  // the per-target report (can be large)
    const ProcessResult r = run_checked(cmd, p);
    record(&result.run, cmd, r);
    out.commit("hmmsearch");
    // No hit: hmmsearch writes an empty alignment file.
    if (fs::file_size(output_sto) > 0) result.alignment = read_stockholm_alignment(output_sto);
    result.hits = hmmsearch_hits(result.alignment);
    return std::move(result);
  });
}

HmmsearchResult run_hmmsearch_on_msa(const HmmbuildOptions& build, const HmmsearchOptions& search,
                                     const std::string& msa_sto_path, const std::string& output_sto) {
  ToolRun build_run;
  const std::string hmm = run_hmmbuild(build, msa_sto_path, HmmConstruction::kHand, &build_run);
  TempDir scratch("foldcore_hmmsearch", search.tool.tmp_dir);
  const std::string hmm_path = scratch.file("query.hmm");
  write_file_atomic(hmm_path, hmm);
  HmmsearchResult result = run_hmmsearch(search, hmm_path, output_sto);
  result.run.command = build_run.command + "\n" + result.run.command;
  result.run.stderr_text = build_run.stderr_text + result.run.stderr_text;
  result.run.seconds += build_run.seconds;
  return result;
}

// ---------------------------------------------------------------- kalign

Msa run_kalign(const KalignOptions& o, const std::vector<std::string>& sequences, ToolRun* run) {
  return with_context("while running kalign", [&] {
    FC_CHECK(!sequences.empty(), "kalign: no sequences to align");
    for (const std::string& s : sequences)
      if (s.size() < 6)
        FC_THROW("kalign requires all sequences to be at least 6 residues long; got ", s, " (", s.size(),
                 " residues)");
    const std::string program = resolve(o.tool, "kalign", "kalign");
    TempDir scratch("foldcore_kalign", o.tool.tmp_dir);
    std::vector<FastaRecord> records;
    for (size_t i = 0; i < sequences.size(); ++i) records.push_back({"sequence " + std::to_string(i + 1), sequences[i]});
    const std::string in = scratch.file("input.fasta"), out = scratch.file("output.a3m");
    write_fasta(in, records, 0);
    const std::vector<std::string> cmd = {program, "-i", in, "-o", out, "-format", "fasta"};
    ProcessOptions p = process_options(o.tool, "kalign");
    const ProcessResult r = run_checked(cmd, p);
    record(run, cmd, r);
    Msa msa = read_a3m(out);
    // Put the rows back in input order (by the names we gave them) and check nothing was lost.
    FC_CHECK(msa.depth() == sequences.size(), "kalign returned ", msa.depth(), " sequences for ", sequences.size(),
             " inputs");
    Msa ordered;
    for (size_t i = 0; i < sequences.size(); ++i) {
      const std::string want = "sequence " + std::to_string(i + 1);
      size_t k = 0;
      while (k < msa.depth() && msa.descriptions[k] != want) ++k;
      FC_CHECK(k < msa.depth(), "kalign output lacks '", want, "'");
      ordered.sequences.push_back(msa.sequences[k]);
      ordered.deletion_matrix.push_back(msa.deletion_matrix[k]);
      ordered.descriptions.push_back(want);
    }
    return ordered;
  });
}

// ---------------------------------------------------------------- MMseqs2

void mmseqs_createdb(const ToolOptions& tool, const std::string& fasta, const std::string& db_prefix) {
  with_context("while creating the MMseqs2 database " + db_prefix, [&] {
    if (!fs::is_regular_file(fasta)) FC_THROW("FASTA file ", fasta, " not found");
    const std::vector<std::string> cmd = {resolve(tool, "mmseqs", "mmseqs2"), "createdb", fasta, db_prefix};
    run_step(cmd, tool, "mmseqs2", nullptr);
  });
}

MmseqsResult run_mmseqs(const MmseqsOptions& o, const std::string& query_fasta, const std::string& output_a3m) {
  MmseqsResult result;
  return with_context("while running mmseqs on " + query_fasta + " against " + o.database_path, [&] {
    const std::string mmseqs = resolve(o.tool, "mmseqs", "mmseqs2");
    FC_CHECK(!o.database_path.empty(), "MMseqs2 database path is empty");
    if (!fs::is_regular_file(o.database_path + ".dbtype"))
      FC_THROW("MMseqs2 database ", o.database_path, " not found (no ", o.database_path,
               ".dbtype; create it with: mmseqs createdb <sequences.fasta> ", o.database_path, ")");
    if (!fs::is_regular_file(query_fasta)) FC_THROW("query FASTA ", query_fasta, " not found");
    TempDir scratch("foldcore_mmseqs", o.tool.tmp_dir);
    const std::string qdb = scratch.file("qdb"), res = scratch.file("res"), msa = scratch.file("msa");
    const std::string threads = cpu_string(o.tool);
    run_step({mmseqs, "createdb", query_fasta, qdb}, o.tool, "mmseqs2", &result.run);
    // ColabFold's search: profile iterations, alignments kept (-a) for result2msa.
    run_step({mmseqs, "search", qdb, o.database_path, res, scratch.file("tmp"), "--threads", threads, "-a", "-s",
              format_flag_number(o.sensitivity), "-e", format_flag_number(o.e_value), "--max-seqs",
              std::to_string(o.max_seqs), "--num-iterations", std::to_string(o.num_iterations)},
             o.tool, "mmseqs2", &result.run);
    run_step({mmseqs, "result2msa", qdb, o.database_path, res, msa, "--msa-format-mode", "6", "--threads", threads},
             o.tool, "mmseqs2", &result.run);
    // result2msa writes a database: the entries' text separated by NUL bytes. One query → one entry.
    std::string text = read_text_file(msa);
    std::erase(text, '\0');
    write_file_atomic(output_a3m, text);
    result.msa = read_a3m(output_a3m);
    return std::move(result);
  });
}

// ---------------------------------------------------------------- HH-suite database building

namespace {

// cstranslate is not always on PATH (Debian puts its SIMD builds in /usr/libexec/hhsuite).
std::string find_cstranslate() {
  std::string p = find_program("cstranslate");
  if (!p.empty()) return p;
  for (const char* dir : {"/usr/libexec/hhsuite", "/usr/lib/hhsuite/bin", "/usr/local/libexec/hhsuite"})
    for (const char* variant : {"cstranslate", "cstranslate-sse2", "cstranslate-plain"}) {
      p = find_program(std::string(dir) + "/" + variant);
      if (!p.empty()) return p;
    }
  FC_THROW("cstranslate not found in PATH or /usr/libexec/hhsuite; install hhsuite");
}

std::string find_hhsuite_data_dir() {
  std::vector<std::string> dirs;
  if (const char* hhlib = std::getenv("HHLIB")) dirs.push_back(std::string(hhlib) + "/data");
  dirs.insert(dirs.end(), {"/usr/share/hhsuite/data", "/usr/lib/hhsuite/data", "/usr/local/share/hhsuite/data"});
  for (const std::string& d : dirs)
    if (fs::is_regular_file(d + "/cs219.lib") && fs::is_regular_file(d + "/context_data.lib")) return d;
  FC_THROW("HH-suite data files cs219.lib and context_data.lib not found ($HHLIB/data, /usr/share/hhsuite/data); "
           "install hhsuite-data");
}

}  // namespace

void build_hhsuite_database(const ToolOptions& tool, const std::vector<HhsuiteEntry>& entries,
                            const std::string& prefix, bool with_hhm) {
  with_context("while building the HH-suite database " + prefix, [&] {
    FC_CHECK(!entries.empty(), "no entries");
    const std::string ffindex_build = resolve(ToolOptions{}, "ffindex_build", "hhsuite");
    const std::string ffindex_apply = resolve(ToolOptions{}, "ffindex_apply", "hhsuite");
    const std::string hhmake = with_hhm ? resolve(ToolOptions{}, "hhmake", "hhsuite") : "";
    TempDir scratch("foldcore_hhdb", tool.tmp_dir);
    const std::string a3m_dir = scratch.file("a3m");
    fs::create_directory(a3m_dir);
    for (const HhsuiteEntry& e : entries) {
      FC_CHECK(!e.name.empty() && e.name.find_first_of("/ \t\n") == std::string::npos,
               "bad HH-suite entry name '", e.name, "'");
      FC_CHECK(!fs::exists(a3m_dir + "/" + e.name), "duplicate HH-suite entry name '", e.name, "'");
      parse_a3m(e.a3m, e.name).validate(e.name);  // a malformed entry fails here, not in hhmake
      write_file_atomic(a3m_dir + "/" + e.name, e.a3m);
    }
    for (const char* kind : {"_a3m", "_hhm", "_cs219"})
      for (const char* ext : {".ffdata", ".ffindex"}) fs::remove(prefix + kind + ext);
    // -s: entries sorted by name, as HH-suite's own database scripts build them.
    run_step({ffindex_build, "-s", prefix + "_a3m.ffdata", prefix + "_a3m.ffindex", a3m_dir}, tool, "hhsuite", nullptr);
    if (with_hhm)
      run_step({ffindex_apply, prefix + "_a3m.ffdata", prefix + "_a3m.ffindex", "-i", prefix + "_hhm.ffindex", "-d",
                prefix + "_hhm.ffdata", "--", hhmake, "-i", "stdin", "-o", "stdout", "-v", "0"},
               tool, "hhsuite", nullptr);
    // Column-state sequences for the prefilter (HH-suite wiki: -x 0.3 -c 4 for A3M input).
    const std::string data = find_hhsuite_data_dir();
    ProcessOptions p = process_options(tool, "hhsuite");
    p.stdout_path = scratch.file("cstranslate.log");
    run_checked({find_cstranslate(), "-f", "-x", "0.3", "-c", "4", "-I", "a3m", "-i", prefix + "_a3m", "-o",
                 prefix + "_cs219", "-A", data + "/cs219.lib", "-D", data + "/context_data.lib"},
                p);
    for (const char* kind : {"_a3m", "_cs219"})
      if (!fs::is_regular_file(prefix + kind + ".ffdata") || fs::file_size(prefix + kind + ".ffindex") == 0)
        FC_THROW("building ", prefix, kind, " produced no entries");
  });
}

}  // namespace foldcore::data
