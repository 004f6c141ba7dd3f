// `foldcore preprocess --mmcif_dir D --alignment_dir A --out store.h5 [--template_mmcif_dir T]
//  [--max_template_date YYYY-MM-DD] [--threads N] [--min_length L] [--max_length L]
//  [--max_resolution R]`: every protein chain of every D/*.cif[.gz] as a TrainingChain
// (training_chain.h) in one feature store (feature_store.h). Alignments come from
// A/<pdbid>_<chain>/ (OpenFold's layout); a chain without that folder gets a query-only MSA
// (logged). A file or chain that cannot be read (corrupt mmCIF, corrupt alignment, not a usable
// chain) is reported with the file and the reason and skipped; the run ends with a summary.
// Files are parsed by N threads; chains are added in file order, so the store's index order does
// not depend on thread timing. The store is written atomically: it appears only complete, and the
// command fails (no output) only when no chain could be written or the output cannot be written.
#include <algorithm>
#include <condition_variable>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "apps/commands.h"
#include "core/error.h"
#include "core/log.h"
#include "core/timer.h"
#if defined(FOLDCORE_HAVE_DATA)
#include "data_pipeline/training/feature_store.h"
#include "data_pipeline/formats/mmcif_parser.h"
#endif

namespace foldcore::apps {

namespace {
struct PreprocessArgs {
  std::string mmcif_dir, alignment_dir, out, template_mmcif_dir, max_template_date;
  int threads = 0;
  int64_t min_length = 0, max_length = 0;
  double max_resolution = 0;
};

}  // namespace

#if defined(FOLDCORE_HAVE_DATA)
namespace {

namespace fs = std::filesystem;

// What one mmCIF file gave: chains to write and skip reports ("what: reason").
struct FileResult {
  std::vector<data::TrainingChain> chains;
  std::vector<std::string> skipped;
  int64_t query_only = 0;
};

std::vector<fs::path> mmcif_files(const std::string& dir) {
  std::error_code ec;
  FC_CHECK(fs::is_directory(dir, ec), "--mmcif_dir '", dir, "': not a folder");
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string n = e.path().filename().string();
    const bool cif = n.size() > 4 && (n.ends_with(".cif") || n.ends_with(".cif.gz"));
    if (cif && e.is_regular_file()) files.push_back(e.path());
  }
  std::sort(files.begin(), files.end());
  return files;
}

FileResult process_file(const fs::path& file, const PreprocessArgs& a, const data::TrainingChainOptions& opts) {
  FileResult r;
  data::Structure s;
  try {
    s = data::read_mmcif(file.string());
  } catch (const Error& e) {
    r.skipped.push_back(file.string() + ": " + e.what());
    return r;
  }
  std::vector<std::string> seen;
  for (const data::Chain& c : s.chains) {
    if (!s.is_protein_chain(c) || std::find(seen.begin(), seen.end(), c.auth_id) != seen.end()) continue;
    seen.push_back(c.auth_id);
    std::string id = s.id.empty() ? file.filename().string().substr(0, 4) : s.id;
    std::transform(id.begin(), id.end(), id.begin(), [](unsigned char ch) { return static_cast<char>(std::tolower(ch)); });
    const std::string name = id + "_" + c.auth_id;
    const fs::path aln = fs::path(a.alignment_dir) / name;
    std::error_code ec;
    const bool has_aln = !a.alignment_dir.empty() && fs::is_directory(aln, ec);
    try {
      data::TrainingChain tc = data::training_chain_from_mmcif(s, c.auth_id, has_aln ? aln.string() : "", opts);
      const double res = tc.resolution;
      if (a.min_length > 0 && tc.num_res() < a.min_length) {
        r.skipped.push_back(name + ": " + std::to_string(tc.num_res()) + " residues < --min_length");
      } else if (a.max_length > 0 && tc.num_res() > a.max_length) {
        r.skipped.push_back(name + ": " + std::to_string(tc.num_res()) + " residues > --max_length");
      } else if (a.max_resolution > 0 && (res <= 0 || res > a.max_resolution)) {
        r.skipped.push_back(name + ": resolution " + (res > 0 ? std::to_string(res) : "unknown") + " fails --max_resolution");
      } else {
        if (!has_aln) {
          log::info("preprocess: ", name, ": no alignment folder ", aln.string(), ", query-only MSA");
          ++r.query_only;
        }
        r.chains.push_back(std::move(tc));
      }
    } catch (const Error& e) {
      r.skipped.push_back(name + " (" + file.string() + "): " + e.what());
    }
  }
  return r;
}

int run_preprocess(const PreprocessArgs& a) {
  const std::vector<fs::path> files = mmcif_files(a.mmcif_dir);
  FC_CHECK(!files.empty(), "--mmcif_dir '", a.mmcif_dir, "': no *.cif or *.cif.gz files");
  data::TrainingChainOptions opts;
  opts.template_mmcif_dir = a.template_mmcif_dir;
  opts.max_template_date = a.max_template_date;
  const size_t threads = std::clamp<size_t>(a.threads > 0 ? static_cast<size_t>(a.threads) : std::thread::hardware_concurrency(),
                                            1, files.size());
  WallTimer timer;
  data::FeatureStoreWriter writer(a.out);

  // Workers parse files in any order; this thread adds their chains in file order. A worker
  // waits when it is more than 2 × threads files ahead, bounding the chains held in memory.
  std::mutex m;
  std::condition_variable cv;
  std::vector<std::optional<FileResult>> results(files.size());
  size_t next_file = 0, next_commit = 0;
  bool stop = false;
  auto worker = [&] {
    for (;;) {
      size_t i;
      {
        std::unique_lock<std::mutex> lock(m);
        cv.wait(lock, [&] { return stop || next_file >= files.size() || next_file < next_commit + 2 * threads; });
        if (stop || next_file >= files.size()) return;
        i = next_file++;
      }
      FileResult r = process_file(files[i], a, opts);
      std::lock_guard<std::mutex> lock(m);
      results[i] = std::move(r);
      cv.notify_all();
    }
  };
  std::vector<std::thread> pool;
  for (size_t t = 0; t < threads; ++t) pool.emplace_back(worker);
  int64_t written = 0, query_only = 0;
  std::vector<std::string> skipped;
  try {
    for (; next_commit < files.size();) {
      FileResult r;
      {
        std::unique_lock<std::mutex> lock(m);
        cv.wait(lock, [&] { return results[next_commit].has_value(); });
        r = std::move(*results[next_commit]);
        results[next_commit].reset();
      }
      for (data::TrainingChain& c : r.chains) {
        try {
          writer.add(c);
          ++written;
        } catch (const Error& e) {  // e.g. a chain that fails validation
          r.skipped.push_back(c.name + ": " + e.what());
        }
      }
      query_only += r.query_only;
      for (const std::string& s : r.skipped) {
        log::warn("preprocess: skipped ", s);
        skipped.push_back(s);
      }
      std::lock_guard<std::mutex> lock(m);
      ++next_commit;
      cv.notify_all();
    }
  } catch (...) {
    {
      std::lock_guard<std::mutex> lock(m);
      stop = true;
    }
    cv.notify_all();
    for (auto& t : pool) t.join();
    throw;
  }
  for (auto& t : pool) t.join();
  FC_CHECK(written > 0, "no chain could be written from ", files.size(), " files (", skipped.size(),
           " skipped); no store written");
  writer.finish();
  const double secs = timer.seconds();
  std::printf("preprocess: wrote %lld chains (%lld with a query-only MSA) from %zu files to %s in %.2f s (%.1f ms per chain)\n",
              static_cast<long long>(written), static_cast<long long>(query_only), files.size(), a.out.c_str(), secs,
              1000.0 * secs / static_cast<double>(written));
  std::printf("preprocess: skipped %zu\n", skipped.size());
  for (const std::string& s : skipped) std::printf("preprocess: skipped %s\n", s.c_str());
  return 0;
}

}  // namespace
#endif

void add_preprocess_command(CLI::App& app) {
  CLI::App* sub = app.add_subcommand(
      "preprocess", "Convert mmCIF files and their precomputed alignments into a training feature store (HDF5)");
  auto a = std::make_shared<PreprocessArgs>();
  sub->add_option("--mmcif_dir", a->mmcif_dir, "folder of *.cif / *.cif.gz structures")->required();
  sub->add_option("--alignment_dir", a->alignment_dir,
                  "folder with one <pdbid>_<chain>/ subfolder of alignments per chain (OpenFold layout)")
      ->required();
  sub->add_option("--out", a->out, "output feature store (.h5), written atomically")->required()->check(file_to_write());
  sub->add_option("--template_mmcif_dir", a->template_mmcif_dir, "template structures for pdb70_hits.hhr (optional)");
  sub->add_option("--max_template_date", a->max_template_date, "latest template release date, YYYY-MM-DD");
  sub->add_option("--threads", a->threads, "parser threads (default: all cores)");
  sub->add_option("--min_length", a->min_length, "skip chains shorter than this");
  sub->add_option("--max_length", a->max_length, "skip chains longer than this");
  sub->add_option("--max_resolution", a->max_resolution, "skip chains above this resolution (Å) or without one");
  set_action(sub, [a]() -> int {
#if defined(FOLDCORE_HAVE_DATA)
    return run_preprocess(*a);
#else
    FC_THROW("this foldcore was built without the data pipeline (zlib); `preprocess` is unavailable");
#endif
  });
}

}  // namespace foldcore::apps
