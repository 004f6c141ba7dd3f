#include "apps/serve/worker.h"

#include <chrono>
#include <cmath>
#include <filesystem>

#include "core/error.h"
#include "core/log.h"
#include "core/timer.h"

namespace foldcore::apps::serve {
namespace fs = std::filesystem;

MsaMode parse_msa_mode(const std::string& s) {
  if (s == "single_sequence") return MsaMode::kSingleSequence;
  if (s == "local") return MsaMode::kLocal;
  FC_THROW("--msa_mode must be single_sequence or local, got '", s, "'");
}

void PredictionTimes::add(double seconds) {
  std::lock_guard lock(mu);
  for (size_t i = 0; i < std::size(kBuckets); ++i)
    if (seconds <= kBuckets[i]) ++bucket_counts[i];
  ++count;
  sum += seconds;
}

Worker::Worker(JobStore& store, Predictor& predictor, WorkerOptions options)
    : store_(store), predictor_(predictor), o_(std::move(options)) {}

Worker::~Worker() {
  if (thread_.joinable()) stop(0);
}

void Worker::start() {
  FC_CHECK(!thread_.joinable(), "serve: the worker is already running");
  thread_ = std::thread([this] { loop(); });
}

void Worker::notify() {
  {
    std::lock_guard lock(mu_);
    wake_ = true;
  }
  cv_.notify_all();
}

void Worker::cancel_if_running(const std::string& id) {
  std::lock_guard lock(mu_);
  if (running_id_ == id) abort_ = Abort::kCancel;
}

void Worker::stop(double timeout_s) {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(std::max(timeout_s, 0.0));
  while (busy() && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  if (busy()) {
    log::warn("serve: the running job did not finish within ", timeout_s, " s; it goes back to the queue");
    Abort expected = Abort::kNone;
    abort_.compare_exchange_strong(expected, Abort::kRequeue);
  }
  if (thread_.joinable()) thread_.join();
}

void Worker::prune() {
  if (o_.keep_days <= 0) return;
  const double now = unix_now();
  if (now - last_prune_ < 600) return;  // at most every 10 minutes
  last_prune_ = now;
  for (const std::string& id : store_.prune_finished_before(now - o_.keep_days * 86400.0)) {
    std::error_code ec;
    fs::remove_all(store_.job_dir(id), ec);
    log::info("serve: pruned job ", id, " (finished more than ", o_.keep_days, " days ago)");
  }
}

void Worker::loop() {
  for (;;) {
    {
      std::unique_lock lock(mu_);
      if (stopping_) return;
    }
    try {
      prune();
      std::optional<Job> job = store_.claim_next();
      if (!job) {
        std::unique_lock lock(mu_);
        cv_.wait_for(lock, std::chrono::seconds(1), [this] { return stopping_ || wake_; });
        wake_ = false;
        continue;
      }
      {
        std::lock_guard lock(mu_);
        running_id_ = job->id;
        abort_ = Abort::kNone;
        running_id_empty_ = false;
      }
      run_job(*job);
    } catch (const std::exception& e) {
      // A store failure (disk full, database locked by another process): log, back off, retry.
      log::error("serve: worker: ", e.what());
      std::this_thread::sleep_for(std::chrono::seconds(1));
    }
    std::lock_guard lock(mu_);
    running_id_.clear();
    running_id_empty_ = true;
  }
}

void Worker::run_job(const Job& job) {
  const fs::path dir = store_.job_dir(job.id);
  const fs::path result = dir / "result";
  log::info("serve: job ", job.id, " (", job.name, ", ", job.sequence.size(), " residues) started, attempt ",
            job.attempts);
  auto report = [&](const std::string& stage, double fraction) {
    if (abort_.load() != Abort::kNone) throw Aborted();
    store_.set_progress(job.id, stage, fraction);
  };
  WallTimer timer;
  try {
    // A previous attempt (the process died mid-job) may have left a partial search; the
    // results are written atomically, so only a complete result/ folder is ever there.
    std::error_code ec;
    fs::remove_all(result, ec);
    TargetInputs in;
    in.fasta_path = (dir / "query.fasta").string();
    FC_CHECK(fs::is_regular_file(in.fasta_path), in.fasta_path, ": the job's input is missing");
    if (job.has_a3m) {
      in.extra_alignments = {(dir / "upload.a3m").string()};
    } else if (o_.msa_mode == MsaMode::kLocal) {
      report("msa", 0.0);
      data::MsaSearchOptions so = o_.msa_search;
      so.use_precomputed_msas = true;  // a re-queued job reuses what its first attempt found
      data::run_msa_search(in.fasta_path, (dir / "msas").string(), so);
      in.msa_dir = (dir / "msas").string();
    }
    const TargetSummary s = predictor_.predict_target(in, result.string(), report);
    const double seconds = timer.seconds();
    times_.add(seconds);
    if (store_.finish_done(job.id, s.mean_plddt, std::isnan(s.ptm) ? -1.0 : s.ptm, seconds))
      log::info("serve: job ", job.id, " done in ", seconds, " s (mean pLDDT ", s.mean_plddt, ")");
  } catch (const Aborted&) {
    std::error_code ec;
    fs::remove_all(result, ec);
    if (abort_.load() == Abort::kRequeue) {
      store_.requeue(job.id, "queued again: the server stopped while it ran");
      log::info("serve: job ", job.id, " re-queued (server stopping)");
    } else {
      log::info("serve: job ", job.id, " cancelled");
    }
  } catch (const std::exception& e) {
    std::error_code ec;
    fs::remove_all(result, ec);
    store_.finish_failed(job.id, e.what());
    log::warn("serve: job ", job.id, " failed: ", e.what());
  }
}

}  // namespace foldcore::apps::serve
