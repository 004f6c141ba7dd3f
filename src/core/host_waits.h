// Where the host waits for a CUDA device. Kernels are queued: while the host runs ahead, the
// device goes from one kernel to the next without a gap. A copy to the host, a synchronous copy to
// the device or a synchronize drains that queue: the device idles until the host has issued the
// next kernels, a launch latency per kernel that a model of many small kernels (an Evoformer step
// at crop 256) pays in full. These counters tell how often a piece of code makes the host wait;
// tests hold the training step's stacks to none (tests/models/test_af2_host_waits). They also
// time the waits: a step's time less its wait time is the time the host spent issuing work, and
// when that is most of the step, the device was waiting for the host, not the other way round.
//
// Small copies from host memory to a device (masks, biases, indices made on the host: up to
// kStagedCopyMaxBytes) do not wait: copy_tensor stages them through a page-locked ring and queues
// an asynchronous copy on the device's current stream. A slot of the ring is reused only after the
// event recorded behind its copy has completed.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/device.h"

namespace foldcore {

struct HostWaits {
  int64_t copies_to_host = 0;         // device → host copies (the host waits for the queue)
  int64_t bytes_to_host = 0;
  int64_t sync_copies_to_device = 0;  // host → device copies that waited (large, or no pinned memory)
  int64_t staged_copies_to_device = 0;  // host → device copies queued without a wait
  int64_t synchronizes = 0;           // stream, event and device synchronizations
  int64_t wait_ns = 0;                // host time blocked in the counted waits (steady clock)
  // Device work the host issued: kernel launches, GEMMs (cuBLASLt calls), device-side copies and
  // memsets queued on a stream. Each costs the host a few µs to issue, so their number bounds a
  // step from below when the device runs ahead of the host.
  int64_t launches = 0;
  // The waits: everything above except the staged copies.
  int64_t waits() const { return copies_to_host + sync_copies_to_device + synchronizes; }
  HostWaits& operator+=(const HostWaits& o) {
    copies_to_host += o.copies_to_host;
    bytes_to_host += o.bytes_to_host;
    sync_copies_to_device += o.sync_copies_to_device;
    staged_copies_to_device += o.staged_copies_to_device;
    synchronizes += o.synchronizes;
    wait_ns += o.wait_ns;
    launches += o.launches;
    return *this;
  }
  // The counts between two readings (this one minus an earlier one).
  HostWaits operator-(const HostWaits& earlier) const {
    HostWaits d = *this;
    d.copies_to_host -= earlier.copies_to_host;
    d.bytes_to_host -= earlier.bytes_to_host;
    d.sync_copies_to_device -= earlier.sync_copies_to_device;
    d.staged_copies_to_device -= earlier.staged_copies_to_device;
    d.synchronizes -= earlier.synchronizes;
    d.wait_ns -= earlier.wait_ns;
    d.launches -= earlier.launches;
    return d;
  }
};

// This process's totals since the last reset (every thread).
HostWaits host_waits();
void reset_host_waits();

// The largest host → device copy that copy_tensor stages instead of waiting for.
constexpr size_t kStagedCopyMaxBytes = size_t{1} << 20;

namespace detail {
// While one lives, the calling thread's waits are not counted (the profiler's own, at its stage
// borders).
class UncountedWaits {
 public:
  UncountedWaits();
  ~UncountedWaits();
  UncountedWaits(const UncountedWaits&) = delete;
  UncountedWaits& operator=(const UncountedWaits&) = delete;
};
// One piece of device work issued (HostWaits::launches); every thread, UncountedWaits or not.
void count_launch();

enum class WaitKind { copy_to_host, sync_copy_to_device, synchronize };
// One wait of the calling thread: constructed just before the blocking call, it counts the wait
// (unless an UncountedWaits lives) and adds the time until its destruction to wait_ns.
// FOLDCORE_TRACE_HOST_WAITS=1: each counted wait is also printed to stderr with its kind, its
// bytes and the profile stage it is in (core/profile.h; run with FOLDCORE_PROFILE=1 for stages).
class CountedWait {
 public:
  explicit CountedWait(WaitKind kind, size_t bytes = 0);
  ~CountedWait();
  CountedWait(const CountedWait&) = delete;
  CountedWait& operator=(const CountedWait&) = delete;

 private:
  bool counted_;
  int64_t start_ns_ = 0;
};
// Copies `bytes` of host memory `src` to `dst` on CUDA device `d` through the page-locked staging
// ring, queued on d's current stream; false (nothing done) when it cannot (too large, no pinned
// memory), and the caller copies synchronously.
bool staged_copy_to_device(void* dst, Device d, const void* src, size_t bytes);
}  // namespace detail

}  // namespace foldcore
