// Benchmark helpers: timing loops (CUDA events on GPU, steady clock on CPU), peak memory, and
// one-JSON-line-per-case output:
//   {"bench":"attention","case":"af2_msa_row","device":"cpu","ms":1.23,"tflops":0.5,...}
#pragma once

#include <algorithm>
#include <cstring>
#include <cstdio>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "core/allocator.h"
#include "core/device.h"
#include "core/error.h"
#include "core/profile.h"
#include "core/stream.h"
#include "core/timer.h"

namespace foldcore::bench {

// Median milliseconds of `iters` runs of fn after `warmup` runs, timed on `dev`.
inline double time_ms(Device dev, const std::function<void()>& fn, int warmup = 2, int iters = 5) {
  for (int i = 0; i < warmup; ++i) fn();
  synchronize(dev);
  std::vector<double> t;
  for (int i = 0; i < iters; ++i) {
    if (dev.is_cuda()) {
      Event a(dev), b(dev);
      a.record();
      fn();
      b.record();
      b.synchronize();
      t.push_back(a.elapsed_ms(b));
    } else {
      WallTimer w;
      fn();
      t.push_back(w.millis());
    }
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

// The common command line of the op benchmarks: --device cpu|cuda[:N] and --full / --quick
// (default quick). Other arguments are ignored. A CUDA device that is not usable is an Error
// naming the benchmark.
struct BenchArgs {
  Device device = Device::cpu();
  bool full = false;
};
inline BenchArgs parse_bench_args(int argc, char** argv, const char* name) {
  BenchArgs a;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--device") && i + 1 < argc) a.device = Device::parse(argv[++i]);
    else if (!std::strcmp(argv[i], "--full")) a.full = true;
    else if (!std::strcmp(argv[i], "--quick")) a.full = false;
  }
  if (a.device.is_cuda()) FC_CHECK(cuda_available(), name, ": --device cuda but no CUDA device is usable");
  return a;
}

// A JSON object built field by field, printed on one line.
class JsonLine {
 public:
  JsonLine& str(const std::string& k, const std::string& v) { return raw(k, "\"" + v + "\""); }
  JsonLine& num(const std::string& k, double v) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.6g", v);
    return raw(k, buf);
  }
  JsonLine& integer(const std::string& k, long long v) { return raw(k, std::to_string(v)); }
  JsonLine& boolean(const std::string& k, bool v) { return raw(k, v ? "true" : "false"); }
  JsonLine& nums(const std::string& k, const std::vector<double>& v) {
    std::string list = "[";
    for (size_t i = 0; i < v.size(); ++i) {
      char buf[64];
      std::snprintf(buf, sizeof buf, "%s%.6g", i ? ", " : "", v[i]);
      list += buf;
    }
    return raw(k, list + "]");
  }
  void print() const {
    std::string s = "{";
    for (size_t i = 0; i < fields_.size(); ++i) s += (i ? ", " : "") + fields_[i];
    s += "}";
    std::printf("%s\n", s.c_str());
    std::fflush(stdout);
  }

 private:
  JsonLine& raw(const std::string& k, const std::string& v) {
    fields_.push_back("\"" + k + "\": " + v);
    return *this;
  }
  std::vector<std::string> fields_;
};

// Peak bytes of the device's default allocator since the last reset (reset before a case).
inline size_t peak_bytes(Device dev) { return default_allocator(dev).stats().peak; }
inline void reset_peak(Device dev) { default_allocator(dev).reset_peak(); }

// With FOLDCORE_PROFILE=1 (core/profile.h): one line per stage of the case just run, then the
// stage timings are cleared for the next case. Nothing without it.
inline void print_profile(const std::string& bench_name, const std::string& case_name, int64_t size) {
  if (!profile::enabled()) return;
  for (const profile::Stage& s : profile::report())
    JsonLine()
        .str("bench", bench_name)
        .str("case", case_name)
        .integer("size", size)
        .str("stage", s.path)
        .integer("count", s.count)
        .num("seconds", s.seconds)
        .num("peak_end_mib", static_cast<double>(s.peak_end_bytes) / (1024.0 * 1024.0))
        .num("peak_raised_mib", static_cast<double>(s.peak_raised_bytes) / (1024.0 * 1024.0))
        .integer("host_waits", s.waits.waits())
        .num("host_wait_seconds", static_cast<double>(s.waits.wait_ns) / 1e9)
        .integer("launches", s.waits.launches)
        .print();
  profile::reset();
}

}  // namespace foldcore::bench
