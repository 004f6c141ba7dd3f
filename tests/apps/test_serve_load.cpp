// Load test of `foldcore serve` (bounded: 250 requests, loopback, a minute at most): 200
// concurrent status requests and 50 concurrent submissions against --max_queue 20. Every request
// is answered; submissions beyond the queue get 429; every accepted job is in the store; the
// p50/p99 latency of the status call is printed.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <latch>
#include <mutex>
#include <set>

#include "serve_test_util.h"

namespace foldcore::serve_test {
namespace {

TEST(ServeLoad, ConcurrentStatusAndSubmissions) {
  ScratchDir dir("serve_load");
  std::vector<std::string> args = tiny_model_args();
  args.insert(args.end(), {"--max_queue", "20", "--num_recycles", "3", "--drain_timeout", "0"});
  ServeProcess server(dir.path() / "jobs", args);
  ASSERT_TRUE(server.ok());
  auto c = server.client();
  // One slow job occupies the worker so the queue fills up instead of draining.
  auto first = submit(c, "occupant", test_sequence(300));
  ASSERT_TRUE(first && first->status == 201);
  const std::string first_id = json::parse(first->body)["id"];
  ASSERT_EQ(wait_job(c, first_id, [](const json& j) { return j.value("status", "") != "queued"; }, 120).value("status", ""),
            "running");

  constexpr int kStatus = 200, kSubmit = 50;
  std::mutex mu;
  std::vector<double> latencies_ms;
  std::set<std::string> accepted;
  std::atomic<int> status_ok{0}, unanswered{0}, refused{0}, other{0};
  std::vector<std::thread> threads;
  // All clients start together: each blocks on the latch (no spinning that would starve the
  // server on a small machine) until the last thread is created.
  std::latch go(1);
  for (int i = 0; i < kStatus + kSubmit; ++i) {
    threads.emplace_back([&, i] {
      go.wait();
      httplib::Client cl("127.0.0.1", server.port());
      cl.set_connection_timeout(10);
      cl.set_read_timeout(30);
      if (i % 5 == 4 && i / 5 < kSubmit) {
        auto r = submit(cl, "load_" + std::to_string(i), test_sequence(10 + i % 7));
        if (!r) return void(++unanswered);
        if (r->status == 201) {
          std::lock_guard lock(mu);
          accepted.insert(json::parse(r->body)["id"].get<std::string>());
        } else if (r->status == 429 || r->status == 503) {
          ++refused;
        } else {
          ++other;
        }
        return;
      }
      const auto t0 = std::chrono::steady_clock::now();
      auto r = cl.Get("/api/jobs/" + first_id);
      const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      if (!r) return void(++unanswered);
      if (r->status == 200) ++status_ok; else ++other;
      std::lock_guard lock(mu);
      latencies_ms.push_back(ms);
    });
  }
  const auto t0 = std::chrono::steady_clock::now();
  go.count_down();
  for (std::thread& t : threads) t.join();
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  EXPECT_EQ(unanswered.load(), 0);
  EXPECT_EQ(other.load(), 0);
  EXPECT_EQ(status_ok.load(), kStatus);
  EXPECT_EQ(static_cast<int>(accepted.size()) + refused.load(), kSubmit);
  ASSERT_EQ(latencies_ms.size(), static_cast<size_t>(kStatus));
  std::sort(latencies_ms.begin(), latencies_ms.end());
  const double p50 = latencies_ms[latencies_ms.size() / 2], p99 = latencies_ms[latencies_ms.size() * 99 / 100];
  std::printf("{\"bench\": \"serve_status\", \"requests\": %d, \"submissions\": %d, \"accepted\": %zu, \"refused\": %d, "
              "\"p50_ms\": %.2f, \"p99_ms\": %.2f, \"max_ms\": %.2f, \"wall_s\": %.2f}\n",
              kStatus, kSubmit, accepted.size(), refused.load(), p50, p99, latencies_ms.back(), wall);

  // None lost: every accepted job is in the store, queued (or already running/done).
  auto list = c.Get("/api/jobs?limit=1000");
  ASSERT_TRUE(list && list->status == 200);
  std::set<std::string> stored;
  const json listed = json::parse(list->body);
  for (const json& j : listed["jobs"]) stored.insert(j["id"].get<std::string>());
  for (const std::string& id : accepted) EXPECT_TRUE(stored.count(id)) << id << " was accepted but is not stored";
  EXPECT_EQ(stored.size(), accepted.size() + 1);
  // At most 20 waited at any moment: beyond 20, only as many were accepted as left the queue for
  // the worker meanwhile (none, unless the occupant finished during the burst).
  int64_t left_queue = 0;
  for (const json& j : listed["jobs"])
    if (accepted.count(j["id"].get<std::string>()) && j["status"] != "queued") ++left_queue;
  EXPECT_LE(static_cast<int64_t>(accepted.size()), 20 + left_queue);
  EXPECT_GE(refused.load(), kSubmit - 20 - left_queue);
  EXPECT_GT(refused.load(), 0);
  auto m = c.Get("/metrics");
  ASSERT_TRUE(m && m->status == 200);
  EXPECT_NE(m->body.find("foldcore_submissions_refused_total{reason=\"queue_full\"} " + std::to_string(refused.load())),
            std::string::npos)
      << m->body;
  // --drain_timeout 0: the running job goes back to the queue and the server exits at once.
  EXPECT_EQ(server.kill(SIGTERM, 60), 0) << server.log();
}

}  // namespace
}  // namespace foldcore::serve_test
