// The MPI job of `foldcore predict|train_step --dap N` (builds with MPI only): the launch checked
// against the launcher's environment before MPI starts (a wrong launch is a plain error), the MPI
// runtime, the world communicator on this rank's device (CUDA: the local rank's GPU) and the
// model's DAP group over it. Torn down in reverse order.
#pragma once

#if defined(FOLDCORE_HAVE_MPI)
#include <memory>
#include <string>

#include "core/device.h"
#include "core/error.h"
#include "dist/launch_env.h"
#include "dist/runtime.h"
#include "models/alphafold/parallel/model_parallel_dist.h"

namespace foldcore::apps {

struct DapJob {
  std::unique_ptr<dist::Runtime> runtime;
  std::unique_ptr<dist::Communicator> world;
  af2::ModelParallel model_parallel;

  // command: "predict" or "train_step"; device: updated to the rank's GPU for CUDA.
  DapJob(const std::string& command, int64_t dap, Device& device) {
    const dist::LaunchEnv env = dist::detect_launch_env();
    FC_CHECK(env.world_size == dap, command, " --dap ", dap, ": this job has ", env.world_size,
             " processes; launch it as mpirun -np ", dap, " foldcore ", command, " … --dap ", dap);
    int argc = 0;
    char** argv = nullptr;  // MPI_Init_thread accepts no arguments
    runtime = std::make_unique<dist::Runtime>(argc, argv);
    if (device.is_cuda()) {
      device = runtime->device(DeviceType::cuda);
      set_device(device);
    }
    world = runtime->world(device);
    model_parallel = af2::make_model_parallel(world.get(), nullptr);
  }
  bool writes_outputs() const { return world->rank() == 0; }
};

}  // namespace foldcore::apps
#endif
