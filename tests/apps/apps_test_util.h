// Helpers shared by the tests of the foldcore program (tests/apps/): where the program is (the
// tests sit in <build>/tests/, the program at <build>/foldcore), reading a file whole, and a
// scratch folder named after the running test.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

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
