// `foldcore serve`: the web prediction service (docs/serve.md). One process: the HTTP server
// (cpp-httplib, loopback unless --host says otherwise), the job store (SQLite under --jobs_dir)
// and one worker that runs the predict engine with the models loaded once.
//
// Signals: SIGTERM or SIGINT drain: new submissions get 503, the running job finishes (or, after
// --drain_timeout seconds, goes back to the queue), then the server stops; the store is
// consistent at every moment, so even SIGKILL loses nothing (a running job is queued again at the
// next start).
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>

#include <cstdio>
#include <filesystem>
#include <memory>
#include <sstream>
#include <string>
#include <limits>
#include <thread>

#include "apps/commands.h"
#include "core/error.h"
#include "core/log.h"

#ifdef FOLDCORE_HAVE_SERVE
#include "apps/memory_estimate.h"
#include "apps/predict_command_model.h"
#include "apps/serve/http_api.h"
#include "apps/serve/job_store.h"
#include "apps/serve/worker.h"
#endif

namespace foldcore::apps {
namespace {

struct ServeArgs {
  std::string data_dir, jobs_dir, host = "127.0.0.1", device = "cpu", model_names = "model_1_ptm";
  std::string token, msa_mode = "single_sequence", msa_data_dir, db_preset = "reduced_dbs", web_dir;
  std::string model_config, precision = "fp32";
  int port = 8080;
  int64_t max_queue = 100, max_length = 0, num_recycles = 3, chunk_size = 0, random_params = -1;
  int64_t max_body_mb = 16;
  double keep_days = 0, drain_timeout = 600;
  int msa_cpus = 4;
};

#ifdef FOLDCORE_HAVE_SERVE
std::string default_web_dir() {
  std::error_code ec;
  const std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? "" : (exe.parent_path() / "web").string();
}

int run_serve(const ServeArgs& a) {
  using namespace serve;
  FC_CHECK(a.port >= 0 && a.port <= 65535, "--port must be 0..65535 (0: any free port), got ", a.port);
  FC_CHECK(a.max_queue >= 1, "--max_queue must be >= 1, got ", a.max_queue);
  FC_CHECK(a.max_body_mb >= 1, "--max_body_mb must be >= 1, got ", a.max_body_mb);
  FC_CHECK(a.keep_days >= 0, "--keep_days must be >= 0, got ", a.keep_days);
  // Block the stop signals before any thread starts so that every thread inherits the mask and
  // only the sigwait below receives them (no handler, no global flag).
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  WorkerOptions wo;
  wo.msa_mode = parse_msa_mode(a.msa_mode);
  wo.keep_days = a.keep_days;
  if (wo.msa_mode == MsaMode::kLocal) {
    FC_CHECK(!a.msa_data_dir.empty(), "--msa_mode local needs --msa_data_dir (AlphaFold's database folder)");
    wo.msa_search.databases = data::DatabasePaths::from_data_dir(a.msa_data_dir);
    wo.msa_search.db_preset = data::parse_db_preset(a.db_preset);
    wo.msa_search.template_searcher = data::TemplateSearcher::kNone;
    wo.msa_search.cpus = a.msa_cpus;
  }

  PredictOptions po;
  po.data_dir = a.data_dir;
  po.model_names = split_commas(a.model_names);
  po.num_recycles = a.num_recycles;
  po.device = parse_usable_device(a.device);
  po.precision = a.precision;
  po.chunk_size = a.chunk_size;
  po.random_params = a.random_params >= 0;
  po.random_params_seed = static_cast<uint64_t>(a.random_params < 0 ? 0 : a.random_params);
  po.model_config = a.model_config;
  Predictor predictor(po);
  predictor.load_models();  // once, before the first job: a bad params file fails the start

  // --max_length by default: the longest sequence the memory estimate lets every model run
  // (with the MSA depth the mode can bring: one row in single-sequence mode; uploads and local
  // searches are checked per job by the predict engine).
  int64_t max_length = a.max_length;
  if (max_length <= 0) {
    max_length = std::numeric_limits<int64_t>::max();
    for (const std::string& m : po.model_names)
      max_length = std::min(max_length, max_fitting_length(predictor.config(m), 1, po.num_recycles + 1,
                                                           predictor.num_params(m), po.device,
                                                           pair_logits_on_device(po.device, po.result_arrays)));
    FC_CHECK(max_length > 0, "serve: not even one residue fits the memory estimate on ", po.device.str());
  }

  JobStore store(a.jobs_dir);
  if (const int n = store.recover_after_restart())
    log::warn("serve: ", n, " job(s) were running when the server last stopped; queued again");
  if (const int n = store.remove_orphan_dirs())
    log::info("serve: removed ", n, " job folder(s) without a job (an interrupted submission or delete)");
  Worker worker(store, predictor, wo);

  ApiOptions ao;
  ao.token = a.token;
  ao.max_queue = a.max_queue;
  ao.max_length = max_length;
  ao.max_body_bytes = static_cast<size_t>(a.max_body_mb) << 20;
  ao.web_dir = a.web_dir.empty() ? default_web_dir() : a.web_dir;
  if (!std::filesystem::is_regular_file(std::filesystem::path(ao.web_dir) / "index.html")) {
    // A page asked for by name must be there; the default one may be missing (a build without
    // web/node_modules): the API works without it.
    FC_CHECK(a.web_dir.empty(), "--web_dir ", a.web_dir, ": no index.html there");
    log::warn("serve: no page in ", ao.web_dir, " (run scripts/setup.sh, which runs `npm ci` in web/, then "
              "rebuild); the API works without it");
    ao.web_dir.clear();
  }
  ao.device = po.device.str();
  ao.model_names = po.model_names;
  ao.msa_mode = a.msa_mode;
  Api api(store, worker, ao);

  httplib::Server server;
  // Enough threads that slow clients (a browser's idle keep-alive connections) cannot starve
  // the rest; the pool is httplib's own (it owns the object it is handed).
  server.new_task_queue = [] { return new httplib::ThreadPool(16); };
  server.set_keep_alive_timeout(2);
  server.set_read_timeout(10);
  server.set_write_timeout(10);
  api.install(server);

  // httplib 0.11 listens with a backlog of 5: a burst of clients (a page reload, a script
  // polling many jobs) would see dropped SYNs and second-long connect delays. listen() on the
  // listening socket again raises the backlog; the socket is remembered when httplib creates it.
  // Its default options are replaced here: SO_REUSEADDR only (no SO_REUSEPORT, so a second server
  // on the same port fails instead of sharing it).
  int listen_fd = -1;
  server.set_socket_options([&listen_fd](int fd) {
    const int yes = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
    listen_fd = fd;
  });
  const int port = a.port == 0 ? server.bind_to_any_port(a.host) : (server.bind_to_port(a.host, a.port) ? a.port : -1);
  FC_CHECK(port > 0, "serve: cannot listen on ", a.host, ":", a.port, " (address in use or not local?)");
  if (listen_fd >= 0) ::listen(listen_fd, SOMAXCONN);
  worker.start();
  std::thread http([&] { server.listen_after_bind(); });
  // The line tests and scripts wait for; stdout is flushed so a pipe sees it at once.
  std::printf("foldcore serve: listening on http://%s:%d/ (device %s, models %s, max length %lld, queue %lld)\n",
              a.host.c_str(), port, ao.device.c_str(), a.model_names.c_str(), static_cast<long long>(max_length),
              static_cast<long long>(a.max_queue));
  std::fflush(stdout);
  if (a.host != "127.0.0.1" && a.host != "localhost" && a.host != "::1" && a.token.empty())
    log::warn("serve: listening on ", a.host, " without --token: anyone who can reach it can submit jobs");

  int sig = 0;
  sigwait(&stop_signals, &sig);
  log::info("serve: signal ", sig, ": draining (no new jobs; the running one gets ", a.drain_timeout, " s)");
  api.set_draining();
  worker.stop(a.drain_timeout);
  server.stop();
  http.join();
  log::info("serve: stopped; store ", store.integrity_check());
  return 0;
}
#endif

}  // namespace

void add_serve_command(CLI::App& app) {
  CLI::App* sub = app.add_subcommand("serve", "Web prediction service: REST API, job queue and a page (docs/serve.md)");
  auto a = std::make_shared<ServeArgs>();
  sub->add_option("--data_dir", a->data_dir, "folder holding params/params_<model>.npz");
  sub->add_option("--jobs_dir", a->jobs_dir, "job database (jobs.db) and per-job files")
      ->required()
      ->check(folder_to_write());
  sub->add_option("--host", a->host, "address to listen on (default 127.0.0.1: this machine only)");
  sub->add_option("--port", a->port, "TCP port (default 8080; 0: any free port, printed at start)");
  sub->add_option("--device", a->device, "cpu or cuda:<i>");
  sub->add_option("--model_names", a->model_names, "comma-separated models, each run for every job");
  sub->add_option("--max_queue", a->max_queue, "queued jobs beyond this are refused with 429 (default 100)");
  sub->add_option("--max_length", a->max_length,
                  "longest sequence accepted (default: the longest the memory estimate fits on the device)");
  sub->add_option("--token", a->token, "require 'Authorization: Bearer <token>' on /api/ and /metrics");
  sub->add_option("--msa_mode", a->msa_mode, "single_sequence (default) or local (the searches of `foldcore msa`)")
      ->check(CLI::IsMember({"single_sequence", "local"}));
  sub->add_option("--msa_data_dir", a->msa_data_dir, "--msa_mode local: AlphaFold's database folder");
  sub->add_option("--db_preset", a->db_preset, "--msa_mode local: reduced_dbs (default) or full_dbs")
      ->check(CLI::IsMember({"full_dbs", "reduced_dbs"}));
  sub->add_option("--msa_cpus", a->msa_cpus, "--msa_mode local: threads per search tool");
  sub->add_option("--num_recycles", a->num_recycles, "recycling iterations (default 3)");
  sub->add_option("--chunk_size", a->chunk_size, "inference chunk size (0: none; 16 for long sequences)");
  sub->add_option("--precision", a->precision, "fp32 or bf16");
  sub->add_option("--model_config", a->model_config, "model architecture YAML (as for predict)");
  sub->add_option("--random_params", a->random_params,
                  "random parameters with this seed (NOT a real prediction; every output says so)");
  sub->add_option("--keep_days", a->keep_days, "delete finished jobs older than this many days (0: keep all)");
  sub->add_option("--max_body_mb", a->max_body_mb, "largest request body in MiB (413 beyond; default 16)");
  sub->add_option("--drain_timeout", a->drain_timeout,
                  "seconds the running job may take after SIGTERM before it is queued again (default 600)");
  sub->add_option("--web_dir", a->web_dir, "the page's files (default: web/ next to the program)");
  set_action(sub, [a]() -> int {
#ifdef FOLDCORE_HAVE_SERVE
    return run_serve(*a);
#else
    FC_THROW("this foldcore was built without cpp-httplib and SQLite (scripts/setup.sh installs them); "
             "`serve` is unavailable");
#endif
  });
}

}  // namespace foldcore::apps
