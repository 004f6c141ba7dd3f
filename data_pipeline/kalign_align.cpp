#include "data_pipeline/kalign_align.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <vector>

#include "core/error.h"
#include "data_pipeline/fasta.h"
#include "data_pipeline/text_reader.h"

extern char** environ;

namespace foldcore::data {
namespace {

// A private folder under the system temp dir, removed with its contents on scope exit.
class TempDir {
 public:
  TempDir() {
    std::string templ = (std::filesystem::temp_directory_path() / "foldcore_kalign_XXXXXX").string();
    FC_CHECK(::mkdtemp(templ.data()) != nullptr, "kalign: cannot create a temporary folder: ",
             std::strerror(errno));
    path_ = templ;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// Runs argv[0] (looked up in PATH) with stdout and stderr sent to `log_path`; returns the exit
// status (128 + signal when killed).
int run_process(const std::vector<std::string>& argv, const std::string& log_path) {
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = 0;
  const int rc = posix_spawnp(&pid, args[0], &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  FC_CHECK(rc == 0, "kalign: cannot start '", argv[0], "': ", std::strerror(rc));
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0) FC_CHECK(errno == EINTR, "kalign: waitpid failed: ", std::strerror(errno));
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  return WIFSIGNALED(status) ? 128 + WTERMSIG(status) : 1;
}

std::string tail_of(const std::string& text, size_t n) { return text.size() <= n ? text : text.substr(text.size() - n); }

}  // namespace

std::pair<std::string, std::string> kalign_pairwise(const std::string& a, const std::string& b,
                                                    const std::string& kalign_binary) {
  for (const std::string* s : {&a, &b})
    FC_CHECK(s->size() >= 6, "kalign: sequences must be at least 6 residues long, got ", s->size(), " ('", *s, "')");
  TempDir dir;
  const std::string in = dir.path() + "/input.fasta", out = dir.path() + "/output.fasta", log = dir.path() + "/log";
  write_fasta(in, {{"seq0", a}, {"seq1", b}}, 0);
  const int rc = run_process({kalign_binary, "-i", in, "-o", out, "-f", "fasta"}, log);
  std::string log_text;
  try {
    log_text = read_text_file(log);
  } catch (const Error&) {
  }
  FC_CHECK(rc == 0, "kalign (", kalign_binary, ") failed with status ", rc, ": ", tail_of(log_text, 2000));
  FastaOptions opts;
  opts.alphabet = Alphabet::kProteinAligned;
  opts.uppercase = true;
  const std::vector<FastaRecord> records = read_fasta(out, opts);
  std::string rows[2];
  bool seen[2] = {false, false};
  for (const FastaRecord& r : records)
    for (int k = 0; k < 2; ++k)
      if (r.description == "seq" + std::to_string(k)) {
        rows[k] = r.sequence;
        seen[k] = true;
      }
  FC_CHECK(seen[0] && seen[1] && rows[0].size() == rows[1].size(), "kalign: output ", out,
           " does not hold the two aligned sequences (", records.size(), " records)");
  return {rows[0], rows[1]};
}

}  // namespace foldcore::data
