// The REST API of `foldcore serve` on cpp-httplib (docs/serve.md, docs/openapi.yaml):
//
//   POST   /api/jobs                    FASTA text or JSON {name, sequence, a3m?} → 201 job
//   GET    /api/jobs                    newest first (?limit=, at most 1000)
//   GET    /api/jobs/{id}               status, stage, progress, scores, output files
//   DELETE /api/jobs/{id}               queued/running: cancel (200); finished: delete (204)
//   GET    /api/jobs/{id}/files/{name}  an output file of predict (PDB, mmCIF, confidence/PAE
//                                       JSON, ranking JSON, PNG plots)
//   GET    /api/health                  liveness and configuration
//   GET    /metrics                     Prometheus text
//   GET    /…                           the page (web/)
//
// Errors are JSON {"error": message, "status": code}. With a token, /api/ and /metrics need
// "Authorization: Bearer <token>" (401 otherwise); the page's static files do not.
#pragma once

#include <httplib.h>

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "apps/serve/job_store.h"
#include "apps/serve/worker.h"

namespace foldcore::apps::serve {

struct ApiOptions {
  std::string token;            // "" = no authentication
  int64_t max_queue = 100;      // queued jobs beyond this: 429
  int64_t max_length = 0;       // residues per sequence
  size_t max_body_bytes = 16u << 20;
  std::string web_dir;          // "" = no page
  std::string device, msa_mode;       // reported by /api/health
  std::vector<std::string> model_names;
};

class Api {
 public:
  Api(JobStore& store, Worker& worker, ApiOptions options);
  // Routes, limits and error handling on `server`.
  void install(httplib::Server& server);
  // New submissions get 503 from now on (SIGTERM drain).
  void set_draining() { draining_ = true; }

 private:
  void submit(const httplib::Request& req, httplib::Response& res);
  void list(const httplib::Request& req, httplib::Response& res);
  void get(const httplib::Request& req, httplib::Response& res);
  void remove(const httplib::Request& req, httplib::Response& res);
  void file(const httplib::Request& req, httplib::Response& res);
  void health(const httplib::Request& req, httplib::Response& res);
  void metrics(const httplib::Request& req, httplib::Response& res);
  bool authorized(const httplib::Request& req) const;

  JobStore& store_;
  Worker& worker_;
  ApiOptions o_;
  std::atomic<bool> draining_{false};
  std::atomic<int64_t> refused_full_{0}, refused_bad_{0};
};

// True for the names GET /api/jobs/{id}/files/{name} may serve: a plain file name (no '/', '\',
// "..", leading '.') of the kinds predict writes. Exposed for the tests.
bool is_servable_output_name(const std::string& name);

}  // namespace foldcore::apps::serve
