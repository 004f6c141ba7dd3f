#include "core/host_waits.h"

#include <array>
#include <atomic>
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
    g_synchronizes{0};

// One device's page-locked ring. A copy takes the next `bytes` (256-aligned) after the last one,
// wrapping to the start when they do not fit before the end; the copies still in flight over that
// range are waited for first (in practice long finished: the ring holds many steps' worth of small
// copies). Its event is recorded behind the queued copy.
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
    if (begin + len > kBytes) begin = 0;
    const size_t end = begin + len;
    // In-flight copies live in ring order from the oldest; the ones this range reaches are the
    // oldest that overlap it. Wait for (and drop) every one that does.
    for (auto it = in_flight_.begin(); it != in_flight_.end();) {
      if (it->begin < end && begin < it->end) {
        it->done.synchronize();
        it = in_flight_.erase(it);
      } else {
        ++it;
      }
    }
    auto* slot = static_cast<std::byte*>(buffer_.data()) + begin;
    std::memcpy(slot, src, bytes);
    const Stream stream = current_stream(device_);
    copy_to_device_async(dst, slot, bytes, stream);
    Event done(device_);
    done.record(stream);
    in_flight_.push_back({begin, end, std::move(done)});
    // Bound the bookkeeping: the oldest entries are complete long before the ring comes back to
    // them; drop them without waiting only once their range is overwritten (above), or here when
    // the list is long, after waiting for the oldest.
    if (in_flight_.size() > kMaxInFlight) {
      in_flight_.front().done.synchronize();
      in_flight_.pop_front();
    }
    head_ = end;
    return true;
  }

 private:
  static constexpr size_t kMaxInFlight = 4096;
  struct InFlight {
    size_t begin, end;
    Event done;
  };
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
  return w;
}

void reset_host_waits() {
  g_copies_to_host = 0;
  g_bytes_to_host = 0;
  g_sync_copies = 0;
  g_staged_copies = 0;
  g_synchronizes = 0;
}

namespace detail {

UncountedWaits::UncountedWaits() { ++t_uncounted; }
UncountedWaits::~UncountedWaits() { --t_uncounted; }

void count_copy_to_host(size_t bytes) {
  if (t_uncounted > 0) return;
  ++g_copies_to_host;
  g_bytes_to_host += static_cast<int64_t>(bytes);
  trace("copy to the host", bytes);
}
void count_sync_copy_to_device(size_t bytes) {
  if (t_uncounted > 0) return;
  ++g_sync_copies;
  trace("synchronous copy to the device", bytes);
}
void count_synchronize() {
  if (t_uncounted > 0) return;
  ++g_synchronizes;
  trace("synchronize", 0);
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
