// mmCIF parse throughput: each shared mmCIF (<shared>/data/mmcifs, or the folder given as the
// first argument) parsed into a Structure several times; MB/s of uncompressed text, median time.
// One JSON line per file plus a total line.
//   bench_mmcif [mmcif_dir] [--repeats N]
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "bench/bench_util.h"
#include "data_pipeline/formats/mmcif_parser.h"

int main(int argc, char** argv) {
  using namespace foldcore;
  namespace fs = std::filesystem;
  std::string dir;
  int repeats = 5;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--repeats") == 0 && i + 1 < argc)
      repeats = std::max(1, std::atoi(argv[++i]));
    else
      dir = argv[i];
  }
  if (dir.empty()) {
    const char* env = std::getenv("FOLDCORE_SHARED_DIR");
    // Else ../shared next to the repository, found from this source file's path (which may be
    // relative to the build folder when ccache rewrites paths).
    dir = env ? std::string(env) + "/data/mmcifs"
              : (fs::absolute(fs::path(__FILE__)).parent_path().parent_path().parent_path() / "shared/data/mmcifs").string();
  }
  std::vector<fs::path> files;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    std::fprintf(stderr, "bench_mmcif: %s is not a folder (pass the mmCIF folder or set FOLDCORE_SHARED_DIR)\n",
                 dir.c_str());
    return 1;
  }
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().extension() == ".cif" || e.path().string().ends_with(".cif.gz")) files.push_back(e.path());
  std::sort(files.begin(), files.end());
  if (files.empty()) {
    std::fprintf(stderr, "bench_mmcif: no .cif files in %s\n", dir.c_str());
    return 1;
  }
  const Device cpu = Device::cpu();
  double total_mb = 0, total_ms = 0;
  for (const fs::path& f : files) {
    const double mb = static_cast<double>(fs::file_size(f)) / 1e6;
    size_t atoms = 0;
    const double ms = bench::time_ms(cpu, [&] { atoms = data::read_mmcif(f.string()).num_atoms(); }, 1, repeats);
    total_mb += mb;
    total_ms += ms;
    bench::JsonLine()
        .str("bench", "mmcif")
        .str("case", f.filename().string())
        .str("device", "cpu")
        .num("mb", mb)
        .integer("atoms", static_cast<long long>(atoms))
        .integer("repeats", repeats)
        .num("ms", ms)
        .num("mb_per_s", mb / (ms * 1e-3))
        .print();
  }
  bench::JsonLine()
      .str("bench", "mmcif")
      .str("case", "total")
      .str("device", "cpu")
      .integer("files", static_cast<long long>(files.size()))
      .num("mb", total_mb)
      .num("ms", total_ms)
      .num("mb_per_s", total_mb / (total_ms * 1e-3))
      .print();
  return 0;
}
