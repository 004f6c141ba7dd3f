// `mpirun -np N foldcore predict --dap N` (DAP over N ranks, rank 0 writes) gives the same
// structure and confidences as one process: the tiny preset with random parameters on a
// 37-residue chain (not divisible by 2 or 4: the padding path), 1 recycle. PDB and confidence JSON
// files compare byte for byte (models/alphafold/parallel/model_parallel.h: the DAP forward computes the
// same sums; tests/dist/test_af2_model_parallel_mpi.cpp checks the arrays). Also: a wrong process
// count, and a build without MPI, are clear errors.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#if defined(FOLDCORE_HAVE_DATA)  // predict needs the data pipeline
#include "apps_test_util.h"

namespace foldcore {
namespace {

namespace fs = std::filesystem;

using apps_test::foldcore_binary;
using CommandRun = apps_test::RunResult;
CommandRun run(const std::string& cmd) { return apps_test::run_shell(cmd); }

struct Dir {
  fs::path path;
  explicit Dir(const std::string& name) : path(fs::temp_directory_path() / (name + std::to_string(::getpid()))) {
    fs::remove_all(path);
    fs::create_directories(path);
    std::ofstream(path / "t.fasta") << ">t\nMKTAYIAKQRQISFVKSHFSRQLEERLGLIEVQAPILS\n";
  }
  ~Dir() { fs::remove_all(path); }
  std::string args(const std::string& out) const {
    return " predict --fasta_paths " + (path / "t.fasta").string() + " --output_dir " + (path / out).string() +
           " --model_names tiny --model_config " FOLDCORE_SOURCE_DIR "/configs/model/tiny.yaml --random_params 3"
           " --num_recycles 1";
  }
};

#if defined(FOLDCORE_MPIEXEC)
std::string slurp(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

TEST(PredictDap, RanksGiveTheOneProcessPrediction) {
  const Dir d("fc_predict_dap");
  const CommandRun one = run("OMP_NUM_THREADS=1 " + foldcore_binary() + d.args("one"));
  ASSERT_EQ(one.status, 0) << one.output;
  for (int n : {2, 4}) {
    SCOPED_TRACE("--dap " + std::to_string(n));
    const std::string out = "dap" + std::to_string(n);
    const CommandRun dap = run("OMP_NUM_THREADS=1 OMPI_MCA_mpi_yield_when_idle=1 timeout -s KILL 300 " FOLDCORE_MPIEXEC
                               " --oversubscribe --allow-run-as-root -n " + std::to_string(n) + " " +
                               foldcore_binary() + d.args(out) + " --dap " + std::to_string(n));
    ASSERT_EQ(dap.status, 0) << dap.output;
    for (const char* f : {"unrelaxed_tiny_pred_0.pdb", "confidence_tiny.json", "pae_tiny.json", "ranking_debug.json"}) {
      const std::string a = slurp(d.path / "one" / "t" / f), b = slurp(d.path / out / "t" / f);
      EXPECT_FALSE(a.empty()) << f;
      EXPECT_EQ(a, b) << f;
    }
    EXPECT_TRUE(fs::exists(d.path / out / "t" / "done"));
  }
}

TEST(PredictDap, WrongProcessCountIsAClearError) {
  const Dir d("fc_predict_dap_err");
  const CommandRun r = run(foldcore_binary() + d.args("x") + " --dap 3");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.output.find("predict --dap 3: this job has 1 processes"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(d.path / "x" / "t"));
}
#else
TEST(PredictDap, BuildWithoutMpiRefusesDap) {
  const Dir d("fc_predict_dap_nompi");
  const CommandRun r = run(foldcore_binary() + d.args("x") + " --dap 2");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.output.find("built without MPI"), std::string::npos) << r.output;
}
#endif

}  // namespace
}  // namespace foldcore
#endif
