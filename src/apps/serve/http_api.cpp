#include "apps/serve/http_api.h"

#include <algorithm>
#include <cmath>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>

#include "apps/serve/job_input.h"
#include "core/error.h"
#include "core/log.h"

namespace foldcore::apps::serve {
namespace fs = std::filesystem;
using json = nlohmann::ordered_json;

namespace {

void send_json(httplib::Response& res, int status, const json& body) {
  res.status = status;
  res.set_content(body.dump(), "application/json");
}

void send_error(httplib::Response& res, int status, const std::string& message) {
  send_json(res, status, json{{"error", message}, {"status", status}});
}

std::string iso_time(double unix_seconds) {
  if (unix_seconds <= 0) return "";
  const std::time_t t = static_cast<std::time_t>(unix_seconds);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

// 128 random bits as 32 hex digits: ids cannot be guessed from each other.
std::string new_job_id() {
  std::random_device rd;
  std::ostringstream out;
  out << std::hex;
  for (int i = 0; i < 4; ++i) {
    char buf[9];
    std::snprintf(buf, sizeof buf, "%08x", rd());
    out << buf;
  }
  return out.str();
}

bool is_job_id(const std::string& id) {
  return id.size() == 32 && std::all_of(id.begin(), id.end(), [](char c) { return std::isxdigit(static_cast<unsigned char>(c)) && !std::isupper(static_cast<unsigned char>(c)); });
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Written to a temporary name and renamed, so a crash never leaves half an input.
void write_file_atomic(const fs::path& path, const std::string& content) {
  const fs::path tmp = path.string() + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << content;
    out.flush();
    FC_CHECK(out.good(), tmp.string(), ": cannot write");
  }
  fs::rename(tmp, path);
}

std::vector<std::string> output_files(const fs::path& result_dir) {
  std::vector<std::string> names;
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(result_dir, ec))
    if (e.is_regular_file() && !e.is_symlink() && is_servable_output_name(e.path().filename().string()))
      names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

json job_json(const Job& j, bool with_sequence, const std::vector<std::string>& files) {
  json o{{"id", j.id},
         {"name", j.name},
         {"length", j.sequence.size()},
         {"status", to_string(j.status)},
         {"stage", j.stage},
         {"progress", std::round(j.progress * 1000) / 1000},
         {"created_at", iso_time(j.created_at)},
         {"started_at", j.started_at > 0 ? json(iso_time(j.started_at)) : json(nullptr)},
         {"finished_at", j.finished_at > 0 ? json(iso_time(j.finished_at)) : json(nullptr)},
         {"attempts", j.attempts},
         {"has_a3m", j.has_a3m}};
  if (j.status == JobStatus::kQueued) o["queue_position"] = j.queue_position;
  if (!j.error.empty()) o["error"] = j.error;
  if (j.status == JobStatus::kDone) {
    o["mean_plddt"] = std::round(j.mean_plddt * 100) / 100;
    o["ptm"] = j.ptm >= 0 ? json(std::round(j.ptm * 1000) / 1000) : json(nullptr);
    o["seconds"] = std::round(j.seconds * 100) / 100;
  }
  if (with_sequence) {
    o["sequence"] = j.sequence;
    o["files"] = files;
  }
  return o;
}

const char* content_type_of(const std::string& name) {
  if (ends_with(name, ".pdb")) return "chemical/x-pdb";
  if (ends_with(name, ".cif")) return "chemical/x-mmcif";
  if (ends_with(name, ".json")) return "application/json";
  if (ends_with(name, ".png")) return "image/png";
  return "application/octet-stream";
}

}  // namespace

bool is_servable_output_name(const std::string& name) {
  if (name.empty() || name.size() > 200 || name[0] == '.') return false;
  if (name.find("..") != std::string::npos) return false;
  for (char c : name)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.')) return false;
  // The files of predict_outputs.h a client needs: structures, confidence and PAE JSON, the
  // ranking and the plots; not the raw npz arrays, timings or the `done` marker.
  if (ends_with(name, ".pdb") || ends_with(name, ".cif") || ends_with(name, ".png")) return true;
  return ends_with(name, ".json") &&
         (name.rfind("confidence_", 0) == 0 || name.rfind("pae_", 0) == 0 || name == "ranking_debug.json");
}

Api::Api(JobStore& store, Worker& worker, ApiOptions options) : store_(store), worker_(worker), o_(std::move(options)) {}

bool Api::authorized(const httplib::Request& req) const {
  if (o_.token.empty()) return true;
  const std::string got = req.get_header_value("Authorization");
  const std::string want = "Bearer " + o_.token;
  // Compare every byte whatever the first difference, so timing does not reveal the prefix.
  unsigned diff = got.size() == want.size() ? 0u : 1u;
  for (size_t i = 0; i < want.size(); ++i) diff |= static_cast<unsigned>(want[i] ^ (i < got.size() ? got[i] : 0));
  return diff == 0;
}

void Api::install(httplib::Server& server) {
  server.set_payload_max_length(o_.max_body_bytes);
  server.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    const bool api = req.path.rfind("/api/", 0) == 0 || req.path == "/metrics";
    if (api && !authorized(req)) {
      res.set_header("WWW-Authenticate", "Bearer");
      send_error(res, 401,
                 req.has_header("Authorization") ? "wrong token" : "this server needs 'Authorization: Bearer <token>'");
      return httplib::Server::HandlerResponse::Handled;
    }
    return httplib::Server::HandlerResponse::Unhandled;
  });
  // Errors httplib answers itself (413 body too large, 404 no route, 400 bad request) get the
  // same JSON shape as ours.
  server.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    std::string msg = "HTTP error " + std::to_string(res.status);
    if (res.status == 400) msg = "malformed HTTP request";
    if (res.status == 404) msg = "no such resource: " + req.path;
    if (res.status == 405) msg = "method not allowed on " + req.path;
    if (res.status == 413) msg = "request body too large";
    if (res.status == 414) msg = "URI too long";
    send_error(res, res.status, msg);
  });
  server.set_exception_handler([](const httplib::Request& req, httplib::Response& res, std::exception_ptr ep) {
    std::string msg = "internal error";
    try {
      std::rethrow_exception(ep);
    } catch (const std::exception& e) {
      msg = e.what();
    } catch (...) {
    }
    log::error("serve: ", req.method, " ", req.path, ": ", msg);
    send_error(res, 500, msg);
  });
  server.Post("/api/jobs", [this](const httplib::Request& q, httplib::Response& r) { submit(q, r); });
  server.Get("/api/jobs", [this](const httplib::Request& q, httplib::Response& r) { list(q, r); });
  server.Get(R"(/api/jobs/([^/]+))", [this](const httplib::Request& q, httplib::Response& r) { get(q, r); });
  server.Delete(R"(/api/jobs/([^/]+))", [this](const httplib::Request& q, httplib::Response& r) { remove(q, r); });
  server.Get(R"(/api/jobs/([^/]+)/files/(.*))", [this](const httplib::Request& q, httplib::Response& r) { file(q, r); });
  server.Get("/api/health", [this](const httplib::Request& q, httplib::Response& r) { health(q, r); });
  server.Get("/metrics", [this](const httplib::Request& q, httplib::Response& r) { metrics(q, r); });
  if (!o_.web_dir.empty()) server.set_mount_point("/", o_.web_dir);
}

void Api::submit(const httplib::Request& req, httplib::Response& res) {
  if (draining_) return send_error(res, 503, "the server is shutting down; submit again later");
  JobInput in;
  try {
    in = parse_job_input(req.body, req.get_header_value("Content-Type"), o_.max_length);
  } catch (const InputError& e) {
    ++refused_bad_;
    return send_error(res, e.status, e.what());
  }
  Job job;
  job.id = new_job_id();
  job.name = in.name;
  job.sequence = in.sequence;
  job.has_a3m = !in.a3m.empty();
  job.created_at = unix_now();
  const fs::path dir = store_.job_dir(job.id);
  // Inputs first, row second: a crash in between leaves an orphan folder (pruned), never a job
  // without its input.
  try {
    fs::create_directories(dir);
    write_file_atomic(dir / "query.fasta", to_fasta(job.name, job.sequence));
    if (job.has_a3m) write_file_atomic(dir / "upload.a3m", in.a3m);
    if (store_.submit(job, o_.max_queue) == JobStore::Admit::kQueueFull) {
      fs::remove_all(dir);
      ++refused_full_;
      res.set_header("Retry-After", "30");
      return send_error(res, 429, "the queue is full (" + std::to_string(o_.max_queue) + " jobs waiting); try later");
    }
  } catch (...) {
    std::error_code ec;
    fs::remove_all(dir, ec);
    throw;
  }
  worker_.notify();
  const std::optional<Job> stored = store_.get(job.id);
  res.set_header("Location", "/api/jobs/" + job.id);
  send_json(res, 201, job_json(stored.value_or(job), true, {}));
}

void Api::list(const httplib::Request& req, httplib::Response& res) {
  int64_t limit = 100;
  if (req.has_param("limit")) {
    try {
      limit = std::stoll(req.get_param_value("limit"));
    } catch (const std::exception&) {
      return send_error(res, 400, "limit must be an integer");
    }
    if (limit < 1 || limit > 1000) return send_error(res, 400, "limit must be between 1 and 1000");
  }
  json jobs = json::array();
  for (const Job& j : store_.list(limit)) jobs.push_back(job_json(j, false, {}));
  send_json(res, 200, json{{"jobs", jobs}});
}

void Api::get(const httplib::Request& req, httplib::Response& res) {
  const std::string id = req.matches[1];
  const std::optional<Job> j = is_job_id(id) ? store_.get(id) : std::nullopt;
  if (!j) return send_error(res, 404, "no job '" + id + "'");
  const std::vector<std::string> files =
      j->status == JobStatus::kDone ? output_files(fs::path(store_.job_dir(id)) / "result") : std::vector<std::string>{};
  send_json(res, 200, job_json(*j, true, files));
}

void Api::remove(const httplib::Request& req, httplib::Response& res) {
  const std::string id = req.matches[1];
  const std::optional<JobStatus> before = is_job_id(id) ? store_.cancel(id) : std::nullopt;
  if (!before) return send_error(res, 404, "no job '" + id + "'");
  if (!is_finished(*before)) {
    worker_.cancel_if_running(id);
    return send_json(res, 200, json{{"id", id}, {"status", "cancelled"}, {"was", to_string(*before)}});
  }
  if (!store_.remove_finished(id)) return send_error(res, 409, "job '" + id + "' changed state; try again");
  std::error_code ec;
  fs::remove_all(store_.job_dir(id), ec);
  res.status = 204;
}

void Api::file(const httplib::Request& req, httplib::Response& res) {
  const std::string id = req.matches[1], name = req.matches[2];
  if (!is_servable_output_name(name))
    return send_error(res, 400, "file name '" + name + "' is not an output file name (no paths; .pdb, .cif, "
                                "confidence_*.json, pae_*.json, ranking_debug.json, .png)");
  const std::optional<Job> j = is_job_id(id) ? store_.get(id) : std::nullopt;
  if (!j) return send_error(res, 404, "no job '" + id + "'");
  if (j->status != JobStatus::kDone)
    return send_error(res, 409, "job '" + id + "' is " + to_string(j->status) + "; files exist once it is done");
  const fs::path path = fs::path(store_.job_dir(id)) / "result" / name;
  if (!fs::is_regular_file(fs::symlink_status(path))) return send_error(res, 404, "job '" + id + "' has no file '" + name + "'");
  std::ifstream in(path, std::ios::binary);
  std::string content((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (!in.good() && !in.eof()) return send_error(res, 500, "cannot read " + name);
  res.set_header("Content-Disposition", "inline; filename=\"" + name + "\"");
  res.set_content(std::move(content), content_type_of(name));
}

void Api::health(const httplib::Request&, httplib::Response& res) {
  const std::map<JobStatus, int64_t> counts = store_.count_by_status();
  send_json(res, 200,
            json{{"status", draining_ ? "draining" : "ok"},
                 {"device", o_.device},
                 {"models", o_.model_names},
                 {"msa_mode", o_.msa_mode},
                 {"max_length", o_.max_length},
                 {"max_queue", o_.max_queue},
                 {"queue_length", counts.at(JobStatus::kQueued)},
                 {"running", counts.at(JobStatus::kRunning)},
                 {"auth", !o_.token.empty()}});
}

void Api::metrics(const httplib::Request&, httplib::Response& res) {
  const std::map<JobStatus, int64_t> counts = store_.count_by_status();
  std::ostringstream m;
  m << "# HELP foldcore_queue_length Jobs waiting to run.\n# TYPE foldcore_queue_length gauge\n"
    << "foldcore_queue_length " << counts.at(JobStatus::kQueued) << "\n";
  m << "# HELP foldcore_jobs Jobs in the store by state.\n# TYPE foldcore_jobs gauge\n";
  for (const auto& [status, n] : counts) m << "foldcore_jobs{state=\"" << to_string(status) << "\"} " << n << "\n";
  m << "# HELP foldcore_worker_busy 1 while a prediction runs.\n# TYPE foldcore_worker_busy gauge\n"
    << "foldcore_worker_busy " << (worker_.busy() ? 1 : 0) << "\n";
  m << "# HELP foldcore_submissions_refused_total Submissions refused since the start.\n"
    << "# TYPE foldcore_submissions_refused_total counter\n"
    << "foldcore_submissions_refused_total{reason=\"queue_full\"} " << refused_full_.load() << "\n"
    << "foldcore_submissions_refused_total{reason=\"bad_input\"} " << refused_bad_.load() << "\n";
  PredictionTimes& t = worker_.times();
  std::lock_guard lock(t.mu);
  m << "# HELP foldcore_prediction_seconds Wall time of finished predictions (MSA to written files).\n"
    << "# TYPE foldcore_prediction_seconds histogram\n";
  for (size_t i = 0; i < std::size(PredictionTimes::kBuckets); ++i)
    m << "foldcore_prediction_seconds_bucket{le=\"" << PredictionTimes::kBuckets[i] << "\"} " << t.bucket_counts[i]
      << "\n";
  m << "foldcore_prediction_seconds_bucket{le=\"+Inf\"} " << t.count << "\n"
    << "foldcore_prediction_seconds_sum " << t.sum << "\n"
    << "foldcore_prediction_seconds_count " << t.count << "\n";
  res.set_content(m.str(), "text/plain; version=0.0.4");
}

}  // namespace foldcore::apps::serve
