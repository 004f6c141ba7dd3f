// Device time per kernel: with FOLDCORE_PROFILE_KERNELS=1 (or set_enabled(true)) every piece of
// device work the host issues — each kernel launch (core/cuda/launch.cuh), cuBLASLt GEMM, device
// copy, memset and CUB sort — is bracketed by a pair of CUDA events on its stream, and collect()
// reads their times after the work has finished. It answers what the stage profile
// (core/profile.h) cannot: which kernels a step's device time is made of, and how long the device
// sat idle inside the step (the span from the first kernel's start to the last one's end, less
// the kernels' own time: the gaps where it waited for the host).
//
// Cost when enabled: two event records per launch (about a microsecond of host time each, and the
// events' own slots in the stream). On an H200 (docs/benchmarks.md, run 6) they took a crop-256
// training step from 1.05 to 1.25 s, and the kernels' summed times (1.09 s) exceeded the unprofiled
// step: read shares and differences between runs with the profile on, not absolute sums. When
// disabled: one relaxed load per launch. Events come from a pool reused across collections. One device per process is
// assumed for the span (the device of the first record). Not on the CPU backend: records come
// only from CUDA code.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace foldcore::kernel_profile {

bool enabled();
void set_enabled(bool on);

struct Row {
  std::string name;  // the kernel (with its template arguments), "gemm …" or "memcpy"/"memset"/"sort"
  int64_t calls = 0;
  double seconds = 0;  // device time, summed over the calls
};

struct Report {
  std::vector<Row> kernels;       // by name, the largest total first
  std::vector<Row> stages;        // the same time by profile stage (core/profile.h; "-" outside any)
  std::vector<Row> kernel_stages;  // by kernel and stage: name "<kernel> @ <stage>" (which module a kernel's time is in)
  int64_t launches = 0;           // records read
  double busy_seconds = 0;        // Σ kernel times
  double span_seconds = 0;        // first record's start → last record's end (the first record's device)
  double idle_seconds() const { return span_seconds > busy_seconds ? span_seconds - busy_seconds : 0.0; }
};

// Waits for the recorded work, reads every pair's time, clears the records. The wait is not
// counted as a host wait (core/host_waits.h).
Report collect();
// Drops the records without reading them.
void reset();

namespace detail {
// Brackets one piece of device work on `stream` (a cudaStream_t) of the current device; a no-op
// unless enabled. `name` must outlive the profile (a literal, or intern()'s).
class Scope {
 public:
  Scope(const char* name, void* stream);
  ~Scope();
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;

 private:
  void* end_ = nullptr;  // the end event, recorded by the destructor
  void* stream_ = nullptr;
};
// A stable copy of `name` (for names built at run time, such as a GEMM's shape).
const char* intern(const std::string& name);
// The kernel named in a __PRETTY_FUNCTION__ of a function template taking `auto Kernel`
// ("… [with auto Kernel = my_kernel<float>]" → "my_kernel<float>"), interned.
const char* kernel_name_from_signature(const char* pretty);
}  // namespace detail

}  // namespace foldcore::kernel_profile
