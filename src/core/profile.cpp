#include "core/profile.h"

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <mutex>

#include "core/allocator.h"

namespace foldcore::profile {
namespace {

struct Registry {
  std::mutex mu;
  std::vector<Stage> stages;
};
Registry& registry() {
  static Registry r;
  return r;
}
thread_local std::string current_path;  // the enclosing scopes' path on this thread

// The running peak of the device's allocator (0 where there is none, e.g. a CUDA device in a
// build without CUDA: profiling never fails a run).
int64_t allocator_peak(Device d) {
  try {
    return static_cast<int64_t>(default_allocator(d).stats().peak);
  } catch (...) {
    return 0;
  }
}
int64_t allocator_current(Device d) {
  try {
    return static_cast<int64_t>(default_allocator(d).stats().current);
  } catch (...) {
    return 0;
  }
}

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

namespace {
// -1: FOLDCORE_PROFILE decides; 0 / 1: set_enabled's override.
std::atomic<int> g_override{-1};
}  // namespace

bool enabled() {
  static const bool from_env = [] {
    const char* v = std::getenv("FOLDCORE_PROFILE");
    return v != nullptr && *v != '\0' && std::strcmp(v, "0") != 0;
  }();
  const int o = g_override.load(std::memory_order_relaxed);
  return o < 0 ? from_env : o == 1;
}

void set_enabled(std::optional<bool> on) { g_override.store(on ? (*on ? 1 : 0) : -1, std::memory_order_relaxed); }

EnabledGuard::EnabledGuard() : before_(g_override.load()) { set_enabled(true); }
EnabledGuard::~EnabledGuard() { g_override.store(before_); }


Scope::Scope(const char* name, Device device) : on_(enabled()), device_(device) {
  if (!on_) return;
  {
    const detail::UncountedWaits own;
    synchronize(device_);
  }
  if (!current_path.empty()) current_path += '/';
  current_path += name;
  peak_start_ = allocator_peak(device_);
  current_start_ = allocator_current(device_);
  waits_start_ = host_waits();
  start_ = now_seconds();
}

Scope::~Scope() {
  if (!on_) return;
  // A stage left by an exception, or a device that fails the wait: no throw from a destructor
  // (the run's error is reported by whoever catches it); the stage still closes.
  const HostWaits waits = host_waits() - waits_start_;
  if (std::uncaught_exceptions() == 0) {
    try {
      const detail::UncountedWaits own;
      synchronize(device_);
    } catch (...) {
    }
  }
  const double dt = now_seconds() - start_;
  const int64_t peak = allocator_peak(device_);
  const int64_t current = allocator_current(device_);
  {
    Registry& r = registry();
    std::lock_guard<std::mutex> lock(r.mu);
    Stage* s = nullptr;
    for (Stage& x : r.stages)
      if (x.path == current_path) s = &x;
    if (s == nullptr) s = &r.stages.emplace_back(Stage{current_path, 0, 0, 0, 0, 0, {}});
    s->count += 1;
    s->seconds += dt;
    s->peak_end_bytes = peak;
    s->peak_raised_bytes += peak - peak_start_;
    s->held_bytes += current - current_start_;
    s->waits += waits;
  }
  const size_t slash = current_path.rfind('/');
  current_path.resize(slash == std::string::npos ? 0 : slash);
}

std::vector<Stage> report() {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  return r.stages;
}

const std::string& current_stage() { return current_path; }

void reset() {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  r.stages.clear();
}

}  // namespace foldcore::profile
