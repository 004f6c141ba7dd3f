// Launcher environment detection (Open MPI, Slurm, PMIx, PMI, none) and the local rank → device
// rule, from fake environments.
#include <gtest/gtest.h>

#include <map>

#include "core/error.h"
#include "dist/launch_env.h"

namespace foldcore::dist {
namespace {

LaunchEnv detect(const std::map<std::string, std::string>& vars) {
  return detect_launch_env([&](const std::string& k) -> std::optional<std::string> {
    const auto it = vars.find(k);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  });
}

TEST(LaunchEnv, NoLauncherIsOneProcess) {
  const LaunchEnv e = detect({});
  EXPECT_EQ(e.source, "none");
  EXPECT_EQ(e.rank, 0);
  EXPECT_EQ(e.world_size, 1);
}

TEST(LaunchEnv, OpenMpi) {
  const LaunchEnv e = detect({{"OMPI_COMM_WORLD_RANK", "5"}, {"OMPI_COMM_WORLD_SIZE", "8"},
                              {"OMPI_COMM_WORLD_LOCAL_RANK", "1"}, {"OMPI_COMM_WORLD_LOCAL_SIZE", "4"},
                              {"SLURM_PROCID", "0"}});  // mpirun inside an allocation: Open MPI wins
  EXPECT_EQ(e.source, "openmpi");
  EXPECT_EQ(e.rank, 5);
  EXPECT_EQ(e.world_size, 8);
  EXPECT_EQ(e.local_rank, 1);
  EXPECT_EQ(e.local_size, 4);
}

TEST(LaunchEnv, Slurm) {
  const LaunchEnv e = detect({{"SLURM_PROCID", "3"}, {"SLURM_NTASKS", "4"}, {"SLURM_LOCALID", "1"},
                              {"SLURM_NTASKS_PER_NODE", "2"}});
  EXPECT_EQ(e.source, "slurm");
  EXPECT_EQ(e.rank, 3);
  EXPECT_EQ(e.world_size, 4);
  EXPECT_EQ(e.local_rank, 1);
  EXPECT_EQ(e.local_size, 2);
  // Heterogeneous layouts ("2(x3)") leave the local size to MPI.
  EXPECT_EQ(detect({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "6"}, {"SLURM_NTASKS_PER_NODE", "2(x3)"}}).local_size, -1);
}

TEST(LaunchEnv, PmixAndPmi) {
  const LaunchEnv x = detect({{"PMIX_RANK", "2"}, {"PMI_SIZE", "3"}});
  EXPECT_EQ(x.source, "pmix");
  EXPECT_EQ(x.rank, 2);
  EXPECT_EQ(x.world_size, 3);
  EXPECT_EQ(x.local_rank, -1);  // filled in from MPI by the runtime
  const LaunchEnv p = detect({{"PMI_RANK", "1"}, {"PMI_SIZE", "2"}, {"MPI_LOCALRANKID", "1"}, {"MPI_LOCALNRANKS", "2"}});
  EXPECT_EQ(p.source, "pmi");
  EXPECT_EQ(p.local_rank, 1);
  EXPECT_EQ(p.local_size, 2);
}

TEST(LaunchEnv, MalformedValuesAreErrorsNamingTheVariable) {
  try {
    detect({{"OMPI_COMM_WORLD_RANK", "x1"}});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("OMPI_COMM_WORLD_RANK='x1'"), std::string::npos) << e.what();
  }
  EXPECT_THROW(detect({{"SLURM_PROCID", "4"}, {"SLURM_NTASKS", "4"}}), Error);
  EXPECT_THROW(detect({{"PMI_RANK", "-1"}}), Error);
  EXPECT_THROW(detect({{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_LOCAL_RANK", "2"},
                       {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}}),
               Error);
}

TEST(LaunchEnv, LocalRankPicksTheGpu) {
  EXPECT_EQ(device_for_local_rank(DeviceType::cpu, 3, 0), Device::cpu());
  EXPECT_EQ(device_for_local_rank(DeviceType::cuda, 3, 8), Device::cuda(3));
  EXPECT_EQ(device_for_local_rank(DeviceType::cuda, 9, 8), Device::cuda(1));
  EXPECT_THROW(device_for_local_rank(DeviceType::cuda, 0, 0), Error);
  EXPECT_THROW(device_for_local_rank(DeviceType::cuda, -1, 2), Error);
}

}  // namespace
}  // namespace foldcore::dist
