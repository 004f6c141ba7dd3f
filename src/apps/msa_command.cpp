// `foldcore msa`: AlphaFold's search stage alone (jackhmmer / hhblits / hhsearch or hmmsearch, or
// MMseqs2), so the CPU-heavy searches run apart from GPU inference. For each FASTA file the
// results go to <output_dir>/<fasta name>/msas/ with AlphaFold's file names, which `predict` (and
// AlphaFold's own --use_precomputed_msas) then read. Prints one JSON line per target.
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "apps/commands.h"
#include "core/error.h"
#include "core/json_text.h"

#ifdef FOLDCORE_HAVE_DATA
#include <chrono>

#include "data_pipeline/search/msa_search.h"
#endif

namespace foldcore::apps {
namespace {

struct MsaArgs {
  std::vector<std::string> fasta_paths;
  std::string output_dir, data_dir;
  std::string db_preset = "full_dbs";
  std::string template_searcher = "hhsearch";
  bool use_precomputed_msas = false;
  bool mmseqs = false;
  int cpus = 8;
  double timeout_s = 0.0;
  // Per-database overrides of the --data_dir layout (AlphaFold's flag names).
  std::string uniref90, mgnify, bfd, uniref30, small_bfd, pdb70, pdb_seqres, mmseqs_db;
  std::string jackhmmer, hhblits, hhsearch, hmmbuild, hmmsearch, mmseqs_bin;
};

#ifdef FOLDCORE_HAVE_DATA
std::string json_list(const std::vector<std::string>& v) {
  std::string out = "[";
  for (size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + json_string(v[i]);
  return out + "]";
}

int run_msa(const MsaArgs& a) {
  data::MsaSearchOptions o;
  o.databases = data::DatabasePaths::from_data_dir(a.data_dir);
  const auto override_path = [](std::string& field, const std::string& flag) {
    if (!flag.empty()) field = flag;
  };
  override_path(o.databases.uniref90, a.uniref90);
  override_path(o.databases.mgnify, a.mgnify);
  override_path(o.databases.bfd, a.bfd);
  override_path(o.databases.uniref30, a.uniref30);
  override_path(o.databases.small_bfd, a.small_bfd);
  override_path(o.databases.pdb70, a.pdb70);
  override_path(o.databases.pdb_seqres, a.pdb_seqres);
  override_path(o.databases.mmseqs, a.mmseqs_db);
  o.db_preset = data::parse_db_preset(a.db_preset);
  o.template_searcher = data::parse_template_searcher(a.template_searcher);
  o.use_precomputed_msas = a.use_precomputed_msas;
  o.use_mmseqs = a.mmseqs;
  o.cpus = a.cpus;
  o.timeout_s = a.timeout_s;
  o.jackhmmer_binary = a.jackhmmer;
  o.hhblits_binary = a.hhblits;
  o.hhsearch_binary = a.hhsearch;
  o.hmmbuild_binary = a.hmmbuild;
  o.hmmsearch_binary = a.hmmsearch;
  o.mmseqs_binary = a.mmseqs_bin;

  for (const std::string& fasta : a.fasta_paths) {
    const auto t0 = std::chrono::steady_clock::now();
    const std::string msa_dir = data::msa_output_dir(a.output_dir, fasta);
    const data::MsaSearchResult r = data::run_msa_search(fasta, msa_dir, o);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const size_t templates = o.template_searcher == data::TemplateSearcher::kHmmsearch ? r.hmmsearch_hits.size()
                                                                                         : r.template_hits.size();
    std::printf(
        "{\"fasta\": %s, \"msa_dir\": %s, \"written\": %s, \"reused\": %s, \"uniref90_depth\": %zu, "
        "\"mgnify_depth\": %zu, \"bfd_depth\": %zu, \"template_hits\": %zu, \"seconds\": %.2f}\n",
        json_string(fasta).c_str(), json_string(msa_dir).c_str(), json_list(r.written).c_str(),
        json_list(r.reused).c_str(), r.uniref90.depth(), r.mgnify.depth(), r.bfd.depth(), templates, seconds);
    std::fflush(stdout);
  }
  return 0;
}
#endif

}  // namespace

void add_msa_command(CLI::App& app) {
  CLI::App* sub = app.add_subcommand(
      "msa", "Run AlphaFold's MSA and template searches only (CPU), writing <output_dir>/<target>/msas/");
  auto a = std::make_shared<MsaArgs>();
  sub->add_option("--fasta_paths", a->fasta_paths, "FASTA files, one chain each (comma-separated or repeated)")
      ->required()
      ->delimiter(',')
      ->check(CLI::ExistingFile);
  sub->add_option("--output_dir", a->output_dir, "results go to <output_dir>/<fasta name>/msas/")
      ->required()
      ->check(folder_to_write());
  sub->add_option("--data_dir", a->data_dir, "AlphaFold's database folder (uniref90/, mgnify/, bfd/, pdb70/, ...)")
      ->required();
  sub->add_option("--db_preset", a->db_preset, "full_dbs (BFD + UniRef30 via hhblits) or reduced_dbs (small BFD)")
      ->check(CLI::IsMember({"full_dbs", "reduced_dbs"}))
      ->capture_default_str();
  sub->add_option("--template_searcher", a->template_searcher,
                  "hhsearch (pdb70, monomer), hmmsearch (pdb_seqres, multimer) or none")
      ->check(CLI::IsMember({"hhsearch", "hmmsearch", "none"}))
      ->capture_default_str();
  sub->add_flag("--use_precomputed_msas", a->use_precomputed_msas, "reuse outputs already in the msas folder");
  sub->add_flag("--mmseqs", a->mmseqs, "MMseqs2 fast path (one search against --mmseqs_database_path)");
  sub->add_option("--cpus", a->cpus, "threads per tool")->check(CLI::Range(1, 1024))->capture_default_str();
  sub->add_option("--timeout", a->timeout_s, "seconds per tool run before it is killed (0: none)")
      ->check(at_least(0));
  sub->add_option("--uniref90_database_path", a->uniref90);
  sub->add_option("--mgnify_database_path", a->mgnify);
  sub->add_option("--bfd_database_path", a->bfd);
  sub->add_option("--uniref30_database_path", a->uniref30);
  sub->add_option("--small_bfd_database_path", a->small_bfd);
  sub->add_option("--pdb70_database_path", a->pdb70);
  sub->add_option("--pdb_seqres_database_path", a->pdb_seqres);
  sub->add_option("--mmseqs_database_path", a->mmseqs_db, "an `mmseqs createdb` database");
  sub->add_option("--jackhmmer_binary_path", a->jackhmmer);
  sub->add_option("--hhblits_binary_path", a->hhblits);
  sub->add_option("--hhsearch_binary_path", a->hhsearch);
  sub->add_option("--hmmbuild_binary_path", a->hmmbuild);
  sub->add_option("--hmmsearch_binary_path", a->hmmsearch);
  sub->add_option("--mmseqs_binary_path", a->mmseqs_bin);
  set_action(sub, [a]() -> int {
#ifdef FOLDCORE_HAVE_DATA
    return run_msa(*a);
#else
    FC_THROW("this foldcore was built without the data pipeline (zlib); `msa` is unavailable");
#endif
  });
}

}  // namespace foldcore::apps
