// A 2-rank job where one rank dies (SIGKILL) or hangs mid-run: the job must end within the
// watchdog timeout, non-zero, with messages naming the failed rank and the collective the survivor
// was in. Launches mpirun on tests/dist/dist_fault_helper.cpp and watches the whole job.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <chrono>
#include <cstdio>
#include <string>

namespace {

struct JobResult {
  int status = -1;  // exit status of the launcher (after `timeout`)
  double seconds = 0;
  std::string output;
};

// Runs the helper under mpirun; `timeout -s KILL` bounds the test even if everything hangs.
JobResult run_job(const std::string& mode, int victim, int watchdog_s) {
  const std::string cmd = "FOLDCORE_COMM_TIMEOUT_S=" + std::to_string(watchdog_s) +
                          " OMPI_MCA_mpi_yield_when_idle=1 OMP_NUM_THREADS=1 timeout -s KILL 100 " FOLDCORE_MPIEXEC
                          " --oversubscribe --allow-run-as-root -n 2 " FOLDCORE_FAULT_HELPER " " +
                          mode + " " + std::to_string(victim) + " 2>&1";
  JobResult r;
  const auto start = std::chrono::steady_clock::now();
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return r;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) r.output.append(buf, n);
  const int st = pclose(p);
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  return r;
}

bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

TEST(FaultTolerance, KilledRankEndsTheJobWithAClearMessage) {
  const int watchdog_s = 20;
  const JobResult r = run_job("kill", 1, watchdog_s);
  SCOPED_TRACE(r.output);
  EXPECT_NE(r.status, 0);
  EXPECT_LT(r.seconds, watchdog_s + 10.0);
  // The launcher names the dead rank; the survivor says what it was doing when it was ended.
  EXPECT_TRUE(has(r.output, "rank 1")) << "no message names the killed rank";
  EXPECT_TRUE(has(r.output, "foldcore: rank 0 of 2")) << "the survivor printed nothing";
  EXPECT_TRUE(has(r.output, "all_reduce on communicator 'world'"));
}

TEST(FaultTolerance, HungRankTripsTheWatchdog) {
  const int watchdog_s = 3;
  const JobResult r = run_job("hang", 1, watchdog_s);
  SCOPED_TRACE(r.output);
  EXPECT_EQ(r.status, 3) << "the watchdog aborts with code 3";
  EXPECT_GE(r.seconds, watchdog_s - 0.5) << "ended before the timeout: the watchdog did not wait";
  EXPECT_LT(r.seconds, watchdog_s + 20.0);
  EXPECT_TRUE(has(r.output, "foldcore: rank 0 of 2: all_reduce on communicator 'world'"));
  EXPECT_TRUE(has(r.output, "did not complete within 3 s"));
}

}  // namespace
