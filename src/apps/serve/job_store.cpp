#include "apps/serve/job_store.h"

#include <chrono>
#include <filesystem>

#include "core/error.h"

namespace foldcore::apps::serve {
namespace fs = std::filesystem;

namespace {

// The queue order is the rowid (insertion order); a re-queued job keeps its place.
constexpr const char* kSchema = R"sql(
CREATE TABLE IF NOT EXISTS jobs (
  id TEXT PRIMARY KEY,
  name TEXT NOT NULL,
  sequence TEXT NOT NULL,
  has_a3m INTEGER NOT NULL DEFAULT 0,
  status TEXT NOT NULL CHECK (status IN ('queued', 'running', 'done', 'failed', 'cancelled')),
  stage TEXT NOT NULL DEFAULT '',
  progress REAL NOT NULL DEFAULT 0,
  created_at REAL NOT NULL,
  started_at REAL NOT NULL DEFAULT 0,
  finished_at REAL NOT NULL DEFAULT 0,
  error TEXT NOT NULL DEFAULT '',
  mean_plddt REAL NOT NULL DEFAULT -1,
  ptm REAL NOT NULL DEFAULT -1,
  seconds REAL NOT NULL DEFAULT 0,
  attempts INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS jobs_by_status ON jobs (status);
)sql";

constexpr const char* kColumns =
    "id, name, sequence, has_a3m, status, stage, progress, created_at, started_at, finished_at, error, "
    "mean_plddt, ptm, seconds, attempts";

// A prepared statement: bind in order, step, read columns; finalised on scope exit.
class Stmt {
 public:
  Stmt(sqlite3* db, const char* sql) : db_(db) {
    FC_CHECK(sqlite3_prepare_v2(db, sql, -1, &s_, nullptr) == SQLITE_OK, "job store: cannot prepare '", sql,
             "': ", sqlite3_errmsg(db));
  }
  ~Stmt() { sqlite3_finalize(s_); }
  Stmt(const Stmt&) = delete;
  Stmt& operator=(const Stmt&) = delete;
  Stmt& bind(const std::string& v) {
    check(sqlite3_bind_text(s_, ++n_, v.data(), static_cast<int>(v.size()), SQLITE_TRANSIENT));
    return *this;
  }
  Stmt& bind(double v) {
    check(sqlite3_bind_double(s_, ++n_, v));
    return *this;
  }
  Stmt& bind(int64_t v) {
    check(sqlite3_bind_int64(s_, ++n_, v));
    return *this;
  }
  // True while rows come; false when done.
  bool step() {
    const int rc = sqlite3_step(s_);
    if (rc == SQLITE_ROW) return true;
    FC_CHECK(rc == SQLITE_DONE, "job store: ", sqlite3_errmsg(db_));
    return false;
  }
  std::string text(int i) const {
    const unsigned char* t = sqlite3_column_text(s_, i);
    return t ? std::string(reinterpret_cast<const char*>(t), static_cast<size_t>(sqlite3_column_bytes(s_, i))) : "";
  }
  double real(int i) const { return sqlite3_column_double(s_, i); }
  int64_t integer(int i) const { return sqlite3_column_int64(s_, i); }

 private:
  void check(int rc) { FC_CHECK(rc == SQLITE_OK, "job store: bind: ", sqlite3_errmsg(db_)); }
  sqlite3* db_;
  sqlite3_stmt* s_ = nullptr;
  int n_ = 0;
};

Job read_job(const Stmt& s) {
  Job j;
  j.id = s.text(0);
  j.name = s.text(1);
  j.sequence = s.text(2);
  j.has_a3m = s.integer(3) != 0;
  j.status = parse_job_status(s.text(4));
  j.stage = s.text(5);
  j.progress = s.real(6);
  j.created_at = s.real(7);
  j.started_at = s.real(8);
  j.finished_at = s.real(9);
  j.error = s.text(10);
  j.mean_plddt = s.real(11);
  j.ptm = s.real(12);
  j.seconds = s.real(13);
  j.attempts = s.integer(14);
  return j;
}

// BEGIN IMMEDIATE … COMMIT, rolled back when an exception leaves the scope.
class Transaction {
 public:
  explicit Transaction(sqlite3* db) : db_(db) { run("BEGIN IMMEDIATE"); }
  ~Transaction() {
    if (!done_) sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
  }
  void commit() {
    run("COMMIT");
    done_ = true;
  }

 private:
  void run(const char* sql) {
    char* err = nullptr;
    const int rc = sqlite3_exec(db_, sql, nullptr, nullptr, &err);
    const std::string msg = err ? err : "";
    sqlite3_free(err);
    FC_CHECK(rc == SQLITE_OK, "job store: ", sql, ": ", msg);
  }
  sqlite3* db_;
  bool done_ = false;
};

}  // namespace

const char* to_string(JobStatus s) {
  switch (s) {
    case JobStatus::kQueued: return "queued";
    case JobStatus::kRunning: return "running";
    case JobStatus::kDone: return "done";
    case JobStatus::kFailed: return "failed";
    case JobStatus::kCancelled: return "cancelled";
  }
  return "?";
}

JobStatus parse_job_status(const std::string& s) {
  for (JobStatus v : {JobStatus::kQueued, JobStatus::kRunning, JobStatus::kDone, JobStatus::kFailed,
                      JobStatus::kCancelled})
    if (s == to_string(v)) return v;
  FC_THROW("job store: unknown job status '", s, "'");
}

double unix_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

JobStore::JobStore(const std::string& jobs_dir) : dir_(jobs_dir) {
  std::error_code ec;
  fs::create_directories(fs::path(dir_) / "jobs", ec);
  FC_CHECK(!ec, "--jobs_dir ", dir_, ": cannot create the folder: ", ec.message());
  const std::string path = (fs::path(dir_) / "jobs.db").string();
  const int rc = sqlite3_open_v2(path.c_str(), &db_, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_FULLMUTEX,
                                 nullptr);
  if (rc != SQLITE_OK) {
    const std::string msg = db_ ? sqlite3_errmsg(db_) : sqlite3_errstr(rc);
    sqlite3_close(db_);
    db_ = nullptr;
    FC_THROW(path, ": cannot open the job database: ", msg);
  }
  try {
    // The worker and the HTTP threads share this connection under mu_; the timeout covers a
    // second process (e.g. the sqlite3 shell) holding the lock for a moment.
    sqlite3_busy_timeout(db_, 5000);
    exec("PRAGMA journal_mode=WAL");
    exec("PRAGMA synchronous=FULL");
    exec(kSchema);
  } catch (...) {
    sqlite3_close(db_);
    db_ = nullptr;
    throw;
  }
}

JobStore::~JobStore() {
  if (db_) sqlite3_close(db_);
}

void JobStore::exec(const char* sql) {
  char* err = nullptr;
  const int rc = sqlite3_exec(db_, sql, nullptr, nullptr, &err);
  const std::string msg = err ? err : "";
  sqlite3_free(err);
  FC_CHECK(rc == SQLITE_OK, (fs::path(dir_) / "jobs.db").string(), ": ", msg);
}

std::string JobStore::job_dir(const std::string& id) const { return (fs::path(dir_) / "jobs" / id).string(); }

int JobStore::recover_after_restart() {
  std::lock_guard lock(mu_);
  Stmt s(db_, "UPDATE jobs SET status = 'queued', stage = 'queued again after a restart', progress = 0 "
              "WHERE status = 'running'");
  s.step();
  return sqlite3_changes(db_);
}

int JobStore::remove_orphan_dirs() {
  std::lock_guard lock(mu_);
  int removed = 0;
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(fs::path(dir_) / "jobs", ec)) {
    Stmt s(db_, "SELECT 1 FROM jobs WHERE id = ?");
    s.bind(e.path().filename().string());
    if (s.step()) continue;
    std::error_code rm;
    fs::remove_all(e.path(), rm);
    ++removed;
  }
  return removed;
}

JobStore::Admit JobStore::submit(const Job& job, int64_t max_queue) {
  std::lock_guard lock(mu_);
  Transaction tx(db_);
  Stmt count(db_, "SELECT COUNT(*) FROM jobs WHERE status = 'queued'");
  count.step();
  if (count.integer(0) >= max_queue) return Admit::kQueueFull;
  Stmt ins(db_, "INSERT INTO jobs (id, name, sequence, has_a3m, status, stage, created_at) "
                "VALUES (?, ?, ?, ?, 'queued', 'queued', ?)");
  ins.bind(job.id).bind(job.name).bind(job.sequence).bind(int64_t{job.has_a3m}).bind(job.created_at);
  ins.step();
  tx.commit();
  return Admit::kAdmitted;
}

std::optional<Job> JobStore::get(const std::string& id) {
  std::lock_guard lock(mu_);
  Stmt s(db_, (std::string("SELECT ") + kColumns + ", (SELECT COUNT(*) FROM jobs q WHERE q.status = 'queued' AND "
                                                   "q.rowid <= jobs.rowid) FROM jobs WHERE id = ?")
                  .c_str());
  s.bind(id);
  if (!s.step()) return std::nullopt;
  Job j = read_job(s);
  if (j.status == JobStatus::kQueued) j.queue_position = s.integer(15);
  return j;
}

std::vector<Job> JobStore::list(int64_t limit) {
  std::lock_guard lock(mu_);
  Stmt s(db_, (std::string("SELECT ") + kColumns + " FROM jobs ORDER BY rowid DESC LIMIT ?").c_str());
  s.bind(limit);
  std::vector<Job> out;
  while (s.step()) out.push_back(read_job(s));
  // Queue positions: queued jobs are served in rowid order, so count from the oldest listed one.
  int64_t queued = 0;
  for (auto it = out.rbegin(); it != out.rend(); ++it)
    if (it->status == JobStatus::kQueued) it->queue_position = ++queued;
  return out;
}

std::optional<Job> JobStore::claim_next() {
  std::lock_guard lock(mu_);
  Transaction tx(db_);
  Stmt s(db_, (std::string("SELECT ") + kColumns + " FROM jobs WHERE status = 'queued' ORDER BY rowid LIMIT 1").c_str());
  if (!s.step()) return std::nullopt;
  Job j = read_job(s);
  j.status = JobStatus::kRunning;
  j.started_at = unix_now();
  j.attempts += 1;
  j.stage = "starting";
  Stmt u(db_, "UPDATE jobs SET status = 'running', stage = ?, progress = 0, started_at = ?, attempts = ? WHERE id = ?");
  u.bind(j.stage).bind(j.started_at).bind(j.attempts).bind(j.id);
  u.step();
  tx.commit();
  return j;
}

void JobStore::set_progress(const std::string& id, const std::string& stage, double progress) {
  std::lock_guard lock(mu_);
  Stmt s(db_, "UPDATE jobs SET stage = ?, progress = ? WHERE id = ? AND status = 'running'");
  s.bind(stage).bind(progress).bind(id);
  s.step();
}

bool JobStore::finish_done(const std::string& id, double mean_plddt, double ptm, double seconds) {
  std::lock_guard lock(mu_);
  Stmt s(db_, "UPDATE jobs SET status = 'done', stage = 'done', progress = 1, finished_at = ?, mean_plddt = ?, "
              "ptm = ?, seconds = ?, error = '' WHERE id = ? AND status = 'running'");
  s.bind(unix_now()).bind(mean_plddt).bind(ptm).bind(seconds).bind(id);
  s.step();
  return sqlite3_changes(db_) == 1;
}

bool JobStore::finish_failed(const std::string& id, const std::string& error) {
  std::lock_guard lock(mu_);
  Stmt s(db_, "UPDATE jobs SET status = 'failed', finished_at = ?, error = ? WHERE id = ? AND status = 'running'");
  s.bind(unix_now()).bind(error).bind(id);
  s.step();
  return sqlite3_changes(db_) == 1;
}

bool JobStore::requeue(const std::string& id, const std::string& why) {
  std::lock_guard lock(mu_);
  Stmt s(db_, "UPDATE jobs SET status = 'queued', stage = ?, progress = 0 WHERE id = ? AND status = 'running'");
  s.bind(why).bind(id);
  s.step();
  return sqlite3_changes(db_) == 1;
}

std::optional<JobStatus> JobStore::cancel(const std::string& id) {
  std::lock_guard lock(mu_);
  Transaction tx(db_);
  Stmt s(db_, "SELECT status FROM jobs WHERE id = ?");
  s.bind(id);
  if (!s.step()) return std::nullopt;
  const JobStatus before = parse_job_status(s.text(0));
  if (!is_finished(before)) {
    Stmt u(db_, "UPDATE jobs SET status = 'cancelled', stage = 'cancelled', finished_at = ? WHERE id = ?");
    u.bind(unix_now()).bind(id);
    u.step();
  }
  tx.commit();
  return before;
}

bool JobStore::remove_finished(const std::string& id) {
  std::lock_guard lock(mu_);
  Stmt s(db_, "DELETE FROM jobs WHERE id = ? AND status IN ('done', 'failed', 'cancelled')");
  s.bind(id);
  s.step();
  return sqlite3_changes(db_) == 1;
}

std::vector<std::string> JobStore::prune_finished_before(double cutoff) {
  std::lock_guard lock(mu_);
  Transaction tx(db_);
  std::vector<std::string> ids;
  {
    Stmt s(db_, "SELECT id FROM jobs WHERE status IN ('done', 'failed', 'cancelled') AND finished_at < ?");
    s.bind(cutoff);
    while (s.step()) ids.push_back(s.text(0));
  }
  Stmt d(db_, "DELETE FROM jobs WHERE status IN ('done', 'failed', 'cancelled') AND finished_at < ?");
  d.bind(cutoff);
  d.step();
  tx.commit();
  return ids;
}

std::map<JobStatus, int64_t> JobStore::count_by_status() {
  std::lock_guard lock(mu_);
  std::map<JobStatus, int64_t> out;
  for (JobStatus v : {JobStatus::kQueued, JobStatus::kRunning, JobStatus::kDone, JobStatus::kFailed,
                      JobStatus::kCancelled})
    out[v] = 0;
  Stmt s(db_, "SELECT status, COUNT(*) FROM jobs GROUP BY status");
  while (s.step()) out[parse_job_status(s.text(0))] = s.integer(1);
  return out;
}

std::string JobStore::integrity_check() {
  std::lock_guard lock(mu_);
  Stmt s(db_, "PRAGMA integrity_check");
  std::string out;
  while (s.step()) {
    if (!out.empty()) out += '\n';
    out += s.text(0);
  }
  return out;
}

}  // namespace foldcore::apps::serve
