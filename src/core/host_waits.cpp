#include "core/host_waits.h"

#include <array>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <string>

#include "core/error.h"
#include "core/pinned_memory.h"
#include "core/profile.h"
#include "core/stream.h"

namespace foldcore {

namespace {

thread_local int t_uncounted = 0;

bool tracing() {
  static const bool on = [] {
    const char* v = std::getenv("FOLDCORE_TRACE_HOST_WAITS");
    return v != nullptr && *v != '\0' && std::strcmp(v, "0") != 0;
  }();
  return on;
}

void trace(const char* kind, size_t bytes) {
  if (!tracing()) return;
  const std::string& stage = profile::current_stage();
  std::fprintf(stderr, "host wait: %s, %zu bytes, stage %s\n", kind, bytes, stage.empty() ? "-" : stage.c_str());
}

std::atomic<int64_t> g_copies_to_host{0}, g_bytes_to_host{0}, g_sync_copies{0}, g_staged_copies{0},
    g_synchronizes{0}, g_wait_ns{0}, g_launches{0};

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// One device's page-locked ring. A copy takes the next `bytes` (256-aligned) after the last one,
// wrapping to the start when they do not fit before the end. The copies in flight are kept in the
// order they were made, which is the ring's address order from the oldest: the ones a new range
// reaches are always at the front (on a wrap, the previous lap's tail beyond the last copy goes
// first). A copy's slot is reused only once the event recorded behind it has completed; one that
// has is dropped without a wait, so only a real wait is counted (in practice none: the ring holds
// many steps' worth of small copies).
class StagingRing {
 public:
  static constexpr size_t kBytes = size_t{8} << 20;
  static constexpr size_t kAlign = 256;

  explicit StagingRing(Device d) : device_(d), buffer_(kBytes) {}

  bool copy(void* dst, const void* src, size_t bytes) {
    if (!buffer_.pinned() || bytes > kStagedCopyMaxBytes) return false;
    const std::lock_guard<std::mutex> lock(mutex_);
    const size_t len = (bytes + kAlign - 1) / kAlign * kAlign;
    size_t begin = head_;
    if (begin + len > kBytes) {  // wrap: the previous lap's copies beyond head_ are the oldest
      while (!in_flight_.empty() && in_flight_.front().begin >= head_) retire_front();
      begin = 0;
    }
    const size_t end = begin + len;
    while (!in_flight_.empty() && in_flight_.front().begin < end && begin < in_flight_.front().end) retire_front();
    auto* slot = static_cast<std::byte*>(buffer_.data()) + begin;
    std::memcpy(slot, src, bytes);
    const Stream stream = current_stream(device_);
    copy_to_device_async(dst, slot, bytes, stream);
    Event done(device_);
    done.record(stream);
    in_flight_.push_back({begin, end, std::move(done)});
    // Bound the bookkeeping: completed entries at the front are dropped as they are found.
    while (in_flight_.size() > kMaxInFlight) retire_front();
    head_ = end;
    return true;
  }

 private:
  static constexpr size_t kMaxInFlight = 4096;
  struct InFlight {
    size_t begin, end;
    Event done;
  };
  // Drops the oldest copy, waiting for it only if it has not completed.
  void retire_front() {
    const Event& e = in_flight_.front().done;
    if (!e.query()) e.synchronize();
    in_flight_.pop_front();
  }
  Device device_;
  PinnedBuffer buffer_;
  std::mutex mutex_;
  size_t head_ = 0;
  std::deque<InFlight> in_flight_;
};

constexpr int kMaxDevices = 16;

StagingRing* ring_of(Device d) {
  // Never destroyed: the rings outlive every tensor, and a static destructor would free pinned
  // memory after the CUDA runtime has gone.
  static std::array<std::atomic<StagingRing*>, kMaxDevices> rings{};
  static std::mutex make;
  if (d.index < 0 || d.index >= kMaxDevices) return nullptr;
  StagingRing* r = rings[static_cast<size_t>(d.index)].load(std::memory_order_acquire);
  if (r) return r;
  const std::lock_guard<std::mutex> lock(make);
  r = rings[static_cast<size_t>(d.index)].load(std::memory_order_acquire);
  if (!r) {
    r = new StagingRing(d);
    rings[static_cast<size_t>(d.index)].store(r, std::memory_order_release);
  }
  return r;
}

}  // namespace

HostWaits host_waits() {
  HostWaits w;
  w.copies_to_host = g_copies_to_host.load();
  w.bytes_to_host = g_bytes_to_host.load();
  w.sync_copies_to_device = g_sync_copies.load();
  w.staged_copies_to_device = g_staged_copies.load();
  w.synchronizes = g_synchronizes.load();
  w.wait_ns = g_wait_ns.load();
  w.launches = g_launches.load();
  return w;
}

void reset_host_waits() {
  g_copies_to_host = 0;
  g_bytes_to_host = 0;
  g_sync_copies = 0;
  g_staged_copies = 0;
  g_synchronizes = 0;
  g_wait_ns = 0;
  g_launches = 0;
}

namespace detail {

UncountedWaits::UncountedWaits() { ++t_uncounted; }
UncountedWaits::~UncountedWaits() { --t_uncounted; }

void count_launch() { g_launches.fetch_add(1, std::memory_order_relaxed); }

CountedWait::CountedWait(WaitKind kind, size_t bytes) : counted_(t_uncounted == 0) {
  if (!counted_) return;
  switch (kind) {
    case WaitKind::copy_to_host:
      ++g_copies_to_host;
      g_bytes_to_host += static_cast<int64_t>(bytes);
      trace("copy to the host", bytes);
      break;
    case WaitKind::sync_copy_to_device:
      ++g_sync_copies;
      trace("synchronous copy to the device", bytes);
      break;
    case WaitKind::synchronize:
      ++g_synchronizes;
      trace("synchronize", 0);
      break;
  }
  start_ns_ = now_ns();
}

CountedWait::~CountedWait() {
  if (counted_) g_wait_ns += now_ns() - start_ns_;
}

bool staged_copy_to_device(void* dst, Device d, const void* src, size_t bytes) {
  FC_CHECK(d.is_cuda(), "staged_copy_to_device: ", d.str(), " is not a CUDA device");
  if (bytes == 0 || bytes > kStagedCopyMaxBytes) return false;
  StagingRing* ring = ring_of(d);
  if (!ring || !ring->copy(dst, src, bytes)) return false;
  ++g_staged_copies;
  return true;
}

}  // namespace detail

}  // namespace foldcore
