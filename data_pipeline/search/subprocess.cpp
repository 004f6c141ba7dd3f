#include "data_pipeline/search/subprocess.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "core/error.h"

namespace foldcore::data {
namespace {

std::string errno_text(int err) { return std::strerror(err); }

// A file descriptor closed on destruction.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  Fd(Fd&& o) noexcept : fd_(o.release()) {}
  Fd& operator=(Fd&& o) noexcept {
    if (this != &o) reset(o.release());
    return *this;
  }
  ~Fd() { reset(); }
  int get() const { return fd_; }
  int release() { return std::exchange(fd_, -1); }
  void reset(int fd = -1) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = fd;
  }
  explicit operator bool() const { return fd_ >= 0; }

 private:
  int fd_ = -1;
};

void make_pipe(Fd& read_end, Fd& write_end) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) FC_THROW("subprocess: pipe() failed: ", errno_text(errno));
  read_end.reset(fds[0]);
  write_end.reset(fds[1]);
}

Fd open_output(const std::string& path) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) FC_THROW("subprocess: cannot open output file ", path, ": ", errno_text(errno));
  return Fd(fd);
}

bool is_executable_file(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(path.c_str(), X_OK) == 0;
}

// The last `max_bytes` bytes of a file ("" when it cannot be read).
std::string file_tail(const std::string& path, size_t max_bytes) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return "";
  in.seekg(0, std::ios::end);
  const std::streamoff size = in.tellg();
  const std::streamoff start = std::max<std::streamoff>(0, size - static_cast<std::streamoff>(max_bytes));
  in.seekg(start);
  std::string out(static_cast<size_t>(size - start), '\0');
  in.read(out.data(), static_cast<std::streamsize>(out.size()));
  out.resize(static_cast<size_t>(std::max<std::streamsize>(0, in.gcount())));
  return out;
}

// One captured stream: stdout keeps its head, stderr its tail.
struct Capture {
  Fd fd;
  std::string* text = nullptr;
  bool keep_tail = false;
  size_t max_bytes = 0;
  bool truncated = false;

  // Reads what is available; false at end of file.
  bool read_some() {
    char buf[65536];
    for (;;) {
      const ssize_t n = ::read(fd.get(), buf, sizeof buf);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return true;
      if (n <= 0) return false;
      append(buf, static_cast<size_t>(n));
      if (static_cast<size_t>(n) < sizeof buf) return true;
    }
  }
  void append(const char* p, size_t n) {
    if (keep_tail) {
      text->append(p, n);
      if (text->size() > 2 * max_bytes) text->erase(0, text->size() - max_bytes);
    } else if (text->size() < max_bytes) {
      text->append(p, std::min(n, max_bytes - text->size()));
      truncated = truncated || text->size() == max_bytes;
    } else {
      truncated = true;
    }
  }
};

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

std::string find_program(const std::string& program, const std::string* search_path) {
  if (program.empty()) return "";
  if (program.find('/') != std::string::npos) return is_executable_file(program) ? program : "";
  std::string path_list;
  if (search_path != nullptr) {
    path_list = *search_path;
  } else if (const char* env = std::getenv("PATH")) {
    path_list = env;
  }
  size_t start = 0;
  while (start <= path_list.size()) {
    size_t end = path_list.find(':', start);
    if (end == std::string::npos) end = path_list.size();
    // An empty PATH entry means the current directory.
    const std::string candidate =
        (end == start ? std::string(".") : path_list.substr(start, end - start)) + "/" + program;
    if (is_executable_file(candidate)) return candidate;
    start = end + 1;
  }
  return "";
}

std::string require_program(const std::string& program, const std::string& install_hint) {
  FC_CHECK(!program.empty(), "subprocess: empty program name");
  const std::string path = find_program(program);
  if (!path.empty()) return path;
  const std::string hint = install_hint.empty() ? "" : "; " + install_hint;
  if (program.find('/') != std::string::npos) FC_THROW(program, " is not an executable file", hint);
  FC_THROW(program, " not found in PATH", hint);
}

std::string format_command(const std::vector<std::string>& argv) {
  std::string out;
  for (const std::string& a : argv) {
    if (!out.empty()) out += ' ';
    const bool plain = !a.empty() && a.find_first_of(" \t\n'\"\\$`*?;&|<>()") == std::string::npos;
    if (plain) {
      out += a;
    } else {
      out += '\'';
      for (char c : a) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
      out += '\'';
    }
  }
  return out;
}

std::string tail_lines(const std::string& text, size_t max_lines, size_t max_bytes) {
  size_t end = text.size();
  while (end > 0 && (text[end - 1] == '\n' || text[end - 1] == '\r')) --end;
  size_t start = end;
  size_t lines = 0;
  while (start > 0 && lines < max_lines && end - start < max_bytes) {
    --start;
    if (text[start] == '\n' && ++lines == max_lines) {
      ++start;
      break;
    }
  }
  if (end - start > max_bytes) start = end - max_bytes;
  return (start > 0 ? "..." : "") + text.substr(start, end - start);
}

ProcessResult run_process(const std::vector<std::string>& argv, const ProcessOptions& options) {
  FC_CHECK(!argv.empty(), "run_process: empty argv");
  const std::string program = require_program(argv[0], options.install_hint);

  // Everything the child needs is prepared before fork: between fork and exec only
  // async-signal-safe calls are allowed (the parent may have other threads).
  std::vector<char*> cargv;
  cargv.reserve(argv.size() + 1);
  for (const std::string& a : argv) cargv.push_back(const_cast<char*>(a.c_str()));
  cargv.push_back(nullptr);

  Fd dev_null(::open("/dev/null", O_RDONLY | O_CLOEXEC));
  if (!dev_null) FC_THROW("subprocess: cannot open /dev/null: ", errno_text(errno));
  ProcessResult result;
  Capture out_cap, err_cap;
  Fd out_child, err_child;
  if (options.stdout_path.empty()) {
    make_pipe(out_cap.fd, out_child);
    out_cap.text = &result.stdout_text;
    out_cap.max_bytes = options.max_capture_bytes;
  } else {
    out_child = open_output(options.stdout_path);
  }
  if (options.stderr_path.empty()) {
    make_pipe(err_cap.fd, err_child);
    err_cap.text = &result.stderr_text;
    err_cap.keep_tail = true;
    err_cap.max_bytes = options.max_capture_bytes;
  } else {
    err_child = open_output(options.stderr_path);
  }
  // The child reports a failed chdir/exec through this close-on-exec pipe: EOF means exec worked.
  Fd status_read, status_write;
  make_pipe(status_read, status_write);
  const char* work_dir = options.working_dir.empty() ? nullptr : options.working_dir.c_str();

  const auto t0 = std::chrono::steady_clock::now();
  const pid_t pid = ::fork();
  if (pid < 0) FC_THROW("subprocess: fork failed for ", argv[0], ": ", errno_text(errno));
  if (pid == 0) {
    // Child: own process group, so a timeout can kill the tool and everything it started.
    ::setpgid(0, 0);
    ::dup2(dev_null.get(), STDIN_FILENO);
    ::dup2(out_child.get(), STDOUT_FILENO);
    ::dup2(err_child.get(), STDERR_FILENO);
    int report[2] = {0, 0};  // {stage, errno}: stage 1 = chdir, 2 = exec
    if (work_dir != nullptr && ::chdir(work_dir) != 0) {
      report[0] = 1;
      report[1] = errno;
    } else {
      ::execv(program.c_str(), cargv.data());
      report[0] = 2;
      report[1] = errno;
    }
    [[maybe_unused]] const ssize_t w = ::write(status_write.get(), report, sizeof report);
    ::_exit(127);
  }
  ::setpgid(pid, pid);  // also from the parent: no race with an early kill
  out_child.reset();
  err_child.reset();
  status_write.reset();
  dev_null.reset();

  int report[2] = {0, 0};
  ssize_t got;
  do {
    got = ::read(status_read.get(), report, sizeof report);
  } while (got < 0 && errno == EINTR);
  if (got == static_cast<ssize_t>(sizeof report)) {
    int status = 0;
    ::waitpid(pid, &status, 0);
    if (report[0] == 1) FC_THROW("cannot run ", argv[0], ": cannot enter working directory ", options.working_dir, ": ",
                                 errno_text(report[1]));
    FC_THROW("cannot run ", program, ": ", errno_text(report[1]));
  }

  for (Capture* c : {&out_cap, &err_cap})
    if (c->fd) ::fcntl(c->fd.get(), F_SETFL, ::fcntl(c->fd.get(), F_GETFL) | O_NONBLOCK);

  const bool has_timeout = options.timeout_s > 0;
  bool term_sent = false, kill_sent = false;
  double kill_at = 0;
  int status = 0;
  int wait_ms = 1;
  for (;;) {
    const pid_t r = ::waitpid(pid, &status, WNOHANG);
    if (r == pid) break;
    if (r < 0 && errno != EINTR) FC_THROW("subprocess: waitpid failed for ", argv[0], ": ", errno_text(errno));
    const double elapsed = seconds_since(t0);
    if (has_timeout && !term_sent && elapsed >= options.timeout_s) {
      ::kill(-pid, SIGTERM);
      term_sent = true;
      result.timed_out = true;
      kill_at = elapsed + options.kill_grace_s;
    }
    if (term_sent && !kill_sent && elapsed >= kill_at) {
      ::kill(-pid, SIGKILL);
      kill_sent = true;
    }
    // Wait for output or for the next check, backing off from 1 ms to 50 ms while idle.
    double next_event_s = 0.05;
    if (has_timeout && !term_sent) next_event_s = std::min(next_event_s, options.timeout_s - elapsed);
    if (term_sent && !kill_sent) next_event_s = std::min(next_event_s, kill_at - elapsed);
    const int timeout_ms = std::clamp(std::min(wait_ms, static_cast<int>(next_event_s * 1000) + 1), 1, 50);
    pollfd fds[2];
    Capture* caps[2];
    nfds_t n = 0;
    for (Capture* c : {&out_cap, &err_cap}) {
      if (!c->fd) continue;
      fds[n] = {c->fd.get(), POLLIN, 0};
      caps[n++] = c;
    }
    const int ready = ::poll(n > 0 ? fds : nullptr, n, timeout_ms);
    bool activity = false;
    if (ready > 0) {
      for (nfds_t i = 0; i < n; ++i) {
        if (fds[i].revents == 0) continue;
        activity = true;
        if (!caps[i]->read_some()) caps[i]->fd.reset();
      }
    }
    wait_ms = activity ? 1 : std::min(50, wait_ms * 2);
  }
  // The process is gone: what it wrote is in the pipes (data written later by background
  // children it left behind is not waited for).
  for (Capture* c : {&out_cap, &err_cap})
    if (c->fd) c->read_some();
  result.seconds = seconds_since(t0);
  if (WIFEXITED(status)) result.exit_code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) result.signal = WTERMSIG(status);
  if (out_cap.truncated) result.stdout_text += "\n[... output truncated by foldcore ...]\n";
  if (err_cap.text != nullptr && result.stderr_text.size() > options.max_capture_bytes)
    result.stderr_text.erase(0, result.stderr_text.size() - options.max_capture_bytes);
  if (!options.stderr_path.empty()) result.stderr_text = file_tail(options.stderr_path, 16384);
  return result;
}

ProcessResult run_checked(const std::vector<std::string>& argv, const ProcessOptions& options) {
  ProcessResult r = run_process(argv, options);
  if (r.ok()) return r;
  std::string how;
  if (r.timed_out) {
    how = detail::concat("timed out after ", options.timeout_s, " s and was killed");
  } else if (r.signal != 0) {
    how = detail::concat("killed by signal ", r.signal, " (", strsignal(r.signal), ")");
  } else {
    how = detail::concat("exit status ", r.exit_code);
  }
  std::string msg = detail::concat(argv[0], " failed (", how, "): ", format_command(argv));
  const std::string tail = tail_lines(r.stderr_text);
  msg += tail.empty() ? "\n(no stderr output)" : "\nstderr (last lines):\n" + tail;
  throw Error(msg);
}

TempDir::TempDir(const std::string& prefix, const std::string& parent) {
  std::string base = parent;
  if (base.empty()) {
    const char* env = std::getenv("TMPDIR");
    base = (env != nullptr && *env != '\0') ? env : "/tmp";
  }
  std::string templ = base + "/" + prefix + ".XXXXXX";
  if (::mkdtemp(templ.data()) == nullptr) FC_THROW("cannot create a temporary directory in ", base, ": ", errno_text(errno));
  path_ = templ;
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);  // best effort: a destructor must not throw
}

}  // namespace foldcore::data
