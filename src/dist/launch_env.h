// Where this process sits in a launched job, read from the launcher's environment before MPI is
// initialised (so a CUDA device can be chosen first), and the local-rank → device rule.
//
// Sources, first match wins:
//   Open MPI   OMPI_COMM_WORLD_RANK / _SIZE / _LOCAL_RANK / _LOCAL_SIZE
//   Slurm      SLURM_PROCID / SLURM_NTASKS / SLURM_LOCALID (srun; local size from SLURM_NTASKS_PER_NODE
//              when it is a plain number)
//   PMIx       PMIX_RANK (+ OMPI_COMM_WORLD_SIZE or PMI_SIZE for the size)
//   PMI        PMI_RANK / PMI_SIZE, MPI_LOCALRANKID / MPI_LOCALNRANKS (MPICH's Hydra)
//   none       a single process: rank 0 of 1
// A missing local rank is left at -1; the runtime fills it in from MPI's shared-memory split.
#pragma once

#include <functional>
#include <optional>
#include <string>

#include "core/device.h"

namespace foldcore::dist {

struct LaunchEnv {
  int rank = 0;
  int world_size = 1;
  int local_rank = -1;  // -1: not given by the launcher
  int local_size = -1;
  std::string source = "none";  // "openmpi", "slurm", "pmix", "pmi" or "none"
};

// Reads the environment through `getenv` (injectable for tests). Malformed or inconsistent values
// (rank ≥ size, negative numbers, text) are an Error naming the variable.
LaunchEnv detect_launch_env(const std::function<std::optional<std::string>(const std::string&)>& getenv);
LaunchEnv detect_launch_env();  // the process environment

// The device a rank drives: the CPU for kind cpu; for cuda, GPU local_rank mod the number of
// visible GPUs (one rank per GPU is the intended layout; more ranks than GPUs share round-robin).
// `num_gpus` ≤ 0 with kind cuda is an Error.
Device device_for_local_rank(DeviceType kind, int local_rank, int num_gpus);

}  // namespace foldcore::dist
