// The prediction worker of `foldcore serve`: one thread, one prediction at a time on the
// device, the models loaded once (Predictor) and reused for every job.
//
// Per job (files under JobStore::job_dir(id)): query.fasta and upload.a3m were written at
// submission; the MSA stage (msa_mode) fills msas/; the predict engine writes result/ (the
// files of `foldcore predict`, atomically). Stage and progress go to the store as they change.
// A cancel (DELETE) or a drain that ran out of time aborts the job at its next progress report
// (each recycling iteration at the latest); a drain abort puts the job back in the queue.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>

#include "apps/predict_command_model.h"
#include "apps/serve/job_store.h"
#include "data_pipeline/search/msa_search.h"

namespace foldcore::apps::serve {

enum class MsaMode { kSingleSequence, kLocal };
MsaMode parse_msa_mode(const std::string& s);

struct WorkerOptions {
  MsaMode msa_mode = MsaMode::kSingleSequence;
  data::MsaSearchOptions msa_search;  // kLocal: the databases and tools of `foldcore msa`
  double keep_days = 0;               // > 0: finished jobs older than this are pruned
};

// Prometheus histogram of prediction wall times (seconds), filled by the worker.
struct PredictionTimes {
  static constexpr double kBuckets[] = {1, 5, 15, 60, 300, 900, 3600};
  std::mutex mu;
  int64_t bucket_counts[std::size(kBuckets)] = {};
  int64_t count = 0;
  double sum = 0;
  void add(double seconds);
};

class Worker {
 public:
  Worker(JobStore& store, Predictor& predictor, WorkerOptions options);
  ~Worker();  // stop(0) if still running
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;

  void start();
  // A new job is queued: wake the worker.
  void notify();
  // The job was cancelled in the store: abort it if it is the one running.
  void cancel_if_running(const std::string& id);
  // Drain: take no new job; let the running one finish within `timeout_s` seconds, then abort it
  // and queue it again. Returns when the thread has ended.
  void stop(double timeout_s);
  bool busy() const { return !running_id_empty_.load(); }
  PredictionTimes& times() { return times_; }

 private:
  enum class Abort { kNone, kCancel, kRequeue };
  struct Aborted : std::exception {
    const char* what() const noexcept override { return "job aborted"; }
  };
  void loop();
  void run_job(const Job& job);
  void prune();

  JobStore& store_;
  Predictor& predictor_;
  WorkerOptions o_;
  PredictionTimes times_;
  std::thread thread_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  bool wake_ = false;
  std::string running_id_;  // under mu_
  std::atomic<bool> running_id_empty_{true};
  std::atomic<Abort> abort_{Abort::kNone};
  double last_prune_ = 0;
};

}  // namespace foldcore::apps::serve
