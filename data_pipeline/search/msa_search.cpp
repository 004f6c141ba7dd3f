#include "data_pipeline/search/msa_search.h"

#include <filesystem>
#include <unordered_set>

#include "core/error.h"
#include "core/log.h"
#include "data_pipeline/formats/a3m.h"
#include "data_pipeline/formats/fasta.h"
#include "data_pipeline/search/subprocess.h"
#include "data_pipeline/formats/text_reader.h"

namespace foldcore::data {
namespace fs = std::filesystem;
namespace {

bool is_gap(char c) { return c == '-' || c == '.'; }

StockholmAlignment truncated(StockholmAlignment sto, size_t max_rows) {
  if (max_rows > 0 && sto.names.size() > max_rows) {
    sto.names.resize(max_rows);
    sto.rows.resize(max_rows);
    sto.descriptions.resize(max_rows);
  }
  return sto;
}

// True when `prefix` has some "<prefix>_*" file (AlphaFold's HH-suite database check).
bool hh_database_exists(const std::string& prefix) {
  const fs::path p(prefix);
  const fs::path dir = p.has_parent_path() ? p.parent_path() : fs::path(".");
  const std::string stem = p.filename().string() + "_";
  std::error_code ec;
  if (prefix.empty() || !fs::is_directory(dir, ec)) return false;
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (e.path().filename().string().rfind(stem, 0) == 0) return true;
  return false;
}

// One search run: options, output folder, and the report being filled.
class Search {
 public:
  Search(const MsaSearchOptions& o, const std::string& msa_dir, MsaSearchResult& r) : opt(o), dir(msa_dir), res(r) {}

  std::string path(const std::string& name) const { return dir + "/" + name; }
  // True when `name` is to be read from a previous run rather than computed.
  bool reuse(const std::string& name) const { return opt.use_precomputed_msas && fs::exists(path(name)); }

  ToolOptions tool(const std::string& binary) const {
    ToolOptions t;
    t.binary = binary;
    t.cpus = opt.cpus;
    t.timeout_s = opt.timeout_s;
    t.tmp_dir = opt.tmp_dir;
    return t;
  }

  void ran(const std::string& name, const ToolRun& run) {
    res.written.push_back(name);
    if (!res.commands.empty()) res.commands += '\n';
    res.commands += run.command;
    log::info("msa search: wrote ", path(name), " (", run.seconds, " s)");
  }
  void reused(const std::string& name) {
    res.reused.push_back(name);
    log::info("msa search: reusing ", path(name));
  }

  // jackhmmer into `name`, keeping (and storing) at most `max_hits` rows as AlphaFold 2.3 does.
  StockholmAlignment jackhmmer(const std::string& query, const std::string& database, const std::string& name,
                               size_t max_hits) {
    if (reuse(name)) {
      reused(name);
      return read_stockholm_alignment(path(name), max_hits);
    }
    JackhmmerOptions j;
    j.tool = tool(opt.jackhmmer_binary);
    j.database_path = database;
    JackhmmerResult jr = run_jackhmmer(j, query, path(name));
    if (max_hits > 0 && jr.alignment.names.size() > max_hits) {
      jr.alignment = truncated(std::move(jr.alignment), max_hits);
      write_file_atomic(path(name), format_stockholm(jr.alignment, /*query_rf=*/true));
    }
    ran(name, jr.run);
    return std::move(jr.alignment);
  }

  const MsaSearchOptions& opt;
  std::string dir;
  MsaSearchResult& res;
};

void check_databases(const Search& s, const MsaSearchOptions& o) {
  std::vector<std::string> missing;
  const auto file = [&](const char* what, const std::string& path, const char* output) {
    if (!s.reuse(output) && !fs::is_regular_file(path)) missing.push_back(std::string(what) + " " + path);
  };
  const auto hh = [&](const char* what, const std::string& prefix, const char* output) {
    if (!s.reuse(output) && !hh_database_exists(prefix))
      missing.push_back(std::string(what) + " " + prefix + " (no " + prefix + "_* files)");
  };
  const DatabasePaths& d = o.databases;
  if (o.use_mmseqs) {
    if (!s.reuse("mmseqs_hits.a3m") && !fs::is_regular_file(d.mmseqs + ".dbtype"))
      missing.push_back("mmseqs " + d.mmseqs + " (no " + d.mmseqs + ".dbtype)");
  } else {
    file("uniref90", d.uniref90, "uniref90_hits.sto");
    file("mgnify", d.mgnify, "mgnify_hits.sto");
    if (o.db_preset == DbPreset::kFullDbs) {
      hh("bfd", d.bfd, "bfd_uniref_hits.a3m");
      hh("uniref30", d.uniref30, "bfd_uniref_hits.a3m");
    } else {
      file("small_bfd", d.small_bfd, "small_bfd_hits.sto");
    }
  }
  if (o.template_searcher == TemplateSearcher::kHhsearch) hh("pdb70", d.pdb70, "pdb70_hits.hhr");
  if (o.template_searcher == TemplateSearcher::kHmmsearch) file("pdb_seqres", d.pdb_seqres, "pdb_hits.sto");
  if (missing.empty()) return;
  std::string msg = "database(s) not found:";
  for (const std::string& m : missing) msg += "\n  " + m;
  msg += "\n(set --data_dir to AlphaFold's download folder, or the per-database flags)";
  throw Error(msg);
}

// Every tool that will run is looked up before the first one starts (a missing hhblits should not
// surface after hours of jackhmmer): "<tool> not found in PATH; install <package>".
void check_tools(const Search& s, const MsaSearchOptions& o) {
  const auto need = [&](const std::string& binary, const char* name, const char* package, const char* output) {
    if (!s.reuse(output)) require_program(binary.empty() ? name : binary, std::string("install ") + package);
  };
  if (o.use_mmseqs) {
    need(o.mmseqs_binary, "mmseqs", "mmseqs2", "mmseqs_hits.a3m");
  } else {
    need(o.jackhmmer_binary, "jackhmmer", "hmmer", "uniref90_hits.sto");
    need(o.jackhmmer_binary, "jackhmmer", "hmmer", "mgnify_hits.sto");
    if (o.db_preset == DbPreset::kFullDbs) need(o.hhblits_binary, "hhblits", "hhsuite", "bfd_uniref_hits.a3m");
    if (o.db_preset == DbPreset::kReducedDbs) need(o.jackhmmer_binary, "jackhmmer", "hmmer", "small_bfd_hits.sto");
  }
  if (o.template_searcher == TemplateSearcher::kHhsearch) need(o.hhsearch_binary, "hhsearch", "hhsuite", "pdb70_hits.hhr");
  if (o.template_searcher == TemplateSearcher::kHmmsearch) {
    need(o.hmmbuild_binary, "hmmbuild", "hmmer", "pdb_hits.sto");
    need(o.hmmsearch_binary, "hmmsearch", "hmmer", "pdb_hits.sto");
  }
}

// hhsearch on `query_a3m_text` into pdb70_hits.hhr (or reused).
void hhsearch_templates(Search& s, const std::string& query_a3m_text, const std::string& scratch_dir) {
  const std::string name = "pdb70_hits.hhr";
  if (s.reuse(name)) {
    s.reused(name);
    s.res.template_hits = read_hhr(s.path(name));
    return;
  }
  const std::string input = scratch_dir + "/template_query.a3m";
  write_file_atomic(input, query_a3m_text);
  HhsearchOptions h;
  h.tool = s.tool(s.opt.hhsearch_binary);
  h.databases = {s.opt.databases.pdb70};
  HhsearchResult hr = run_hhsearch(h, input, s.path(name));
  s.res.template_hits = std::move(hr.hits);
  s.ran(name, hr.run);
}

}  // namespace

DbPreset parse_db_preset(const std::string& s) {
  if (s == "full_dbs") return DbPreset::kFullDbs;
  if (s == "reduced_dbs") return DbPreset::kReducedDbs;
  FC_THROW("unknown db_preset '", s, "' (expected full_dbs or reduced_dbs)");
}

TemplateSearcher parse_template_searcher(const std::string& s) {
  if (s == "hhsearch") return TemplateSearcher::kHhsearch;
  if (s == "hmmsearch") return TemplateSearcher::kHmmsearch;
  if (s == "none") return TemplateSearcher::kNone;
  FC_THROW("unknown template searcher '", s, "' (expected hhsearch, hmmsearch or none)");
}

DatabasePaths DatabasePaths::from_data_dir(const std::string& data_dir) {
  DatabasePaths d;
  d.uniref90 = data_dir + "/uniref90/uniref90.fasta";
  d.mgnify = data_dir + "/mgnify/mgy_clusters_2022_05.fa";
  d.bfd = data_dir + "/bfd/bfd_metaclust_clu_complete_id30_c90_final_seq.sorted_opt";
  d.uniref30 = data_dir + "/uniref30/UniRef30_2021_03";
  d.small_bfd = data_dir + "/small_bfd/bfd-first_non_consensus_sequences.fasta";
  d.pdb70 = data_dir + "/pdb70/pdb70";
  d.pdb_seqres = data_dir + "/pdb_seqres/pdb_seqres.txt";
  d.mmseqs = data_dir + "/mmseqs/uniref90";
  return d;
}

std::string msa_output_dir(const std::string& output_dir, const std::string& fasta_path) {
  return output_dir + "/" + fs::path(fasta_path).stem().string() + "/msas";
}

StockholmAlignment deduplicate_stockholm(const StockholmAlignment& sto) {
  if (sto.names.empty()) return sto;
  const std::string& query = sto.rows[0];
  StockholmAlignment out;
  std::unordered_set<std::string> seen;
  for (size_t i = 0; i < sto.names.size(); ++i) {
    std::string key;
    key.reserve(query.size());
    for (size_t k = 0; k < query.size() && k < sto.rows[i].size(); ++k)
      if (query[k] != '-') key += sto.rows[i][k];  // AlphaFold masks on the query's '-' columns
    if (!seen.insert(std::move(key)).second) continue;
    out.names.push_back(sto.names[i]);
    out.rows.push_back(sto.rows[i]);
    out.descriptions.push_back(i < sto.descriptions.size() ? sto.descriptions[i] : "");
  }
  return out;
}

StockholmAlignment remove_empty_columns(const StockholmAlignment& sto) {
  if (sto.names.empty()) return sto;
  const size_t cols = sto.rows[0].size();
  std::vector<bool> keep(cols, false);
  for (const std::string& row : sto.rows) {
    FC_CHECK(row.size() == cols, "remove_empty_columns: rows of different lengths (", row.size(), " vs ", cols, ")");
    for (size_t k = 0; k < cols; ++k)
      if (!is_gap(row[k])) keep[k] = true;
  }
  StockholmAlignment out = sto;
  for (std::string& row : out.rows) {
    std::string kept;
    kept.reserve(cols);
    for (size_t k = 0; k < cols; ++k)
      if (keep[k]) kept += row[k];
    row = std::move(kept);
  }
  return out;
}

std::string format_stockholm(const StockholmAlignment& sto, bool query_rf) {
  size_t width = query_rf ? 7 : 0;  // "#=GC RF"
  for (const std::string& n : sto.names) width = std::max(width, n.size());
  std::string out = "# STOCKHOLM 1.0\n\n";
  bool any_description = false;
  for (size_t i = 0; i < sto.names.size(); ++i) {
    if (i >= sto.descriptions.size() || sto.descriptions[i].empty()) continue;
    out += "#=GS " + sto.names[i] + " DE " + sto.descriptions[i] + "\n";
    any_description = true;
  }
  if (any_description) out += "\n";
  for (size_t i = 0; i < sto.names.size(); ++i)
    out += sto.names[i] + std::string(width - sto.names[i].size() + 1, ' ') + sto.rows[i] + "\n";
  if (query_rf && !sto.rows.empty()) {
    std::string rf = sto.rows[0];
    for (char& c : rf) c = is_gap(c) ? '.' : 'x';
    out += "#=GC RF" + std::string(width - 7 + 1, ' ') + rf + "\n";
  }
  out += "//\n";
  return out;
}

MsaSearchResult run_msa_search(const std::string& query_fasta, const std::string& msa_dir,
                               const MsaSearchOptions& options) {
  return with_context("in the MSA search for " + query_fasta, [&] {
    const std::vector<FastaRecord> records = read_fasta(query_fasta);
    if (records.size() != 1)
      FC_THROW("expected exactly one sequence in ", query_fasta, " (found ", records.size(),
               "); the monomer search takes one chain per FASTA file");
    if (options.use_mmseqs && options.template_searcher == TemplateSearcher::kHmmsearch)
      FC_THROW("the hmmsearch template search needs jackhmmer's uniref90 Stockholm MSA: use hhsearch (or none) with "
               "the MMseqs2 path");
    MsaSearchResult result;
    result.msa_dir = msa_dir;
    Search s(options, msa_dir, result);
    check_databases(s, options);
    check_tools(s, options);
    std::error_code ec;
    fs::create_directories(msa_dir, ec);
    if (!fs::is_directory(msa_dir)) FC_THROW("cannot create the output folder ", msa_dir, ": ", ec.message());

    // The tools get a plain, validated copy of the query (the input may be gzip, wrapped, ...).
    TempDir scratch("foldcore_msa_search", options.tmp_dir);
    const std::string query = scratch.file("query.fasta");
    write_fasta(query, records, 0);
    const DatabasePaths& db = options.databases;

    if (options.use_mmseqs) {
      const std::string name = "mmseqs_hits.a3m";
      std::string a3m_text;
      if (s.reuse(name)) {
        s.reused(name);
        a3m_text = read_text_file(s.path(name));
        result.bfd = parse_a3m(a3m_text, s.path(name));
      } else {
        MmseqsOptions m;
        m.tool = s.tool(options.mmseqs_binary);
        m.database_path = db.mmseqs;
        m.num_iterations = options.mmseqs_num_iterations;
        MmseqsResult mr = run_mmseqs(m, query, s.path(name));
        result.bfd = std::move(mr.msa);
        a3m_text = read_text_file(s.path(name));
        s.ran(name, mr.run);
      }
      if (options.template_searcher == TemplateSearcher::kHhsearch) {
        // The first uniref_max_hits records of the A3M, as the jackhmmer path truncates its MSA.
        FastaOptions fo;
        fo.alphabet = Alphabet::kProteinAligned;
        std::vector<FastaRecord> rows = parse_fasta(a3m_text, s.path(name), fo);
        if (options.uniref_max_hits > 0 && rows.size() > options.uniref_max_hits) rows.resize(options.uniref_max_hits);
        hhsearch_templates(s, format_fasta(rows, 0), scratch.path());
      }
      return result;
    }

    const StockholmAlignment uniref90 = s.jackhmmer(query, db.uniref90, "uniref90_hits.sto", options.uniref_max_hits);
    const StockholmAlignment mgnify = s.jackhmmer(query, db.mgnify, "mgnify_hits.sto", options.mgnify_max_hits);
    result.uniref90 = stockholm_to_msa(uniref90);
    result.mgnify = stockholm_to_msa(mgnify);

    if (options.template_searcher != TemplateSearcher::kNone) {
      const StockholmAlignment for_templates = remove_empty_columns(deduplicate_stockholm(uniref90));
      if (options.template_searcher == TemplateSearcher::kHhsearch) {
        hhsearch_templates(s, stockholm_to_a3m(for_templates), scratch.path());
      } else {
        const std::string name = "pdb_hits.sto";
        if (s.reuse(name)) {
          s.reused(name);
          result.hmmsearch_hits = hmmsearch_hits(read_stockholm_alignment(s.path(name)));
        } else {
          const std::string input = scratch.file("template_query.sto");
          write_file_atomic(input, format_stockholm(for_templates, /*query_rf=*/true));
          HmmbuildOptions b;
          b.tool = s.tool(options.hmmbuild_binary);
          HmmsearchOptions h;
          h.tool = s.tool(options.hmmsearch_binary);
          h.database_path = db.pdb_seqres;
          HmmsearchResult hr = run_hmmsearch_on_msa(b, h, input, s.path(name));
          result.hmmsearch_hits = std::move(hr.hits);
          s.ran(name, hr.run);
        }
      }
    }

    if (options.db_preset == DbPreset::kReducedDbs) {
      result.bfd = stockholm_to_msa(s.jackhmmer(query, db.small_bfd, "small_bfd_hits.sto", 0));
    } else {
      const std::string name = "bfd_uniref_hits.a3m";
      if (s.reuse(name)) {
        s.reused(name);
        result.bfd = read_a3m(s.path(name));
      } else {
        HhblitsOptions h;
        h.tool = s.tool(options.hhblits_binary);
        h.databases = {db.bfd, db.uniref30};
        HhblitsResult hr = run_hhblits(h, query, s.path(name));
        result.bfd = std::move(hr.msa);
        s.ran(name, hr.run);
      }
    }
    return result;
  });
}

}  // namespace foldcore::data
