// fatal_comm_failure for builds without MPI (comm_internal.h): only the single-process NCCL
// communicator exists there, so there is no job to abort beyond this process.
#include <cstdio>
#include <cstdlib>

#include "dist/comm_internal.h"

namespace foldcore::dist::detail {

void fatal_comm_failure(const std::string& message) {
  std::fprintf(stderr, "foldcore: rank 0 of 1: %s\n", message.c_str());
  std::fflush(stderr);
  std::_Exit(3);
}

void fatal_comm_failure_off_thread(const std::string& message) { fatal_comm_failure(message); }

}  // namespace foldcore::dist::detail
