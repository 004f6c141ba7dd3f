#include "dist/completion_watchdog.h"

#include <algorithm>
#include <chrono>
#include <memory>
#include <utility>

#include "core/error.h"
#include "dist/comm_internal.h"

namespace foldcore::dist::detail {
namespace {

// Runs abort() on a thread of its own and waits for it at most `grace` seconds: an abort that
// blocks (the failure it answers may be the very thing blocking it) must not keep the job alive.
void abort_bounded(const CompletionWatchdog::AbortFn& abort, double grace) {
  if (!abort) return;
  struct Shared {
    std::mutex m;
    std::condition_variable cv;
    bool done = false;
  };
  auto shared = std::make_shared<Shared>();
  std::thread([abort, shared] {
    abort();
    std::lock_guard<std::mutex> lock(shared->m);
    shared->done = true;
    shared->cv.notify_all();
  }).detach();
  std::unique_lock<std::mutex> lock(shared->m);
  shared->cv.wait_for(lock, std::chrono::duration<double>(grace), [&] { return shared->done; });
}

}  // namespace

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

CompletionWatchdog::CompletionWatchdog(std::string comm_name, double timeout_s, HealthFn health, AbortFn abort,
                                       FailFn fail, double poll_interval_s, double abort_grace_s)
    : name_(std::move(comm_name)),
      timeout_(timeout_s),
      interval_(poll_interval_s > 0 ? poll_interval_s : std::min(0.5, timeout_s / 8)),
      grace_(abort_grace_s),
      health_(std::move(health)),
      abort_(std::move(abort)),
      fail_(std::move(fail)) {
  FC_CHECK(timeout_s > 0, "communicator '", name_, "': watchdog timeout ", timeout_s, " s must be positive");
  thread_ = std::thread([this] { run(); });
}

CompletionWatchdog::~CompletionWatchdog() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

void CompletionWatchdog::watch(std::string what, DoneFn done) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (failed_ || stop_) return;
    ops_.push_back(Op{std::move(what), std::move(done), now_seconds()});
  }
  wake_.notify_all();
}

int64_t CompletionWatchdog::in_flight() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return static_cast<int64_t>(ops_.size());
}

bool CompletionWatchdog::failed() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return failed_;
}

void CompletionWatchdog::trigger(const std::string& message) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    failed_ = true;
    ops_.clear();
  }
  abort_bounded(abort_, grace_);
  if (fail_)
    fail_(message);
  else
    fatal_comm_failure_off_thread(message);
}

void CompletionWatchdog::run() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (true) {
    wake_.wait(lock, [&] { return stop_ || (!ops_.empty() && !failed_); });
    if (stop_) return;
    // Poll outside the lock (watch() must not wait for a poll): take the operations, put back the
    // ones still in flight ahead of any watched meanwhile.
    std::deque<Op> mine;
    mine.swap(ops_);
    lock.unlock();
    std::string failure;
    if (health_) {
      const std::string h = health_();
      if (!h.empty()) failure = "communicator '" + name_ + "': " + h;
    }
    const double now = now_seconds();
    std::deque<Op> pending;
    for (Op& op : mine) {
      if (!failure.empty()) break;
      if (op.done()) continue;
      if (now - op.start > timeout_)
        failure = foldcore::detail::concat(op.what, " did not complete within ", timeout_,
                                           " s (watchdog; FOLDCORE_COMM_TIMEOUT_S): a peer rank is dead, hung or "
                                           "called a different collective; aborting the job");
      pending.push_back(std::move(op));
    }
    if (!failure.empty()) {
      trigger(failure);
      lock.lock();
      continue;  // failed_: sleeps until stopped
    }
    lock.lock();
    for (auto it = pending.rbegin(); it != pending.rend(); ++it) ops_.push_front(std::move(*it));
    if (ops_.empty()) continue;
    wake_.wait_for(lock, std::chrono::duration<double>(interval_), [&] { return stop_; });
  }
}

}  // namespace foldcore::dist::detail
