// Runtime: the process's place in a distributed job. Owns MPI's lifetime (MPI_Init_thread …
// MPI_Finalize), reads the launcher's environment, maps the local rank to a device, makes world
// communicators, and installs the failure reporting the watchdog relies on.
//
//   dist::Runtime rt(argc, argv);                       // once, first thing in main
//   auto world = rt.world(Device::cpu());                // MPI; rt.world(rt.device(DeviceType::cuda)): NCCL
//                                                        // (or MPI staged through host copies, below)
//   dist::ProcessGrid grid(*world, {.dp = 2, .dap = 2}); // dist/process_grid.h
//
// One Runtime per process (MPI can be initialised once): a second is an Error. Works without a
// launcher too (a single process, rank 0 of 1).
//
// Failure handling: a collective stuck longer than timeout_seconds ends the job with a message
// (communicator.h). When a peer dies, Open MPI's launcher terminates the survivors with SIGTERM;
// the handler installed here prints "rank R of W terminated … while in <collective>" to stderr and
// exits with status 143 (128 + SIGTERM) instead of vanishing silently.
#pragma once

#include <memory>

#include "core/device.h"
#include "dist/communicator.h"
#include "dist/launch_env.h"

namespace foldcore::dist {

struct RuntimeOptions {
  // Watchdog limit per collective, seconds. 0: FOLDCORE_COMM_TIMEOUT_S from the environment,
  // else 600 (AlphaFold's first steps compile nothing, but checkpoint loading on rank 0 can be slow).
  double timeout_seconds = 0;
  bool handle_signals = true;  // install the SIGTERM/SIGINT report
};

class Runtime {
 public:
  Runtime(int& argc, char**& argv, const RuntimeOptions& options = {});
  ~Runtime();
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  int rank() const { return env_.rank; }
  int size() const { return env_.world_size; }
  int local_rank() const { return env_.local_rank; }
  int local_size() const { return env_.local_size; }
  const LaunchEnv& env() const { return env_; }  // sizes and local rank completed from MPI
  double timeout_seconds() const { return timeout_; }

  // The device this rank drives: CPU, or GPU local_rank mod visible GPUs (launch_env.h).
  Device device(DeviceType kind) const;
  // All ranks, for tensors on `device`: MPI for the CPU. For CUDA: NCCL when the build has it and
  // every rank has a GPU of its own (visible GPUs ≥ ranks on the node, on every node), else MPI
  // staged through host copies (make_staged_communicator: several ranks sharing one GPU, builds
  // without NCCL); FOLDCORE_CUDA_COMM=nccl|mpi in the environment forces one (nccl without NCCL in
  // the build is an Error). Collective: every rank calls it with the same device kind.
  std::unique_ptr<Communicator> world(Device device) const;

 private:
  LaunchEnv env_;
  double timeout_ = 600;
};

}  // namespace foldcore::dist
