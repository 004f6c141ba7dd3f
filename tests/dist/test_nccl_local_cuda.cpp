// The single-process NCCL communicator (dist::make_local_nccl_communicator, no MPI): every
// collective through NCCL on the device with one rank, where it must return its input (sums and
// extrema over one rank, gathers and scatters of one block, a broadcast from itself); the
// asynchronous handles ordered after the caller's stream; split; argument errors; the watchdog
// ending the process when a collective cannot complete. Built wherever NCCL is (the GPU machine's
// portable build has no MPI); ctest label "gpu", skips without a device.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <chrono>
#include <thread>
#include <vector>

#include "core/device.h"
#include "core/error.h"
#include "core/stream.h"
#include "core/tensor.h"
#include "dist/communicator.h"
#include "test_util.h"

namespace foldcore::testing {
namespace {

std::vector<float> values(int64_t n, float base) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = base + 0.25f * static_cast<float>(i % 97) - 7.f;
  return v;
}

void expect_equal(const Tensor& got, const std::vector<float>& want, const char* what) {
  const auto g = got.to(Device::cpu()).to(DType::f32).to_vector();
  ASSERT_EQ(g.size(), want.size()) << what;
  for (size_t i = 0; i < g.size(); ++i) ASSERT_EQ(g[i], want[i]) << what << " at " << i;
}

TEST(NcclLocal, EveryCollectiveReturnsItsInputAtOneRank) {
  FC_REQUIRE_CUDA();
  const Device dev = Device::cuda(0);
  auto comm = dist::make_local_nccl_communicator(dev, "local");
  EXPECT_EQ(comm->backend(), "nccl");
  EXPECT_EQ(comm->rank(), 0);
  EXPECT_EQ(comm->size(), 1);
  EXPECT_EQ(comm->device(), dev);
  // bf16 holds these values exactly (multiples of 1/4 below 32 in magnitude), so every result is exact.
  for (DType dt : {DType::f32, DType::bf16})
    for (int64_t n : {int64_t{1}, int64_t{7}, int64_t{40961}}) {
      SCOPED_TRACE(::testing::Message() << dtype_name(dt) << " n=" << n);
      const std::vector<float> v = values(n, 1.f);
      const std::vector<float> want = Tensor::from_vector(v, {n}, dt).to(DType::f32).to_vector();
      for (dist::ReduceOp op : {dist::ReduceOp::sum, dist::ReduceOp::max, dist::ReduceOp::min}) {
        Tensor t = Tensor::from_vector(v, {n}, dt, dev);
        comm->all_reduce(t, op);
        expect_equal(t, want, "all_reduce");
      }
      const Tensor in = Tensor::from_vector(v, {n}, dt, dev);
      Tensor out = Tensor::full({n}, 99.0, dt, dev);
      comm->reduce_scatter(in, out);
      expect_equal(out, want, "reduce_scatter");
      out.fill_(99.0);
      comm->all_gather(in, out);
      expect_equal(out, want, "all_gather");
      out.fill_(99.0);
      comm->all_to_all(in, out);
      expect_equal(out, want, "all_to_all");
      Tensor b = Tensor::from_vector(v, {n}, dt, dev);
      comm->broadcast(b, 0);
      expect_equal(b, want, "broadcast");
    }
  Tensor i64 = Tensor::from_vector_i64({5, -3, 1LL << 40}, {3}, DType::i64, dev);
  comm->all_reduce(i64);
  EXPECT_EQ(i64.to(Device::cpu()).to_vector_i64(), (std::vector<int64_t>{5, -3, 1LL << 40}));
  comm->barrier();
}

TEST(NcclLocal, AsyncHandlesRunAfterTheCallersStream) {
  FC_REQUIRE_CUDA();
  const Device dev = Device::cuda(0);
  auto comm = dist::make_local_nccl_communicator(dev);
  const int64_t n = 1 << 20;
  Tensor t = Tensor::zeros({n}, DType::f32, dev);
  t.fill_(3.0);  // queued on the current stream before the collective
  dist::CommHandle h = comm->all_reduce_async(t);
  h.wait();  // the current stream now waits for the collective
  Tensor u = t.clone();  // queued after the wait
  synchronize(dev);
  EXPECT_TRUE(h.test());
  const auto host = u.to(Device::cpu()).to_vector();
  EXPECT_EQ(host.front(), 3.f);
  EXPECT_EQ(host.back(), 3.f);
  // Several handles in flight, waited in reverse order.
  std::vector<Tensor> ts;
  std::vector<dist::CommHandle> hs;
  for (int k = 0; k < 4; ++k) {
    ts.push_back(Tensor::full({4096}, static_cast<double>(k), DType::f32, dev));
    hs.push_back(comm->all_reduce_async(ts.back()));
  }
  for (int k = 3; k >= 0; --k) hs[static_cast<size_t>(k)].wait();
  for (int k = 0; k < 4; ++k) EXPECT_EQ(ts[static_cast<size_t>(k)].to(Device::cpu()).to_vector()[17], static_cast<float>(k));
}

TEST(NcclLocal, SplitGivesAWorkingOneRankCommunicator) {
  FC_REQUIRE_CUDA();
  auto comm = dist::make_local_nccl_communicator(Device::cuda(0));
  auto sub = comm->split(3, 0, "sub");
  EXPECT_EQ(sub->size(), 1);
  EXPECT_EQ(sub->name(), "sub");
  Tensor t = Tensor::full({33}, 1.5, DType::f32, Device::cuda(0));
  sub->all_reduce(t);
  EXPECT_EQ(t.to(Device::cpu()).to_vector()[32], 1.5f);
}

TEST(NcclLocal, BadArgumentsAreErrorsNamingTheCommunicator) {
  FC_REQUIRE_CUDA();
  auto comm = dist::make_local_nccl_communicator(Device::cuda(0), "checked");
  Tensor host = Tensor::zeros({4}, DType::f32);
  try {
    comm->all_reduce(host);
    FAIL() << "a CPU tensor was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'checked'"), std::string::npos) << e.what();
  }
  EXPECT_THROW(comm->broadcast(Tensor::zeros({4}, DType::f32, Device::cuda(0)), 1), Error);  // no rank 1
  EXPECT_THROW(dist::make_local_nccl_communicator(Device::cpu()), Error);
}

// A host function that never returns holds the caller's stream, so the collective launched after
// it (its NCCL stream waits for the caller's) cannot complete: a hang on the device, as a dead peer
// makes one. The communicator's watchdog (1 s here) must end the process with code 3, naming it.
void CUDART_CB hold_stream_forever(void*) {
  while (true) std::this_thread::sleep_for(std::chrono::seconds(1));
}

TEST(NcclLocalDeathTest, WatchdogEndsTheProcessWhenACollectiveHangsOnTheDevice) {
  FC_REQUIRE_CUDA();
  GTEST_FLAG_SET(death_test_style, "threadsafe");  // the child re-runs this binary: CUDA starts afresh
  EXPECT_EXIT(
      {
        const Device dev = Device::cuda(0);
        auto comm = dist::make_local_nccl_communicator(dev, "stuck", /*timeout_s=*/1.0);
        Tensor t = Tensor::full({1024}, 2.0, DType::f32, dev);
        cudaLaunchHostFunc(static_cast<cudaStream_t>(current_stream(dev).native()), hold_stream_forever, nullptr);
        dist::CommHandle h = comm->all_reduce_async(t);
        h.wait();  // returns: NCCL's wait orders the stream, it does not block the host
        std::this_thread::sleep_for(std::chrono::seconds(60));
        std::exit(0);  // not reached: the watchdog fired
      },
      ::testing::ExitedWithCode(3),
      "rank 0 of 1: all_reduce on communicator 'stuck' \\(4096 bytes\\) did not complete within 1 s");
}

}  // namespace
}  // namespace foldcore::testing
