// CompletionWatchdog (dist/completion_watchdog.h), the NCCL backend's host-side watchdog, with
// fake operations (atomic flags): completed operations are dropped; one still running after the
// timeout calls abort() then fail() with a message naming the communicator, the operation and the
// timeout; a backend health failure fails at once; an abort that blocks does not keep the job
// alive; the default failure ends the process with code 3 and the rank's message. Timings: the
// timeouts are 0.2–0.4 s and the polls 10 ms; the bounds checked below leave seconds of slack for
// a loaded 2-core machine, and no test passes by waiting less than its timeout.
#include "dist/completion_watchdog.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace foldcore::testing {
namespace {

using dist::detail::CompletionWatchdog;
using Clock = std::chrono::steady_clock;

double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// What the watchdog reported, filled from its thread.
struct Report {
  std::mutex m;
  std::vector<std::string> failures;
  std::atomic<int> aborts{0};
  std::atomic<bool> aborted_before_fail{false};
  CompletionWatchdog::FailFn fail() {
    return [this](const std::string& msg) {
      aborted_before_fail = aborts.load() > 0;
      std::lock_guard<std::mutex> lock(m);
      failures.push_back(msg);
    };
  }
  CompletionWatchdog::AbortFn abort() {
    return [this] { ++aborts; };
  }
  size_t count() {
    std::lock_guard<std::mutex> lock(m);
    return failures.size();
  }
  std::string first() {
    std::lock_guard<std::mutex> lock(m);
    return failures.empty() ? std::string() : failures.front();
  }
};

bool wait_until(const std::function<bool()>& cond, double seconds) {
  const auto t0 = Clock::now();
  while (!cond()) {
    if (since(t0) > seconds) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return true;
}

TEST(CompletionWatchdog, CompletedOperationsAreDroppedAndNothingFails) {
  Report r;
  CompletionWatchdog dog("dp", 0.3, {}, r.abort(), r.fail(), 0.01);
  std::vector<std::shared_ptr<std::atomic<bool>>> flags;
  for (int i = 0; i < 5; ++i) {
    flags.push_back(std::make_shared<std::atomic<bool>>(false));
    dog.watch("all_reduce #" + std::to_string(i), [f = flags.back()] { return f->load(); });
  }
  EXPECT_EQ(dog.in_flight(), 5);
  // They complete out of order, each before the timeout (0.3 s) measured from its watch().
  for (int i : {3, 0, 4, 1, 2}) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    flags[static_cast<size_t>(i)]->store(true);
  }
  EXPECT_TRUE(wait_until([&] { return dog.in_flight() == 0; }, 5.0)) << dog.in_flight() << " still in flight";
  // Idle well past the timeout: nothing is watched, nothing fails.
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  EXPECT_EQ(r.count(), 0u) << r.first();
  EXPECT_EQ(r.aborts.load(), 0);
  EXPECT_FALSE(dog.failed());
}

TEST(CompletionWatchdog, OperationPastTheTimeoutAbortsThenFailsNamingIt) {
  Report r;
  const double timeout = 0.25;
  CompletionWatchdog dog("dap", timeout, [] { return std::string(); }, r.abort(), r.fail(), 0.01);
  dog.watch("all_reduce on communicator 'dap' (4 bytes)", [] { return true; });
  const auto t0 = Clock::now();
  dog.watch("all_to_all on communicator 'dap' (1048576 bytes)", [] { return false; });  // hangs
  ASSERT_TRUE(wait_until([&] { return r.count() > 0; }, 10.0)) << "the watchdog never fired";
  const double fired = since(t0);
  EXPECT_GE(fired, timeout);  // not before its time
  EXPECT_LT(fired, timeout + 5.0);
  const std::string msg = r.first();
  EXPECT_NE(msg.find("all_to_all on communicator 'dap' (1048576 bytes)"), std::string::npos) << msg;
  EXPECT_NE(msg.find("did not complete within 0.25 s"), std::string::npos) << msg;
  EXPECT_NE(msg.find("FOLDCORE_COMM_TIMEOUT_S"), std::string::npos) << msg;
  EXPECT_EQ(r.aborts.load(), 1);
  EXPECT_TRUE(r.aborted_before_fail.load());
  EXPECT_TRUE(dog.failed());
  // Once failed it watches nothing more and fails no second time.
  dog.watch("barrier", [] { return false; });
  EXPECT_EQ(dog.in_flight(), 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(400));
  EXPECT_EQ(r.count(), 1u);
  EXPECT_EQ(r.aborts.load(), 1);
}

TEST(CompletionWatchdog, TheTimeoutCountsFromEachOperationsOwnStart) {
  // A stream of short operations, each done after 0.1 s, for 0.8 s in all: with a 0.3 s timeout
  // nothing fails, though the watchdog has had something in flight for longer than that.
  Report r;
  CompletionWatchdog dog("dp", 0.3, {}, r.abort(), r.fail(), 0.01);
  const auto t0 = Clock::now();
  while (since(t0) < 0.8) {
    auto flag = std::make_shared<std::atomic<bool>>(false);
    dog.watch("send", [flag] { return flag->load(); });
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    flag->store(true);
  }
  EXPECT_TRUE(wait_until([&] { return dog.in_flight() == 0; }, 5.0));
  EXPECT_EQ(r.count(), 0u) << r.first();
}

TEST(CompletionWatchdog, BackendHealthFailureFailsAtOnce) {
  Report r;
  std::atomic<bool> peer_died{false};
  CompletionWatchdog dog(
      "world", 60.0, [&] { return peer_died ? std::string("NCCL reported remote process exited") : std::string(); },
      r.abort(), r.fail(), 0.01);
  dog.watch("all_reduce on communicator 'world' (8 bytes)", [] { return false; });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_EQ(r.count(), 0u);
  const auto t0 = Clock::now();
  peer_died = true;
  ASSERT_TRUE(wait_until([&] { return r.count() > 0; }, 10.0));
  EXPECT_LT(since(t0), 5.0);  // long before the 60 s timeout
  EXPECT_EQ(r.first(), "communicator 'world': NCCL reported remote process exited");
  EXPECT_EQ(r.aborts.load(), 1);
}

TEST(CompletionWatchdog, HealthIsCheckedOnlyWhileSomethingIsInFlight) {
  Report r;
  std::atomic<int> checks{0};
  CompletionWatchdog dog(
      "world", 60.0, [&] {
        ++checks;
        return std::string();
      },
      r.abort(), r.fail(), 0.01);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_EQ(checks.load(), 0);  // asleep: nothing in flight
  auto flag = std::make_shared<std::atomic<bool>>(false);
  dog.watch("barrier", [flag] { return flag->load(); });
  EXPECT_TRUE(wait_until([&] { return checks.load() >= 3; }, 5.0));
  flag->store(true);
  EXPECT_TRUE(wait_until([&] { return dog.in_flight() == 0; }, 5.0));
}

TEST(CompletionWatchdog, AnAbortThatBlocksDoesNotKeepTheJobAlive) {
  // The abort itself may hang on what it answers; the watchdog fails after its grace (0.3 s here,
  // 10 s by default) anyway.
  Report r;
  auto release = std::make_shared<std::atomic<bool>>(false);
  CompletionWatchdog dog(
      "dp", 0.1, {},
      [release] {
        while (!release->load()) std::this_thread::sleep_for(std::chrono::milliseconds(5));
      },
      r.fail(), 0.01, /*abort_grace_s=*/0.3);
  const auto t0 = Clock::now();
  dog.watch("reduce_scatter", [] { return false; });
  ASSERT_TRUE(wait_until([&] { return r.count() > 0; }, 20.0)) << "a blocked abort kept the watchdog from failing";
  EXPECT_GE(since(t0), 0.1 + 0.3);
  release->store(true);  // lets the detached abort thread end
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
}

TEST(CompletionWatchdog, RejectsANonPositiveTimeout) {
  EXPECT_THROW(CompletionWatchdog("dp", 0.0, {}, {}), std::exception);
}

TEST(CompletionWatchdogDeathTest, DefaultFailureEndsTheProcessWithCode3AndTheMessage) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        CompletionWatchdog dog("bp", 0.1, {}, {}, {}, 0.01);
        dog.watch("broadcast on communicator 'bp' (64 bytes, peer 1)", [] { return false; });
        std::this_thread::sleep_for(std::chrono::seconds(30));  // the watchdog ends the process first
      },
      ::testing::ExitedWithCode(3),
      "foldcore: rank 0 of 1: broadcast on communicator 'bp' \\(64 bytes, peer 1\\) did not complete within 0.1 s");
}

}  // namespace
}  // namespace foldcore::testing
