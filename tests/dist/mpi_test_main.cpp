// The main of the tests/dist/*_mpi.cpp executables, which ctest runs under mpirun (-np 2 and 4):
// one dist::Runtime for the process, the CPU world communicator for the tests, and output from
// rank 0 only, except failures, which every rank prints with its rank (a failure on rank 3 must
// not be silent). Each rank's exit status is its own result, so mpirun fails if any rank fails.
#include <gtest/gtest.h>

#include <cstdio>

#include "dist/runtime.h"
#include "dist_test_util.h"

namespace foldcore::testing {
namespace {

dist::Runtime* g_runtime = nullptr;
dist::Communicator* g_world = nullptr;

class RankFailurePrinter : public ::testing::EmptyTestEventListener {
 public:
  explicit RankFailurePrinter(int rank) : rank_(rank) {}
  void OnTestPartResult(const ::testing::TestPartResult& r) override {
    if (!r.failed()) return;
    std::fprintf(stderr, "[rank %d] %s:%d: failure\n%s\n", rank_, r.file_name() ? r.file_name() : "?",
                 r.line_number(), r.summary());
  }

 private:
  int rank_;
};

}  // namespace

dist::Runtime& mpi_runtime() { return *g_runtime; }
dist::Communicator& mpi_world() { return *g_world; }

}  // namespace foldcore::testing

int main(int argc, char** argv) {
  foldcore::dist::Runtime runtime(argc, argv);
  ::testing::InitGoogleTest(&argc, argv);
  int result = 1;
  {
    auto world = runtime.world(foldcore::Device::cpu());
    foldcore::testing::g_runtime = &runtime;
    foldcore::testing::g_world = world.get();
    if (runtime.rank() != 0) {
      auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
      delete listeners.Release(listeners.default_result_printer());
      listeners.Append(new foldcore::testing::RankFailurePrinter(runtime.rank()));
    }
    result = RUN_ALL_TESTS();
    world->barrier();  // no rank finalises while another still runs a test
    foldcore::testing::g_world = nullptr;
  }
  return result;
}
