// CompletionWatchdog: a host thread that watches a communicator's in-flight operations and ends
// the job when one of them does not complete within the timeout, or when the backend reports an
// asynchronous failure. The NCCL backend needs it: there wait() only makes the caller's stream
// wait for the collective (no host blocking), so a collective that hangs on the GPU — a peer that
// died, hung or called a different collective — would otherwise leave the host blocked later in
// some unrelated synchronisation, forever, with no message. (The MPI backend's waits poll on the
// calling thread under their own timeout: mpi_internal.h wait_with_watchdog.)
//
//   CompletionWatchdog dog("dp", 600.0, health, abort);   // one per communicator
//   dog.watch("all_reduce on communicator 'dp' (4 bytes)", [ev] { return event_done(ev); });
//
// Timing: an operation's clock starts at watch() (its enqueue), as an operation may legitimately
// wait behind the compute queued before it; the timeout (FOLDCORE_COMM_TIMEOUT_S, 600 s by
// default) is far above any such queueing. The thread sleeps while nothing is in flight; with
// operations in flight it polls every `poll_interval_s` (default min(0.5 s, timeout / 8)): first
// `health()` (non-empty text: a failure the backend found, e.g. ncclCommGetAsyncError), then each
// operation's `done()`, dropping the completed ones. On a failure it calls `abort()` (e.g.
// ncclCommAbort, so the stuck kernels end and peers see the failure), bounded by
// `abort_grace_s` (10 s) in case the abort itself blocks, then `fail(message)`, and stops watching.
// The default `fail` prints "foldcore: rank R of W: <message>" and ends the process with exit
// code 3 (fatal_comm_failure_off_thread): the launcher (mpirun, srun) then ends the other ranks.
//
// done(), health() and abort() run on the watchdog's thread; they must be safe to call beside the
// thread that launches the operations (cudaEventQuery, ncclCommGetAsyncError and ncclCommAbort
// are).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

namespace foldcore::dist::detail {

class CompletionWatchdog {
 public:
  static constexpr double kAbortGraceSeconds = 10.0;

  using DoneFn = std::function<bool()>;
  using HealthFn = std::function<std::string()>;  // "" while healthy
  using AbortFn = std::function<void()>;
  using FailFn = std::function<void(const std::string& message)>;

  // `comm_name` names the communicator in messages; `timeout_s` > 0. health/abort may be empty.
  // fail: empty for the default (print, exit code 3); a test's may return, and the watchdog then
  // stops watching (every later operation is ignored).
  // abort_grace_s: how long the watchdog waits for abort() before it fails anyway.
  CompletionWatchdog(std::string comm_name, double timeout_s, HealthFn health, AbortFn abort, FailFn fail = {},
                     double poll_interval_s = 0, double abort_grace_s = kAbortGraceSeconds);
  ~CompletionWatchdog();  // stops the thread (operations still in flight are no longer watched)
  CompletionWatchdog(const CompletionWatchdog&) = delete;
  CompletionWatchdog& operator=(const CompletionWatchdog&) = delete;

  // Watches one operation from now on; `what` describes it ("all_reduce on communicator …").
  void watch(std::string what, DoneFn done);
  // Operations watched and not yet seen complete.
  int64_t in_flight() const;
  // Whether the watchdog has failed (fail() was called).
  bool failed() const;

 private:
  struct Op {
    std::string what;
    DoneFn done;
    double start = 0;  // steady-clock seconds at watch()
  };
  void run();
  void trigger(const std::string& message);

  std::string name_;
  double timeout_ = 0, interval_ = 0, grace_ = 0;
  HealthFn health_;
  AbortFn abort_;
  FailFn fail_;
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<Op> ops_;
  bool stop_ = false, failed_ = false;
  std::thread thread_;  // last: starts once everything above exists
};

}  // namespace foldcore::dist::detail
