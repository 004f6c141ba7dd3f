// Helpers of the `foldcore serve` tests: the server runs as a child process (the program at
// <build>/foldcore; the tests sit in <build>/tests/), bound to 127.0.0.1 on a port the kernel
// picks (--port 0, read back from the "listening on" line), with a scratch --jobs_dir. Every wait
// is bounded; the destructor kills a server still running.
#pragma once

#include <gtest/gtest.h>
#include <httplib.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "apps_test_util.h"

namespace foldcore::serve_test {
namespace fs = std::filesystem;
using nlohmann::json;

using apps_test::build_dir;
using apps_test::read_file;
using ScratchDir = apps_test::TempDir;

// The fast model of the tests: configs/model/tiny.yaml with random parameters.
inline std::vector<std::string> tiny_model_args() {
  return {"--model_names", "tiny", "--random_params", "0", "--model_config",
          std::string(FOLDCORE_SOURCE_DIR) + "/configs/model/tiny.yaml"};
}

class ServeProcess {
 public:
  // Starts `foldcore serve --host 127.0.0.1 --port 0 --jobs_dir <jobs_dir> <args>` and waits (at
  // most `timeout_s`) for its "listening on" line.
  ServeProcess(const fs::path& jobs_dir, const std::vector<std::string>& args, double timeout_s = 120)
      : log_(jobs_dir.string() + "." + std::to_string(++instances()) + ".log") {
    std::vector<std::string> argv = {(build_dir() / "foldcore").string(), "serve", "--host", "127.0.0.1", "--port",
                                     "0", "--jobs_dir", jobs_dir.string()};
    argv.insert(argv.end(), args.begin(), args.end());
    pid_ = ::fork();
    if (pid_ == 0) {
      std::FILE* f = std::freopen(log_.c_str(), "a", stdout);
      if (f) ::dup2(::fileno(stdout), 2);
      std::vector<char*> cargv;
      for (std::string& a : argv) cargv.push_back(a.data());
      cargv.push_back(nullptr);
      ::setenv("OMP_WAIT_POLICY", "passive", 1);
      ::execv(cargv[0], cargv.data());
      std::_Exit(127);
    }
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
    const std::regex listening(R"(listening on http://127\.0\.0\.1:(\d+)/)");
    while (std::chrono::steady_clock::now() < deadline) {
      std::smatch m;
      const std::string text = read_file(log_);
      if (std::regex_search(text, m, listening)) {
        port_ = std::stoi(m[1]);
        return;
      }
      int status = 0;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    ADD_FAILURE() << "foldcore serve did not start; its log:\n" << read_file(log_);
  }
  ~ServeProcess() { kill(SIGKILL); }
  // Numbers the servers of one test process: each gets its own log, so a restarted server on the
  // same --jobs_dir is never mistaken for its predecessor.
  static int& instances() {
    static int n = 0;
    return n;
  }
  ServeProcess(const ServeProcess&) = delete;
  ServeProcess& operator=(const ServeProcess&) = delete;

  bool ok() const { return port_ > 0; }
  int port() const { return port_; }
  std::string log() const { return read_file(log_); }
  httplib::Client client(const std::string& token = "") const {
    httplib::Client c("127.0.0.1", port_);
    c.set_connection_timeout(5);
    c.set_read_timeout(30);
    c.set_write_timeout(30);
    if (!token.empty()) c.set_bearer_token_auth(token);
    return c;
  }
  // Sends `sig` and waits up to `timeout_s` for the exit; returns the exit status (-1: killed by
  // a signal or still running, then SIGKILLed).
  int kill(int sig, double timeout_s = 60) {
    if (pid_ <= 0) return exit_status_;
    ::kill(pid_, sig);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
    int status = 0;
    while (::waitpid(pid_, &status, WNOHANG) == 0) {
      if (std::chrono::steady_clock::now() > deadline) {
        ::kill(pid_, SIGKILL);
        ::waitpid(pid_, &status, 0);
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    pid_ = -1;
    exit_status_ = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    return exit_status_;
  }

 private:
  std::string log_;
  pid_t pid_ = -1;
  int port_ = -1;
  int exit_status_ = -1;
};

// The response's JSON body; an empty object when there is no answer or no JSON.
inline json body_json(const httplib::Result& r) {
  json j = r ? json::parse(r->body, nullptr, /*allow_exceptions=*/false) : json::object();
  return j.is_object() ? j : json::object();
}

// Submits JSON {name, sequence}; returns the response.
inline httplib::Result submit(httplib::Client& c, const std::string& name, const std::string& sequence) {
  return c.Post("/api/jobs", json{{"name", name}, {"sequence", sequence}}.dump(), "application/json");
}

// Polls GET /api/jobs/{id} until `pred(job)` holds or `timeout_s` passes; returns the last job.
template <class Pred>
json wait_job(httplib::Client& c, const std::string& id, Pred pred, double timeout_s) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  json last;
  while (std::chrono::steady_clock::now() < deadline) {
    auto r = c.Get("/api/jobs/" + id);
    if (r && r->status == 200) {
      last = json::parse(r->body);
      if (pred(last)) return last;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return last;
}

inline bool finished(const json& j) {
  const std::string s = j.value("status", "");
  return s == "done" || s == "failed" || s == "cancelled";
}

// A sequence of `n` residues cycling through the 20 amino acids.
inline std::string test_sequence(size_t n) {
  const std::string aa = "MKTAYIAKQRQISFVKSHFSRQLEERLGLIEVQAPILSRVGDGTQDNLSGAEKAVQVKVKALPDAQFEVVHSLAKWKRQTLGQHDFSAGEGLYTHMKALRPDEDRLSPLHSVYVDQWDWERVMGDGERQFSTLKSTVEAIWAGIKATEAAVSEEFGLAPFLPDQIHFVHSQELLSRYPDLDAKGRERAIAKDLGAVFLVGIGGKLSDGHRHDVRAPDYDDWSTPSELGHAGLNGDILVWNPVLEDAFELSSMGIRVDADTLKHQLALTGDEDRLELEWHQALLRGEMPQTIGGGIGQSRLTMLLLQLPHIGQVQAGVWPAACRESVPALL";
  std::string s;
  while (s.size() < n) s += aa;
  return s.substr(0, n);
}

}  // namespace foldcore::serve_test
