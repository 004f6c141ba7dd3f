// The job store of `foldcore serve`: one SQLite database (<jobs_dir>/jobs.db, WAL journal,
// synchronous=FULL so an acknowledged job survives a crash) with one row per job; the inputs and
// results are files under <jobs_dir>/jobs/<id>/ (job_dir()).
//
// Life of a job: queued → running → done | failed, or cancelled (from queued or running). A job
// running when the process died is queued again by recover_after_restart(); nothing else changes
// state behind the caller's back. Every method is one transaction under one mutex: the HTTP
// threads and the worker share the store.
#pragma once

#include <sqlite3.h>

#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace foldcore::apps::serve {

enum class JobStatus { kQueued, kRunning, kDone, kFailed, kCancelled };
const char* to_string(JobStatus s);
JobStatus parse_job_status(const std::string& s);
inline bool is_finished(JobStatus s) { return s == JobStatus::kDone || s == JobStatus::kFailed || s == JobStatus::kCancelled; }

struct Job {
  std::string id, name, sequence;
  bool has_a3m = false;
  JobStatus status = JobStatus::kQueued;
  std::string stage;  // "queued", "msa", "features", "recycle 2/4 model_1_ptm", "writing", …
  double progress = 0;  // 0..1
  double created_at = 0, started_at = 0, finished_at = 0;  // Unix seconds; 0 = not yet
  std::string error;
  double mean_plddt = -1, ptm = -1;  // -1 = none
  double seconds = 0;                // prediction wall time of a done job
  int64_t attempts = 0;              // times the job was started (> 1 after a restart)
  int64_t queue_position = 0;        // 1-based among queued jobs; 0 when not queued
};

class JobStore {
 public:
  // Opens (creating) <jobs_dir>/jobs.db; throws foldcore::Error naming the file on failure.
  explicit JobStore(const std::string& jobs_dir);
  ~JobStore();
  JobStore(const JobStore&) = delete;
  JobStore& operator=(const JobStore&) = delete;

  const std::string& jobs_dir() const { return dir_; }
  std::string job_dir(const std::string& id) const;

  // Running jobs (the process died mid-job) back to queued, ahead of newer jobs; returns how many.
  int recover_after_restart();
  // Removes folders under jobs/ that have no row: a submission interrupted between writing its
  // input and committing its row (never acknowledged), or a delete interrupted after its commit.
  // Call before the server takes requests; returns how many.
  int remove_orphan_dirs();

  enum class Admit { kAdmitted, kQueueFull };
  // Inserts a queued job unless `max_queue` jobs are queued already (count and insert in one
  // transaction, so concurrent submissions cannot overshoot).
  Admit submit(const Job& job, int64_t max_queue);

  std::optional<Job> get(const std::string& id);
  // Newest first, at most `limit`.
  std::vector<Job> list(int64_t limit);
  // The oldest queued job, now running (attempts + 1), or nothing.
  std::optional<Job> claim_next();
  void set_progress(const std::string& id, const std::string& stage, double progress);
  // These change only a running job (a job cancelled meanwhile stays cancelled); they return
  // whether the row was changed.
  bool finish_done(const std::string& id, double mean_plddt, double ptm, double seconds);
  bool finish_failed(const std::string& id, const std::string& error);
  bool requeue(const std::string& id, const std::string& why);
  // queued/running → cancelled; returns the status before (nothing: no such job).
  std::optional<JobStatus> cancel(const std::string& id);
  // Removes a finished job's row (the caller removes its files); false when absent or not finished.
  bool remove_finished(const std::string& id);
  // Finished jobs whose finished_at is older than `cutoff` (Unix seconds): rows deleted, ids returned.
  std::vector<std::string> prune_finished_before(double cutoff);
  std::map<JobStatus, int64_t> count_by_status();
  // PRAGMA integrity_check's answer ("ok" when sound).
  std::string integrity_check();

 private:
  void exec(const char* sql);
  std::string dir_;
  sqlite3* db_ = nullptr;
  std::mutex mu_;
};

double unix_now();

}  // namespace foldcore::apps::serve
