#include "core/stream.h"

#include <array>
#include <chrono>

#include "core/cuda_backend.h"
#include "core/error.h"
#include "core/host_waits.h"

namespace foldcore {

namespace {
constexpr int kMaxDevices = 16;
thread_local std::array<Stream, kMaxDevices> t_current;
thread_local std::array<bool, kMaxDevices> t_has_current{};

double host_now_ms() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
}  // namespace

Stream Stream::create(Device d) {
  Stream s;
  s.device_ = d;
  if (d.is_cuda()) {
    void* h = detail::cuda_stream_create(d.index);
    s.handle_ = std::shared_ptr<void>(h, [](void* p) { detail::cuda_stream_destroy(p); });
  }
  return s;
}

Stream Stream::default_stream(Device d) {
  Stream s;
  s.device_ = d;
  return s;
}

void Stream::synchronize() const {
  if (!device_.is_cuda()) return;
  const detail::CountedWait wait(detail::WaitKind::synchronize);
  detail::cuda_stream_synchronize(native());
}

Stream current_stream(Device d) {
  if (d.is_cpu()) return Stream();
  FC_CHECK(d.index < kMaxDevices, "device index ", d.index, " too large");
  return t_has_current[d.index] ? t_current[d.index] : Stream::default_stream(d);
}

StreamGuard::StreamGuard(const Stream& s) : prev_(current_stream(s.device())) {
  if (s.device().is_cuda()) {
    t_current[s.device().index] = s;
    t_has_current[s.device().index] = true;
  }
}

StreamGuard::~StreamGuard() {
  if (prev_.device().is_cuda()) t_current[prev_.device().index] = prev_;
}

Event::Event(Device d) : device_(d) {
  if (d.is_cuda()) {
    void* h = detail::cuda_event_create(d.index);
    handle_ = std::shared_ptr<void>(h, [](void* p) { detail::cuda_event_destroy(p); });
  }
}

void Event::record(const Stream& s) {
  if (device_.is_cuda())
    detail::cuda_event_record(handle_.get(), s.native());
  else
    host_time_ms_ = host_now_ms();
}

void Event::synchronize() const {
  if (!device_.is_cuda()) return;
  const detail::CountedWait wait(detail::WaitKind::synchronize);
  detail::cuda_event_synchronize(handle_.get());
}

bool Event::query() const { return !device_.is_cuda() || detail::cuda_event_query(handle_.get()); }

void Event::block(const Stream& s) const {
  if (device_.is_cuda()) detail::cuda_stream_wait_event(s.native(), handle_.get());
}

float Event::elapsed_ms(const Event& end) const {
  FC_CHECK(device_ == end.device_, "elapsed_ms between events of different devices");
  if (device_.is_cuda()) {
    const detail::CountedWait wait(detail::WaitKind::synchronize);  // it waits for both events
    return detail::cuda_event_elapsed_ms(handle_.get(), end.handle_.get());
  }
  return static_cast<float>(end.host_time_ms_ - host_time_ms_);
}

}  // namespace foldcore
