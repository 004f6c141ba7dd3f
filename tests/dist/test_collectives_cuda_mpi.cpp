// The NCCL backend on CUDA tensors against the same locally computed references as the MPI tests
// (ctest label "gpu"). Skips without CUDA devices, and with fewer GPUs than ranks (NCCL allows one
// rank per GPU). Registered with -np 1 (any GPU machine) and -np 2.
#include <gtest/gtest.h>

#include <cmath>

#include "dist_test_util.h"
#include "test_util.h"

namespace foldcore::testing {
namespace {

std::unique_ptr<dist::Communicator> nccl_world() {
  auto& rt = mpi_runtime();
  if (cuda_device_count() < rt.local_size()) return nullptr;
  return rt.world(rt.device(DeviceType::cuda));
}

Tensor on_gpu(const Tensor& t, Device d) { return t.to(d); }

TEST(NcclCollectives, AllMatchTheReference) {
  auto world = nccl_world();
  if (!world) GTEST_SKIP() << "needs one CUDA device per rank";
  EXPECT_EQ(world->backend(), "nccl");
  const Device dev = world->device();
  const int P = world->size(), me = world->rank();
  for (DType dtype : {DType::f32, DType::bf16})
    for (int64_t n : {int64_t{1}, int64_t{7}, int64_t{40961}}) {
      SCOPED_TRACE(::testing::Message() << dtype_name(dtype) << " n=" << n);
      const double tol = dtype == DType::bf16 ? 1.0 / 64 : 1e-5;
      // all_reduce (async, then a host copy ordered after the wait on the current stream)
      Tensor t = on_gpu(Tensor::from_vector(rank_values(1, me, n), {n}, dtype), dev);
      world->all_reduce_async(t).wait();
      std::vector<float> want(static_cast<size_t>(n), 0.f);
      for (int r = 0; r < P; ++r) {
        const auto v = Tensor::from_vector(rank_values(1, r, n), {n}, dtype).to(DType::f32).to_vector();
        for (size_t i = 0; i < want.size(); ++i) want[i] += v[i];
      }
      FC_EXPECT_CLOSE(t.to(Device::cpu()).to(DType::f32), Tensor::from_vector(want, {n}), tol, tol);
      // all_gather and all_to_all are exact
      Tensor in = on_gpu(Tensor::from_vector(rank_values(2, me, n * P), {n * P}, dtype), dev);
      Tensor gathered = Tensor::empty({n * P * P}, dtype, dev);
      world->all_gather(in, gathered);
      Tensor swapped = Tensor::empty({n * P}, dtype, dev);
      world->all_to_all(in, swapped);
      const auto g = gathered.to(Device::cpu()).to(DType::f32).to_vector();
      const auto s = swapped.to(Device::cpu()).to(DType::f32).to_vector();
      for (int r = 0; r < P; ++r) {
        const auto v = Tensor::from_vector(rank_values(2, r, n * P), {n * P}, dtype).to(DType::f32).to_vector();
        for (int64_t i = 0; i < n * P; ++i) EXPECT_EQ(g[static_cast<size_t>(r * n * P + i)], v[static_cast<size_t>(i)]);
        for (int64_t i = 0; i < n; ++i) EXPECT_EQ(s[static_cast<size_t>(r * n + i)], v[static_cast<size_t>(me * n + i)]);
      }
      // reduce_scatter of the gathered data: block r of the sum is P × rank r's input
      Tensor part = Tensor::empty({n * P}, dtype, dev);
      world->reduce_scatter(gathered, part);
      const auto mine = Tensor::from_vector(rank_values(2, me, n * P), {n * P}, dtype).to(DType::f32).to_vector();
      const auto p = part.to(Device::cpu()).to(DType::f32).to_vector();
      for (size_t i = 0; i < p.size(); ++i) EXPECT_NEAR(p[i], P * mine[i], tol * (1 + std::abs(P * mine[i])));
      // broadcast from the last rank
      Tensor b = on_gpu(Tensor::from_vector(rank_values(3, me, n), {n}, dtype), dev);
      world->broadcast(b, P - 1);
      EXPECT_EQ(b.to(Device::cpu()).to(DType::f32).to_vector(),
                Tensor::from_vector(rank_values(3, P - 1, n), {n}, dtype).to(DType::f32).to_vector());
    }
  world->barrier();
}

}  // namespace
}  // namespace foldcore::testing
