// Stage timing of a run, for finding where the time goes on a device without a profiler:
// FOLDCORE_PROFILE=1 in the environment turns it on. profile::Scope("name", device) marks a stage:
// on entry and on exit it waits for the device (synchronize), so each stage's wall time includes
// its kernels and nothing of its neighbours'. Nested scopes are named by their path ("trunk/evoformer").
// The waits change what is measured (no overlap of host and device work across stage borders),
// so a profiled run's total is an upper bound of an unprofiled one; off, a Scope costs one
// branch. report() lists the stages in the order they first ended (inner before outer), with
// count and total seconds, and where the memory peak lies: `peak_end_bytes` is the device
// allocator's running peak when the stage last ended, `peak_raised_bytes` how much the stage's runs
// raised it in all (> 0: the stage holds a new peak; among nested stages, the innermost one
// that raised it is where it happened). `held_bytes`: what the stage's runs left allocated in all
// (the allocator's current bytes at exit minus at entry; in a training forward, what the stage
// keeps for the backward; negative where it freed more than it kept). `waits` counts (and times) where the host waited for the device inside
// the stage (core/host_waits.h; the profiler's own waits at the stage borders excluded).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "core/device.h"
#include "core/host_waits.h"

namespace foldcore::profile {

bool enabled();  // FOLDCORE_PROFILE is set, non-empty and not "0" (read once), unless overridden
// Overrides FOLDCORE_PROFILE for the rest of the process (true / false), or gives it back
// (nullopt): a test or a tool that profiles whatever ran before it in the same process.
void set_enabled(std::optional<bool> on);
// set_enabled(true) for its lifetime, then the setting it found.
class EnabledGuard {
 public:
  EnabledGuard();
  ~EnabledGuard();
  EnabledGuard(const EnabledGuard&) = delete;
  EnabledGuard& operator=(const EnabledGuard&) = delete;

 private:
  int before_;
};

class Scope {
 public:
  Scope(const char* name, Device device);
  ~Scope();
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;

 private:
  bool on_;
  Device device_;
  double start_ = 0;
  int64_t peak_start_ = 0;
  int64_t current_start_ = 0;
  HostWaits waits_start_;
};

struct Stage {
  std::string path;
  int64_t count = 0;
  double seconds = 0;
  int64_t peak_end_bytes = 0;
  int64_t peak_raised_bytes = 0;
  int64_t held_bytes = 0;
  HostWaits waits;  // summed over the stage's runs (staged copies included, they do not wait)
};
std::vector<Stage> report();  // all stages since the last reset
void reset();
// The calling thread's enclosing stages ("forward/trunk/evoformer"; empty outside any, or when
// profiling is off).
const std::string& current_stage();

}  // namespace foldcore::profile
