// Crash safety of `foldcore serve`: SIGKILL while a job runs, start again on the same --jobs_dir:
// the running job is queued again and completes, no queued or finished job is missing, and the
// database passes PRAGMA integrity_check. Also the SIGTERM drain: submissions get 503 while the
// running job finishes, then the process exits 0.
#include <gtest/gtest.h>
#include <sqlite3.h>

#include <map>
#include <thread>

#include "serve_test_util.h"

namespace foldcore::serve_test {
namespace {

std::vector<std::string> server_args() {
  std::vector<std::string> args = tiny_model_args();
  // 3 recycles on 300 residues: seconds per job with the tiny model, long enough to be killed
  // mid-job, short enough for CI.
  args.insert(args.end(), {"--num_recycles", "3"});
  return args;
}

std::string integrity_check(const fs::path& db_path) {
  sqlite3* db = nullptr;
  std::string out;
  if (sqlite3_open_v2(db_path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr) == SQLITE_OK) {
    sqlite3_exec(
        db, "PRAGMA integrity_check",
        [](void* o, int, char** v, char**) {
          *static_cast<std::string*>(o) += v[0] ? v[0] : "";
          return 0;
        },
        &out, nullptr);
  } else {
    out = sqlite3_errmsg(db);
  }
  sqlite3_close(db);
  return out;
}

TEST(ServeRestart, SigkillMidJobLosesNothing) {
  ScratchDir dir("serve_restart");
  const fs::path jobs = dir.path() / "jobs";
  std::map<std::string, std::string> names;  // id → name of every acknowledged job
  std::string finished_id, killed_id;
  {
    ServeProcess server(jobs, server_args());
    ASSERT_TRUE(server.ok());
    auto c = server.client();
    auto first = submit(c, "finished_before", test_sequence(20));
    ASSERT_TRUE(first && first->status == 201);
    finished_id = json::parse(first->body)["id"];
    ASSERT_EQ(wait_job(c, finished_id, finished, 300).value("status", ""), "done");
    names[finished_id] = "finished_before";

    auto slow = submit(c, "killed_mid_job", test_sequence(300));
    ASSERT_TRUE(slow && slow->status == 201);
    killed_id = json::parse(slow->body)["id"];
    names[killed_id] = "killed_mid_job";
    for (int i = 0; i < 3; ++i) {
      auto r = submit(c, "queued_" + std::to_string(i), test_sequence(15 + i));
      ASSERT_TRUE(r && r->status == 201);
      names[json::parse(r->body)["id"]] = "queued_" + std::to_string(i);
    }
    // Kill once the slow job is inside the model (a recycling iteration), not before it starts.
    const json running = wait_job(
        c, killed_id, [](const json& j) { return j.value("stage", "").rfind("recycle", 0) == 0 || finished(j); }, 300);
    ASSERT_EQ(running.value("status", ""), "running") << running.dump();
    server.kill(SIGKILL);
  }
  EXPECT_EQ(integrity_check(jobs / "jobs.db"), "ok");
  EXPECT_FALSE(fs::exists(jobs / "jobs" / killed_id / "result" / "done")) << "a killed job must not look finished";

  ServeProcess server(jobs, server_args());
  ASSERT_TRUE(server.ok());
  EXPECT_NE(server.log().find("1 job(s) were running"), std::string::npos) << server.log();
  auto c = server.client();
  for (const auto& [id, name] : names) {
    const json j = wait_job(c, id, finished, 300);
    EXPECT_EQ(j.value("status", ""), "done") << name << ": " << j.dump();
    EXPECT_EQ(j.value("name", ""), name);
    auto pdb = c.Get("/api/jobs/" + id + "/files/ranked_0.pdb");
    ASSERT_TRUE(pdb) << name;
    EXPECT_EQ(pdb->status, 200) << name;
  }
  EXPECT_EQ(wait_job(c, killed_id, finished, 1).value("attempts", 0), 2);
  EXPECT_EQ(wait_job(c, finished_id, finished, 1).value("attempts", 0), 1) << "a finished job must not run again";
  auto list = c.Get("/api/jobs");
  ASSERT_TRUE(list && list->status == 200);
  EXPECT_EQ(json::parse(list->body)["jobs"].size(), names.size());
  EXPECT_EQ(server.kill(SIGTERM), 0) << server.log();
  EXPECT_EQ(integrity_check(jobs / "jobs.db"), "ok");
}

TEST(ServeRestart, SigtermDrainsAndRefusesNewJobs) {
  ScratchDir dir("serve_drain");
  const fs::path jobs = dir.path() / "jobs";
  ServeProcess server(jobs, server_args());
  ASSERT_TRUE(server.ok());
  auto c = server.client();
  auto slow = submit(c, "drained", test_sequence(300));
  ASSERT_TRUE(slow && slow->status == 201);
  const std::string id = json::parse(slow->body)["id"];
  auto waiting = submit(c, "waits", test_sequence(12));
  ASSERT_TRUE(waiting && waiting->status == 201);
  const std::string waiting_id = json::parse(waiting->body)["id"];
  ASSERT_EQ(wait_job(c, id, [](const json& j) { return j.value("status", "") != "queued"; }, 300).value("status", ""),
            "running");

  // SIGTERM from a second thread; meanwhile the server still answers, but takes no new job.
  std::jthread term([&] { EXPECT_EQ(server.kill(SIGTERM, 300), 0); });
  json health = json::object();
  for (int i = 0; i < 200 && health.value("status", "") != "draining"; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    health = body_json(c.Get("/api/health"));
  }
  EXPECT_EQ(health.value("status", ""), "draining");
  auto refused = submit(c, "late", test_sequence(12));
  ASSERT_TRUE(refused);
  EXPECT_EQ(refused->status, 503) << refused->body;
  term.join();

  ServeProcess again(jobs, server_args());
  ASSERT_TRUE(again.ok());
  auto c2 = again.client();
  const json drained = wait_job(c2, id, finished, 1);
  EXPECT_EQ(drained.value("status", ""), "done") << "the running job finishes during the drain: " << drained.dump();
  EXPECT_EQ(drained.value("attempts", 0), 1);
  // The job still waiting at the SIGTERM runs after the restart.
  EXPECT_EQ(wait_job(c2, waiting_id, finished, 300).value("status", ""), "done");
  auto list = c2.Get("/api/jobs");
  ASSERT_TRUE(list && list->status == 200);
  EXPECT_EQ(json::parse(list->body)["jobs"].size(), 2u) << "the refused submission created a job";
  EXPECT_EQ(again.kill(SIGTERM), 0);
}

}  // namespace
}  // namespace foldcore::serve_test
