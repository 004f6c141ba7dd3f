// Internal to src/dist: the MPI-free pieces the backends share (the NCCL backend also builds
// without MPI, for a single-process communicator: make_local_nccl_communicator).
#pragma once

#include <cstddef>
#include <string>

namespace foldcore::dist::detail {

// What a rank is doing, for the watchdog's and the signal handler's messages.
struct OpInfo {
  const char* op = "";             // "all_reduce", …
  const std::string* comm = nullptr;  // communicator name (outlives the operation)
  size_t bytes = 0;
  int peer = -1;                   // send/recv/broadcast root; -1: none
};
std::string describe(const OpInfo& info);

// Seconds on the steady clock (the watchdogs' time base; completion_watchdog.cpp).
double now_seconds();

// Prints "foldcore: rank R of W: <message>" to stderr and ends the whole job: MPI_Abort (code 3)
// in builds with MPI (runtime.cpp), else the process exits with code 3 (comm_fatal_nompi.cpp).
[[noreturn]] void fatal_comm_failure(const std::string& message);
// The same message, then the process exits with code 3 without MPI_Abort: for a thread other than
// the one that calls MPI (the runtime is MPI_THREAD_FUNNELED; MPI_Abort beside an MPI call of the
// main thread may block). The launcher ends the other ranks when this one exits non-zero.
[[noreturn]] void fatal_comm_failure_off_thread(const std::string& message);

}  // namespace foldcore::dist::detail
