// Running external programs (the MSA and template search tools) without a shell: an argv vector,
// an optional working directory, stdout/stderr captured into strings or written to files, a
// wall-clock timeout after which the whole process group is killed, and the exit status.
//
// Errors are foldcore::Error values a user can act on:
//   - a program that is not on PATH: "jackhmmer not found in PATH; install hmmer";
//   - run_checked(): a non-zero exit, a signal or a timeout, with the tail of stderr.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace foldcore::data {

struct ProcessOptions {
  std::string working_dir;    // "" = the caller's working directory
  std::string stdout_path;    // "" = capture stdout into ProcessResult::stdout_text
  std::string stderr_path;    // "" = capture stderr into ProcessResult::stderr_text
  double timeout_s = 0.0;     // <= 0: no limit. On expiry the process group gets SIGTERM, then
                              // SIGKILL after kill_grace_s.
  double kill_grace_s = 2.0;
  // Captured streams keep at most this many bytes: stdout its first bytes (and then a marker),
  // stderr its last bytes (the end of a tool's log is where the error is).
  size_t max_capture_bytes = size_t{64} << 20;
  std::string install_hint;   // appended to "not found in PATH", e.g. "install hmmer"
};

struct ProcessResult {
  int exit_code = -1;         // exit status when the process exited normally, else -1
  int signal = 0;             // the terminating signal, 0 when it exited
  bool timed_out = false;
  double seconds = 0.0;       // wall time
  std::string stdout_text;    // when captured
  std::string stderr_text;    // when captured (when written to a file: its tail, for messages)
  bool ok() const { return exit_code == 0 && !timed_out; }
};

// The absolute path of `program`: itself when it contains a '/', else the first executable
// "<dir>/<program>" on `search_path` (a ':'-separated list; by default $PATH). "" when none.
std::string find_program(const std::string& program, const std::string* search_path = nullptr);

// Like find_program but throws "<program> not found in PATH; <install_hint>" (or "... is not an
// executable file" for a path).
std::string require_program(const std::string& program, const std::string& install_hint = "");

// Runs argv[0] (looked up with require_program) with arguments argv[1..]. Throws only when the
// program cannot be found or started, or an output file cannot be opened; a failing program is
// reported in the result.
ProcessResult run_process(const std::vector<std::string>& argv, const ProcessOptions& options = {});

// run_process, then throws "<argv[0]> failed (exit status N | killed by signal S | timed out
// after T s): <command line>\n<stderr tail>" unless the program exited with status 0.
ProcessResult run_checked(const std::vector<std::string>& argv, const ProcessOptions& options = {});

// The last `max_lines` lines of `text` (at most `max_bytes`), for error messages.
std::string tail_lines(const std::string& text, size_t max_lines = 20, size_t max_bytes = 4000);

// argv joined with spaces, arguments containing spaces or quotes shell-quoted (for messages and
// logs only: nothing is ever run through a shell).
std::string format_command(const std::vector<std::string>& argv);

// A fresh directory under `parent` (default: $TMPDIR or /tmp), removed with its contents when
// the object is destroyed.
class TempDir {
 public:
  explicit TempDir(const std::string& prefix = "foldcore", const std::string& parent = "");
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

}  // namespace foldcore::data
