// The job store of `foldcore serve` on its own (SQLite file in a scratch folder): admission
// against the queue limit, claim order, state changes that only apply to running jobs, cancel and
// delete, recovery after a crash, orphan folders, pruning by age; and the local MSA mode of the
// server end to end (jackhmmer against three tiny FASTA databases made from query73's hits).
#include <gtest/gtest.h>

#include <fstream>

#include "apps/serve/job_store.h"
#include "serve_test_util.h"

namespace foldcore::serve_test {
namespace {

using apps::serve::Job;
using apps::serve::JobStatus;
using apps::serve::JobStore;

Job make_job(const std::string& id, double created_at = 1000) {
  Job j;
  j.id = id;
  j.name = "n_" + id;
  j.sequence = "MKTAYI";
  j.created_at = created_at;
  return j;
}

TEST(ServeStore, LifecycleQueueLimitRecoveryAndPruning) {
  ScratchDir dir("serve_store");
  {
    JobStore store(dir.path().string());
    EXPECT_EQ(store.submit(make_job("a"), 2), JobStore::Admit::kAdmitted);
    EXPECT_EQ(store.submit(make_job("b"), 2), JobStore::Admit::kAdmitted);
    EXPECT_EQ(store.submit(make_job("c"), 2), JobStore::Admit::kQueueFull);  // 2 queued already
    EXPECT_FALSE(store.get("c").has_value());
    EXPECT_EQ(store.get("b")->queue_position, 2);

    const auto first = store.claim_next();
    ASSERT_TRUE(first.has_value());
    EXPECT_EQ(first->id, "a");  // oldest first
    EXPECT_EQ(first->attempts, 1);
    EXPECT_EQ(store.get("b")->queue_position, 1);
    EXPECT_EQ(store.submit(make_job("c"), 2), JobStore::Admit::kAdmitted);  // a running job frees its place
    store.set_progress("a", "recycle 1/4 tiny", 0.3);
    EXPECT_EQ(store.get("a")->stage, "recycle 1/4 tiny");

    // A cancelled job stays cancelled whatever the worker reports afterwards.
    EXPECT_EQ(store.cancel("a"), JobStatus::kRunning);
    EXPECT_FALSE(store.finish_done("a", 80, 0.5, 1.0));
    EXPECT_FALSE(store.requeue("a", "x"));
    EXPECT_EQ(store.get("a")->status, JobStatus::kCancelled);
    EXPECT_FALSE(store.cancel("nope").has_value());

    // "b" running when the process dies: the store is closed without finishing it.
    ASSERT_EQ(store.claim_next()->id, "b");
  }
  fs::create_directories(dir.path() / "jobs" / "orphan");
  fs::create_directories(dir.path() / "jobs" / "c");
  JobStore store(dir.path().string());
  EXPECT_EQ(store.integrity_check(), "ok");
  EXPECT_EQ(store.recover_after_restart(), 1);
  EXPECT_EQ(store.get("b")->status, JobStatus::kQueued);
  EXPECT_EQ(store.get("b")->queue_position, 1);  // ahead of the newer "c"
  EXPECT_EQ(store.remove_orphan_dirs(), 1);
  EXPECT_FALSE(fs::exists(dir.path() / "jobs" / "orphan"));
  EXPECT_TRUE(fs::exists(dir.path() / "jobs" / "c"));

  const auto again = store.claim_next();
  ASSERT_EQ(again->id, "b");
  EXPECT_EQ(again->attempts, 2);
  EXPECT_TRUE(store.finish_done("b", 71.5, 0.61, 2.5));
  const Job b = *store.get("b");
  EXPECT_EQ(b.status, JobStatus::kDone);
  EXPECT_DOUBLE_EQ(b.mean_plddt, 71.5);
  EXPECT_FALSE(store.remove_finished("c"));  // queued: cancel first
  ASSERT_EQ(store.claim_next()->id, "c");
  EXPECT_TRUE(store.finish_failed("c", "boom"));
  EXPECT_EQ(store.get("c")->error, "boom");

  const auto counts = store.count_by_status();
  EXPECT_EQ(counts.at(JobStatus::kDone), 1);
  EXPECT_EQ(counts.at(JobStatus::kFailed), 1);
  EXPECT_EQ(counts.at(JobStatus::kCancelled), 1);
  EXPECT_EQ(counts.at(JobStatus::kQueued), 0);

  // Pruning by age: everything finished before the cutoff goes, nothing else.
  EXPECT_EQ(store.submit(make_job("d"), 10), JobStore::Admit::kAdmitted);
  EXPECT_TRUE(store.prune_finished_before(b.finished_at - 3600).empty());
  std::vector<std::string> pruned = store.prune_finished_before(apps::serve::unix_now() + 1);
  std::sort(pruned.begin(), pruned.end());
  EXPECT_EQ(pruned, (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_EQ(store.list(100).size(), 1u);
  EXPECT_EQ(store.get("d")->status, JobStatus::kQueued);
}

TEST(ServeStore, UnwritableJobsDirIsAClearError) {
  ScratchDir dir("serve_store_bad");
  std::ofstream(dir.path() / "file") << "x";
  try {
    JobStore store((dir.path() / "file").string());
    FAIL() << "expected an error";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("file"), std::string::npos) << e.what();
  }
}

// Writes the ungapped hit sequences of an A3M as a FASTA database.
void a3m_to_fasta(const fs::path& a3m, const fs::path& out, size_t max_records) {
  std::ifstream in(a3m);
  std::ofstream o(out);
  std::string line;
  size_t n = 0;
  bool keep = false;
  while (std::getline(in, line)) {
    if (!line.empty() && line[0] == '>') {
      keep = n++ > 0 && n <= max_records + 1;  // skip the query itself
      if (keep) o << ">hit" << n << "\n";
      continue;
    }
    if (!keep) continue;
    std::string seq;
    for (char c : line)
      if (c != '-' && c != '.') seq += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    o << seq << "\n";
  }
}

TEST(ServeLocalMsa, SearchesLocalDatabasesPerJob) {
  if (std::system("command -v jackhmmer > /dev/null") != 0) GTEST_FAIL() << "jackhmmer (hmmer) not found; setup.sh installs it";
  ScratchDir dir("serve_local_msa");
  const fs::path db = dir.path() / "dbs";
  const fs::path hits = fs::path(FOLDCORE_SOURCE_DIR) / "examples/query73/msas/bfd_uniclust_hits.a3m";
  for (const char* f : {"uniref90/uniref90.fasta", "mgnify/mgy_clusters_2022_05.fa",
                        "small_bfd/bfd-first_non_consensus_sequences.fasta"}) {
    fs::create_directories((db / f).parent_path());
    a3m_to_fasta(hits, db / f, 20);
  }
  std::vector<std::string> args = tiny_model_args();
  args.insert(args.end(), {"--num_recycles", "0", "--msa_mode", "local", "--msa_data_dir", db.string(),
                           "--db_preset", "reduced_dbs", "--msa_cpus", "1"});
  ServeProcess server(dir.path() / "jobs", args);
  ASSERT_TRUE(server.ok());
  auto c = server.client();
  auto r = c.Post("/api/jobs", read_file(fs::path(FOLDCORE_SOURCE_DIR) / "examples/query73/query.fasta"), "text/plain");
  ASSERT_TRUE(r && r->status == 201) << (r ? r->body : "no answer");
  const std::string id = json::parse(r->body)["id"];
  const json job = wait_job(c, id, finished, 300);
  ASSERT_EQ(job.value("status", ""), "done") << job.dump() << "\n" << server.log();
  const fs::path msas = dir.path() / "jobs" / "jobs" / id / "msas";
  for (const char* f : {"uniref90_hits.sto", "mgnify_hits.sto", "small_bfd_hits.sto"})
    EXPECT_TRUE(fs::exists(msas / f)) << f;
  // The search found the hits: the prediction ran on more than the query row.
  const std::string log = server.log();
  std::smatch m;
  ASSERT_TRUE(std::regex_search(log, m, std::regex(R"(73 residues, (\d+) MSA rows)"))) << log;
  EXPECT_GT(std::stoi(m[1]), 10) << log;
  EXPECT_EQ(server.kill(SIGTERM), 0);
}

}  // namespace
}  // namespace foldcore::serve_test
