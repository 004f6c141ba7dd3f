// Streams and events. On CPU both are trivial (work is synchronous; events record host time),
// so code can be written once for both backends.
#pragma once

#include <memory>

#include "core/device.h"

namespace foldcore {

class Stream {
 public:
  Stream() = default;  // the default (legacy) stream of the CPU
  // A new, owned stream on `d` (non-blocking w.r.t. the legacy default stream).
  static Stream create(Device d);
  // The default stream of `d` (not owned).
  static Stream default_stream(Device d);
  Device device() const { return device_; }
  // cudaStream_t as void* (nullptr = legacy default stream, or cpu).
  void* native() const { return handle_ ? handle_.get() : nullptr; }
  void synchronize() const;

 private:
  Device device_ = Device::cpu();
  std::shared_ptr<void> handle_;
};

// The stream kernels launch on for device `d` in the calling thread.
Stream current_stream(Device d);
// Scoped override of the calling thread's current stream for its device.
class StreamGuard {
 public:
  explicit StreamGuard(const Stream& s);
  ~StreamGuard();
  StreamGuard(const StreamGuard&) = delete;
  StreamGuard& operator=(const StreamGuard&) = delete;

 private:
  Stream prev_;
};

class Event {
 public:
  explicit Event(Device d = Device::cpu());
  void record(const Stream& s);
  void record() { record(current_stream(device_)); }
  void synchronize() const;
  // Whether the work before the event has completed, without waiting (always true on the CPU).
  bool query() const;
  // Makes `s` wait for this event (no host blocking).
  void block(const Stream& s) const;
  // Milliseconds between this event and a later recorded `end`; waits for both to complete.
  float elapsed_ms(const Event& end) const;
  Device device() const { return device_; }

 private:
  Device device_;
  std::shared_ptr<void> handle_;  // cudaEvent_t
  double host_time_ms_ = 0;       // cpu events
};

}  // namespace foldcore
