// Benchmark helpers: timing loops (CUDA events on GPU, steady clock on CPU), peak memory, and
// one-JSON-line-per-case output:
//   {"bench":"attention","case":"af2_msa_row","device":"cpu","ms":1.23,"tflops":0.5,...}
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <cstdio>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "core/allocator.h"
#include "core/device.h"
#include "core/error.h"
#include "core/kernel_profile.h"
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
        .num("held_mib", static_cast<double>(s.held_bytes) / (1024.0 * 1024.0))
        .integer("host_waits", s.waits.waits())
        .num("host_wait_seconds", static_cast<double>(s.waits.wait_ns) / 1e9)
        .integer("launches", s.waits.launches)
        .print();
  profile::reset();
}

// With FOLDCORE_PROFILE_KERNELS=1 (core/kernel_profile.h): the device time of a run, one JSON line
// for the whole (launches, busy = Σ kernel times, span = first start → last end, idle = span −
// busy, and the run's wall seconds), one per kernel name for the `top` largest (calls, seconds,
// mean µs, share of busy) and one for the rest, and one per profile stage when FOLDCORE_PROFILE=1
// named stages. Collects (and clears) the records unless a report is given.
// Several reports as one (the samples of an average step): rows of the same name summed, each
// list ordered by total time as collect() orders it; launches, busy and span times summed.
inline kernel_profile::Report merge_kernel_reports(const std::vector<kernel_profile::Report>& reports) {
  kernel_profile::Report out;
  auto merge = [](std::vector<kernel_profile::Row>& into, const std::vector<kernel_profile::Row>& rows) {
    for (const kernel_profile::Row& r : rows) {
      auto it = std::find_if(into.begin(), into.end(), [&](const kernel_profile::Row& x) { return x.name == r.name; });
      if (it == into.end()) {
        into.push_back(r);
      } else {
        it->calls += r.calls;
        it->seconds += r.seconds;
      }
    }
  };
  for (const kernel_profile::Report& r : reports) {
    merge(out.kernels, r.kernels);
    merge(out.stages, r.stages);
    merge(out.kernel_stages, r.kernel_stages);
    out.launches += r.launches;
    out.busy_seconds += r.busy_seconds;
    out.span_seconds += r.span_seconds;
  }
  for (auto* rows : {&out.kernels, &out.stages, &out.kernel_stages})
    std::stable_sort(rows->begin(), rows->end(),
                     [](const kernel_profile::Row& a, const kernel_profile::Row& b) { return a.seconds > b.seconds; });
  return out;
}

inline void print_kernel_profile(const std::string& bench_name, const std::string& case_name, int64_t size,
                                 double wall_seconds, const kernel_profile::Report* given = nullptr, size_t top = 40) {
  if (!kernel_profile::enabled()) return;
  // FOLDCORE_PROFILE_TOP=K lists K kernels and K kernel x stage pairs instead (0: all of them).
  if (const char* t = std::getenv("FOLDCORE_PROFILE_TOP")) {
    const long k = std::strtol(t, nullptr, 10);
    top = k > 0 ? static_cast<size_t>(k) : SIZE_MAX;
  }
  const kernel_profile::Report r = given ? *given : kernel_profile::collect();
  auto line = [&](const char* part) {
    JsonLine j;
    j.str("bench", bench_name).str("case", case_name).integer("size", size).str("part", part);
    return j;
  };
  line("summary")
      .integer("launches", r.launches)
      .num("busy_seconds", r.busy_seconds)
      .num("span_seconds", r.span_seconds)
      .num("idle_seconds", r.idle_seconds())
      .num("wall_seconds", wall_seconds)
      .print();
  auto row = [&](const char* part, const kernel_profile::Row& k) {
    line(part)
        .str("name", k.name)
        .integer("calls", k.calls)
        .num("seconds", k.seconds)
        .num("mean_us", k.calls > 0 ? k.seconds / static_cast<double>(k.calls) * 1e6 : 0.0)
        .num("share", r.busy_seconds > 0 ? k.seconds / r.busy_seconds : 0.0)
        .print();
  };
  kernel_profile::Row rest{"(the other kernels)", 0, 0.0};
  for (size_t i = 0; i < r.kernels.size(); ++i) {
    if (i < top) {
      row("kernel", r.kernels[i]);
    } else {
      rest.calls += r.kernels[i].calls;
      rest.seconds += r.kernels[i].seconds;
    }
  }
  if (rest.calls > 0) row("kernel", rest);
  if (r.stages.size() > 1 || (r.stages.size() == 1 && r.stages.front().name != "-")) {
    for (const kernel_profile::Row& s : r.stages) row("stage", s);
    // The largest kernels by stage ("<kernel> @ <stage>"): which module each kernel's time is in.
    for (size_t i = 0; i < r.kernel_stages.size() && i < top; ++i) row("kernel_stage", r.kernel_stages[i]);
  }
}

}  // namespace foldcore::bench
