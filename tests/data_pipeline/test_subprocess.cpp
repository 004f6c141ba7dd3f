// Subprocess runner: argv without a shell, captured streams, files, working directory, exit
// status, timeouts that kill the whole process group, and the errors a user sees.
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <filesystem>
#include <functional>

#include "core/error.h"
#include "data_pipeline/search/subprocess.h"
#include "data_pipeline/formats/text_reader.h"
#include "data_pipeline/data_test_util.h"

namespace foldcore::data {
namespace {

ProcessResult sh(const std::string& script, const ProcessOptions& options = {}) {
  return run_process({"/bin/sh", "-c", script}, options);
}

TEST(Subprocess, CapturesStdoutStderrAndExitStatus) {
  const ProcessResult r = sh("echo out; echo err >&2; exit 3");
  EXPECT_EQ(r.exit_code, 3);
  EXPECT_EQ(r.signal, 0);
  EXPECT_FALSE(r.timed_out);
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(r.stdout_text, "out\n");
  EXPECT_EQ(r.stderr_text, "err\n");
  EXPECT_TRUE(sh("true").ok());
}

TEST(Subprocess, ArgumentsAreNotInterpretedByAShell) {
  // Each argv entry reaches the program unchanged: spaces, quotes and '$' included.
  const ProcessResult r = run_process({"/bin/sh", "-c", "printf '%s|' \"$@\"", "sh", "a b", "$HOME", "'q'", ""});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r.stdout_text, "a b|$HOME|'q'||");
}

TEST(Subprocess, LargeOutputOnBothStreamsDoesNotDeadlock) {
  // 1 MB on each stream: more than a pipe buffer, so both must be drained concurrently.
  const ProcessResult r = sh("i=0; while [ $i -lt 2 ]; do head -c 524288 /dev/zero | tr '\\0' a; "
                             "head -c 524288 /dev/zero | tr '\\0' b >&2; i=$((i+1)); done");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r.stdout_text.size(), 1048576u);
  EXPECT_EQ(r.stderr_text.size(), 1048576u);
  EXPECT_EQ(r.stdout_text.find_first_not_of('a'), std::string::npos);
}

TEST(Subprocess, CaptureLimitsKeepStdoutHeadAndStderrTail) {
  ProcessOptions o;
  o.max_capture_bytes = 1000;
  const ProcessResult r = sh("i=0; while [ $i -lt 500 ]; do echo \"line $i\"; echo \"err $i\" >&2; i=$((i+1)); done", o);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r.stdout_text.rfind("line 0\n", 0), 0u);
  EXPECT_NE(r.stdout_text.find("truncated"), std::string::npos);
  EXPECT_LE(r.stderr_text.size(), 1000u);
  EXPECT_NE(r.stderr_text.find("err 499\n"), std::string::npos);
  EXPECT_EQ(r.stderr_text.find("err 0\n"), std::string::npos);
}

TEST(Subprocess, OutputFilesAndWorkingDirectory) {
  TempDir dir("fc_subprocess_test");
  std::filesystem::create_directory(dir.file("work"));
  ProcessOptions o;
  o.working_dir = dir.file("work");
  o.stdout_path = dir.file("out.txt");
  o.stderr_path = dir.file("err.txt");
  const ProcessResult r = sh("pwd; echo problem >&2; echo made > here.txt", o);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r.stdout_text, "");
  EXPECT_EQ(read_text_file(dir.file("out.txt")), std::filesystem::canonical(dir.file("work")).string() + "\n");
  EXPECT_EQ(read_text_file(dir.file("err.txt")), "problem\n");
  EXPECT_EQ(r.stderr_text, "problem\n");  // the file's tail, for messages
  EXPECT_EQ(read_text_file(dir.file("work/here.txt")), "made\n");

  o.working_dir = dir.file("no_such_dir");
  EXPECT_NE(error_of([&] { sh("true", o); }).find("cannot enter working directory " + dir.file("no_such_dir")),
            std::string::npos);
}

TEST(Subprocess, TimeoutKillsTheProcessGroup) {
  TempDir dir("fc_subprocess_test");
  ProcessOptions o;
  o.timeout_s = 0.3;
  // The shell starts a child 'sleep' and then waits: both must die, so the marker never appears.
  const auto t0 = std::chrono::steady_clock::now();
  const ProcessResult r = sh("sleep 5; echo late > " + dir.file("marker"), o);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_TRUE(r.timed_out);
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(r.signal, SIGTERM);
  EXPECT_LT(s, 3.0);
  EXPECT_GE(s, 0.3);
  EXPECT_FALSE(std::filesystem::exists(dir.file("marker")));

  // A program that ignores SIGTERM is killed after the grace period.
  o.kill_grace_s = 0.2;
  const ProcessResult r2 = sh("trap '' TERM; sleep 5", o);
  EXPECT_TRUE(r2.timed_out);
  EXPECT_EQ(r2.signal, SIGKILL);

  const std::string e = error_of([&] { run_checked({"sleep", "5"}, o); });
  EXPECT_NE(e.find("sleep failed (timed out after 0.3 s"), std::string::npos) << e;
}

TEST(Subprocess, MissingProgramNamesItAndTheInstallHint) {
  ProcessOptions o;
  o.install_hint = "install hmmer";
  EXPECT_EQ(error_of([&] { run_process({"foldcore_no_such_tool_x", "-h"}, o); }),
            "foldcore_no_such_tool_x not found in PATH; install hmmer");
  EXPECT_EQ(error_of([&] { run_process({"/nonexistent/dir/jackhmmer"}, o); }),
            "/nonexistent/dir/jackhmmer is not an executable file; install hmmer");
  EXPECT_EQ(find_program("foldcore_no_such_tool_x"), "");
  const std::string empty_path = "/nonexistent";
  EXPECT_EQ(find_program("sh", &empty_path), "");
  EXPECT_NE(find_program("sh"), "");
}

TEST(Subprocess, RunCheckedReportsExitStatusAndStderrTail) {
  std::string script = "i=0; while [ $i -lt 50 ]; do echo \"log line $i\" >&2; i=$((i+1)); done; "
                       "echo 'FATAL: database broken' >&2; exit 2";
  const std::string e = error_of([&] { run_checked({"/bin/sh", "-c", script}); });
  EXPECT_NE(e.find("/bin/sh failed (exit status 2)"), std::string::npos) << e;
  EXPECT_NE(e.find("FATAL: database broken"), std::string::npos);
  EXPECT_NE(e.find("log line 49"), std::string::npos);
  EXPECT_EQ(e.find("log line 1\n"), std::string::npos);  // only the tail
  EXPECT_NE(error_of([] { run_checked({"/bin/sh", "-c", "kill -9 $$"}); }).find("killed by signal 9"),
            std::string::npos);
  EXPECT_EQ(run_checked({"/bin/sh", "-c", "echo fine"}).stdout_text, "fine\n");
}

TEST(Subprocess, HelpersFormatCommandsAndTails) {
  EXPECT_EQ(format_command({"jackhmmer", "-A", "a b.sto", "it's"}), "jackhmmer -A 'a b.sto' 'it'\\''s'");
  EXPECT_EQ(tail_lines("a\nb\nc\nd\n", 2), "...c\nd");
  EXPECT_EQ(tail_lines("a\nb", 5), "a\nb");
  EXPECT_EQ(tail_lines("", 5), "");
}

TEST(Subprocess, TempDirIsRemoved) {
  std::string path;
  {
    TempDir d("fc_tmp_test");
    path = d.path();
    write_file_atomic(d.file("x.txt"), "x");
    EXPECT_TRUE(std::filesystem::is_directory(path));
  }
  EXPECT_FALSE(std::filesystem::exists(path));
}

}  // namespace
}  // namespace foldcore::data
