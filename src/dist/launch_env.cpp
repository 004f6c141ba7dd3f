#include "dist/launch_env.h"

#include <cstdlib>

#include "core/error.h"

namespace foldcore::dist {
namespace {

using Getenv = std::function<std::optional<std::string>(const std::string&)>;

int parse_count(const std::string& name, const std::string& text) {
  size_t used = 0;
  long v = -1;
  try {
    v = std::stol(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != text.size() || used == 0 || v < 0 || v > (1L << 30))
    FC_THROW("launcher environment: ", name, "='", text, "' is not a non-negative integer");
  return static_cast<int>(v);
}

std::optional<int> read(const Getenv& env, const std::string& name) {
  const auto v = env(name);
  if (!v || v->empty()) return std::nullopt;
  return parse_count(name, *v);
}

}  // namespace

LaunchEnv detect_launch_env(const Getenv& env) {
  LaunchEnv e;
  std::string rank_var, size_var;
  if (auto r = read(env, "OMPI_COMM_WORLD_RANK")) {
    e.source = "openmpi";
    e.rank = *r;
    rank_var = "OMPI_COMM_WORLD_RANK", size_var = "OMPI_COMM_WORLD_SIZE";
    e.world_size = read(env, size_var).value_or(-1);
    e.local_rank = read(env, "OMPI_COMM_WORLD_LOCAL_RANK").value_or(-1);
    e.local_size = read(env, "OMPI_COMM_WORLD_LOCAL_SIZE").value_or(-1);
  } else if (auto r = read(env, "SLURM_PROCID")) {
    e.source = "slurm";
    e.rank = *r;
    rank_var = "SLURM_PROCID", size_var = "SLURM_NTASKS";
    e.world_size = read(env, size_var).value_or(-1);
    e.local_rank = read(env, "SLURM_LOCALID").value_or(-1);
    // SLURM_NTASKS_PER_NODE may be "2(x3)" on heterogeneous layouts: then leave it to MPI.
    if (const auto per_node = env("SLURM_NTASKS_PER_NODE");
        per_node && !per_node->empty() && per_node->find_first_not_of("0123456789") == std::string::npos)
      e.local_size = parse_count("SLURM_NTASKS_PER_NODE", *per_node);
  } else if (auto r = read(env, "PMIX_RANK")) {
    e.source = "pmix";
    e.rank = *r;
    rank_var = "PMIX_RANK";
    size_var = env("OMPI_COMM_WORLD_SIZE") ? "OMPI_COMM_WORLD_SIZE" : "PMI_SIZE";
    e.world_size = read(env, size_var).value_or(-1);
  } else if (auto r = read(env, "PMI_RANK")) {
    e.source = "pmi";
    e.rank = *r;
    rank_var = "PMI_RANK", size_var = "PMI_SIZE";
    e.world_size = read(env, size_var).value_or(-1);
    e.local_rank = read(env, "MPI_LOCALRANKID").value_or(-1);
    e.local_size = read(env, "MPI_LOCALNRANKS").value_or(-1);
  } else {
    return e;  // not launched: one process
  }
  // A size the launcher did not give is learnt from MPI after initialisation (-1 until then).
  if (e.world_size >= 0)
    FC_CHECK(e.rank < e.world_size, "launcher environment: ", rank_var, "=", e.rank, " is not below ", size_var,
             "=", e.world_size);
  if (e.local_rank >= 0 && e.local_size >= 0)
    FC_CHECK(e.local_rank < e.local_size, "launcher environment (", e.source, "): local rank ", e.local_rank,
             " is not below the local size ", e.local_size);
  return e;
}

LaunchEnv detect_launch_env() {
  return detect_launch_env([](const std::string& name) -> std::optional<std::string> {
    const char* v = std::getenv(name.c_str());
    if (!v) return std::nullopt;
    return std::string(v);
  });
}

Device device_for_local_rank(DeviceType kind, int local_rank, int num_gpus) {
  if (kind == DeviceType::cpu) return Device::cpu();
  FC_CHECK(num_gpus > 0, "rank with local rank ", local_rank, " asked for a CUDA device but none is visible");
  FC_CHECK(local_rank >= 0, "local rank ", local_rank, " is unknown: cannot pick a GPU");
  return Device::cuda(local_rank % num_gpus);
}

}  // namespace foldcore::dist
