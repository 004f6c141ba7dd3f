// The communicators of CUDA tensors against the same locally computed references as the MPI tests
// (ctest label "gpu"; on the host emulation "gpu-emu"): the world that Runtime::world gives for a
// CUDA device (NCCL where every rank has a GPU of its own and the build has NCCL, else MPI staged
// through host copies), and the staged backend made explicitly, which runs with any number of
// ranks per GPU: on a one-GPU machine that is how the multi-rank paths run with CUDA tensors.
// Skips without a CUDA device. Registered with -np 1 (any GPU machine) and -np 2.
#include <gtest/gtest.h>

#include <cmath>

#include "dist_test_util.h"
#include "test_util.h"

namespace foldcore::testing {
namespace {

Tensor on_gpu(const Tensor& t, Device d) { return t.to(d); }

// Every collective of `world` (CUDA tensors) in f32 and bf16 at three sizes, against references
// computed from every rank's known inputs.
void check_every_collective(dist::Communicator& world) {
  const Device dev = world.device();
  ASSERT_TRUE(dev.is_cuda());
  const int P = world.size(), me = world.rank();
  for (DType dtype : {DType::f32, DType::bf16})
    for (int64_t n : {int64_t{1}, int64_t{7}, int64_t{40961}}) {
      SCOPED_TRACE(::testing::Message() << dtype_name(dtype) << " n=" << n);
      const double tol = dtype == DType::bf16 ? 1.0 / 64 : 1e-5;
      // all_reduce (async, then a host copy ordered after the wait on the current stream)
      Tensor t = on_gpu(Tensor::from_vector(rank_values(1, me, n), {n}, dtype), dev);
      world.all_reduce_async(t).wait();
      std::vector<float> want(static_cast<size_t>(n), 0.f);
      for (int r = 0; r < P; ++r) {
        const auto v = Tensor::from_vector(rank_values(1, r, n), {n}, dtype).to(DType::f32).to_vector();
        for (size_t i = 0; i < want.size(); ++i) want[i] += v[i];
      }
      FC_EXPECT_CLOSE(t.to(Device::cpu()).to(DType::f32), Tensor::from_vector(want, {n}), tol, tol);
      // all_gather and all_to_all are exact
      Tensor in = on_gpu(Tensor::from_vector(rank_values(2, me, n * P), {n * P}, dtype), dev);
      Tensor gathered = Tensor::empty({n * P * P}, dtype, dev);
      world.all_gather(in, gathered);
      Tensor swapped = Tensor::empty({n * P}, dtype, dev);
      world.all_to_all(in, swapped);
      const auto g = gathered.to(Device::cpu()).to(DType::f32).to_vector();
      const auto s = swapped.to(Device::cpu()).to(DType::f32).to_vector();
      for (int r = 0; r < P; ++r) {
        const auto v = Tensor::from_vector(rank_values(2, r, n * P), {n * P}, dtype).to(DType::f32).to_vector();
        for (int64_t i = 0; i < n * P; ++i) EXPECT_EQ(g[static_cast<size_t>(r * n * P + i)], v[static_cast<size_t>(i)]);
        for (int64_t i = 0; i < n; ++i) EXPECT_EQ(s[static_cast<size_t>(r * n + i)], v[static_cast<size_t>(me * n + i)]);
      }
      // reduce_scatter of the gathered data: block r of the sum is P × rank r's input
      Tensor part = Tensor::empty({n * P}, dtype, dev);
      world.reduce_scatter(gathered, part);
      const auto mine = Tensor::from_vector(rank_values(2, me, n * P), {n * P}, dtype).to(DType::f32).to_vector();
      const auto p = part.to(Device::cpu()).to(DType::f32).to_vector();
      for (size_t i = 0; i < p.size(); ++i) EXPECT_NEAR(p[i], P * mine[i], tol * (1 + std::abs(P * mine[i])));
      // broadcast from the last rank
      Tensor b = on_gpu(Tensor::from_vector(rank_values(3, me, n), {n}, dtype), dev);
      world.broadcast(b, P - 1);
      EXPECT_EQ(b.to(Device::cpu()).to(DType::f32).to_vector(),
                Tensor::from_vector(rank_values(3, P - 1, n), {n}, dtype).to(DType::f32).to_vector());
    }
  world.barrier();
}

TEST(CudaCollectives, TheWorldsBackendFitsTheMachine) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  auto& rt = mpi_runtime();
  auto world = rt.world(rt.device(DeviceType::cuda));
  const std::string backend(world->backend());
  EXPECT_TRUE(backend == "nccl" || backend == "mpi-staged") << backend;
  // Ranks sharing a GPU: NCCL would refuse them, so the world stages through MPI.
  if (cuda_device_count() < rt.local_size()) {
    EXPECT_EQ(backend, "mpi-staged");
  }
  check_every_collective(*world);
}

TEST(CudaCollectives, StagedThroughMpi) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  auto& rt = mpi_runtime();
  const Device dev = rt.device(DeviceType::cuda);
  auto world = dist::make_staged_communicator(rt.world(Device::cpu()), dev);
  EXPECT_EQ(world->backend(), "mpi-staged");
  EXPECT_EQ(world->device(), dev);
  EXPECT_EQ(world->size(), rt.size());
  EXPECT_EQ(world->rank(), rt.rank());
  check_every_collective(*world);

  // Point to point around the ring, async: each rank sends its values to the next and receives the
  // previous rank's; the receive is only complete after wait().
  const int P = world->size(), me = world->rank();
  if (P > 1) {
    const int64_t n = 33;
    Tensor out = on_gpu(Tensor::from_vector(rank_values(4, me, n), {n}, DType::f32), dev);
    Tensor got = Tensor::zeros({n}, DType::f32, dev);
    dist::CommHandle r = world->recv_async(got, (me + P - 1) % P, 5);
    dist::CommHandle s = world->send_async(out, (me + 1) % P, 5);
    s.wait();
    r.wait();
    EXPECT_EQ(got.to(Device::cpu()).to_vector(), rank_values(4, (me + P - 1) % P, n));
  }

  // split: the even and the odd ranks, each a staged communicator of its own.
  auto half = world->split(me % 2, me, "half");
  EXPECT_EQ(half->backend(), "mpi-staged");
  EXPECT_EQ(half->device(), dev);
  EXPECT_EQ(half->size(), (P - me % 2 + 1) / 2);
  check_every_collective(*half);

  // Errors name the communicator and come before any host copy: a CPU tensor on a CUDA communicator.
  Tensor cpu = Tensor::zeros({4}, DType::f32);
  EXPECT_THROW(world->all_reduce(cpu), Error);
  EXPECT_THROW(dist::make_staged_communicator(rt.world(Device::cpu()), Device::cpu()), Error);
}

}  // namespace
}  // namespace foldcore::testing
