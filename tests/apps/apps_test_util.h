// Helpers shared by the tests of the foldcore program (tests/apps/): where the program is (the
// tests sit in <build>/tests/, the program at <build>/foldcore), running it or any command line,
// reading a file whole, and a scratch folder named after the running test.
#pragma once

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace foldcore::apps_test {
namespace fs = std::filesystem;

inline fs::path build_dir() { return fs::read_symlink("/proc/self/exe").parent_path().parent_path(); }
inline std::string foldcore_binary() { return (build_dir() / "foldcore").string(); }

inline std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

struct RunResult {
  int status = -1;
  std::string output;  // stdout + stderr
};
// Runs a shell command line and collects its exit status and output (stdout + stderr).
inline RunResult run_shell(const std::string& command) {
  RunResult r;
  FILE* p = ::popen((command + " 2>&1").c_str(), "r");
  if (p == nullptr) return r;
  std::array<char, 4096> buf{};
  size_t got = 0;
  while ((got = std::fread(buf.data(), 1, buf.size(), p)) > 0) r.output.append(buf.data(), got);
  const int st = ::pclose(p);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return r;
}
// Runs `foldcore <args>` (a shell command line).
inline RunResult run_foldcore(const std::string& args) { return run_shell(foldcore_binary() + " " + args); }

// /tmp/foldcore_<tag>_<pid>_<test name>, emptied at the start and removed at the end.
class TempDir {
 public:
  explicit TempDir(const std::string& tag) {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    path_ = fs::temp_directory_path() /
            ("foldcore_" + tag + "_" + std::to_string(::getpid()) + "_" + (info ? info->name() : "suite"));
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TempDir() { fs::remove_all(path_); }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

}  // namespace foldcore::apps_test
