// Parser throughput: A3M and Stockholm (query73 alignments repeated into a few-MB temporary file,
// plain and gzip) and .npz reading (AlphaFold params.npz, stored; af2_raw_features.npz, deflated).
// One JSON line per case: {"bench":"parsers","case":...,"mb":...,"ms":...,"mb_per_s":...}.
// Data from FOLDCORE_SHARED_DIR, else ../shared relative to the working directory.
#include <unistd.h>
#include <zlib.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "bench_util.h"
#include "data_pipeline/formats/a3m.h"
#include "data_pipeline/formats/npy.h"
#include "data_pipeline/formats/stockholm.h"
#include "data_pipeline/formats/text_reader.h"

using namespace foldcore;
using namespace foldcore::data;
namespace fs = std::filesystem;

namespace {

std::string shared_dir() {
  if (const char* env = std::getenv("FOLDCORE_SHARED_DIR")) return env;
  return "../shared";
}

void write_text(const std::string& path, const std::string& s, bool gzip) {
  if (gzip) {
    gzFile g = gzopen(path.c_str(), "wb6");
    if (!g || gzwrite(g, s.data(), static_cast<unsigned>(s.size())) != static_cast<int>(s.size()))
      FC_THROW("cannot write ", path);
    gzclose(g);
  } else {
    std::ofstream(path, std::ios::binary) << s;
  }
}

void report(const std::string& name, double bytes, double ms, int64_t rows) {
  bench::JsonLine()
      .str("bench", "parsers")
      .str("case", name)
      .str("device", "cpu")
      .num("mb", bytes / 1e6)
      .num("ms", ms)
      .num("mb_per_s", bytes / 1e6 / (ms / 1e3))
      .integer("rows", rows)
      .print();
}

}  // namespace

int main() {
  try {
    const std::string data = shared_dir() + "/data/query73/alignments/";
    const fs::path tmp = fs::temp_directory_path() / ("fc_bench_parsers_" + std::to_string(::getpid()));
    fs::create_directories(tmp);
    constexpr double kTargetBytes = 8e6;

    // A3M: the 1024-sequence bfd file repeated (the query record once, hits many times).
    {
      const std::string text = read_text_file(data + "bfd_uniclust_hits.a3m");
      std::string big = text;
      while (big.size() < kTargetBytes) big += text.substr(text.find('>', 1));
      for (const bool gz : {false, true}) {
        const std::string p = (tmp / (gz ? "big.a3m.gz" : "big.a3m")).string();
        write_text(p, big, gz);
        int64_t rows = 0;
        const double ms = bench::time_ms(Device::cpu(), [&] { rows = static_cast<int64_t>(read_a3m(p).depth()); }, 1, 5);
        report(gz ? "a3m_gzip" : "a3m", static_cast<double>(big.size()), ms, rows);
      }
    }
    // Stockholm: uniref90 hits with their sequence lines repeated under fresh names.
    {
      const std::string text = read_text_file(data + "uniref90_hits.sto");
      const size_t body = text.find("\nquery ");
      const size_t end = text.rfind("//");
      std::string head = text.substr(0, body + 1), rows_text = text.substr(body + 1, end - body - 1);
      std::string big = head;
      for (int copy = 0; big.size() < kTargetBytes; ++copy) {
        // Rename every hit (not the query) so the copies are new sequences, not block continuations.
        size_t pos = 0;
        while (pos < rows_text.size()) {
          const size_t nl = rows_text.find('\n', pos);
          const std::string line = rows_text.substr(pos, nl == std::string::npos ? std::string::npos : nl - pos);
          pos = nl == std::string::npos ? rows_text.size() : nl + 1;
          if (line.empty() || line[0] == '#') continue;
          if (line.rfind("query ", 0) == 0) {
            if (copy == 0) big += line + "\n";
            continue;
          }
          big += 'c';
          big += std::to_string(copy);
          big += '_';
          big += line;
          big += '\n';
        }
      }
      big += "//\n";
      const std::string p = (tmp / "big.sto").string();
      write_text(p, big, false);
      int64_t rows = 0;
      const double ms = bench::time_ms(Device::cpu(), [&] { rows = static_cast<int64_t>(read_stockholm(p).depth()); }, 1, 5);
      report("stockholm", static_cast<double>(big.size()), ms, rows);
    }
    // npz: every array of the stored params file and of the deflated raw-feature file.
    for (const auto& [name, path] : {std::pair<std::string, std::string>{"npz_stored_params", shared_dir() + "/af2/ref/params.npz"},
                                     {"npz_deflated_features", shared_dir() + "/data/query73/af2_raw_features.npz"}}) {
      if (!fs::exists(path)) continue;
      double bytes = 0;
      int64_t n = 0;
      const double ms = bench::time_ms(Device::cpu(), [&] {
        bytes = 0;
        const auto all = read_npz(path);
        n = static_cast<int64_t>(all.size());
        for (const auto& [k, a] : all) bytes += static_cast<double>(a.data.size());
      }, 1, 5);
      report(name, bytes, ms, n);  // MB of array data produced per second
    }
    fs::remove_all(tmp);
  } catch (const Error& e) {
    std::fprintf(stderr, "bench_parsers: %s\n", e.what());
    return 1;
  }
  return 0;
}
