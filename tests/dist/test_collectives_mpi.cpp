// Every collective of the MPI backend against a naive reference each rank computes from the seeded
// data of all ranks; sync and async forms, odd sizes, f32/bf16/i32/i64. Run with -np 2 and -np 4.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <thread>

#include "core/error.h"
#include "dist_test_util.h"

namespace foldcore::testing {
namespace {

using dist::ReduceOp;

const int64_t kSizes[] = {1, 7, 1023, 40961};

// The value a rank contributes, as the collective sees it (rounded to the tensor's dtype).
float as_dtype(float x, DType t) {
  if (t == DType::bf16) return static_cast<float>(bf16(x));
  if (t == DType::f16) return static_cast<float>(f16(x));
  return x;
}

Tensor rank_tensor(uint64_t seed, int rank, int64_t n, DType dtype) {
  if (dtype == DType::i32 || dtype == DType::i64) return Tensor::from_vector_i64(rank_ints(seed, rank, n), {n}, dtype);
  return Tensor::from_vector(rank_values(seed, rank, n), {n}, dtype);
}

// Reference reduction over ranks of element i, in double, of the dtype-rounded inputs.
std::vector<double> reference_reduce(uint64_t seed, int64_t n, DType dtype, ReduceOp op, int size) {
  std::vector<double> out(static_cast<size_t>(n));
  for (int r = 0; r < size; ++r) {
    const bool ints = dtype == DType::i32 || dtype == DType::i64;
    std::vector<double> v(static_cast<size_t>(n));
    if (ints) {
      const auto x = rank_ints(seed, r, n);
      std::copy(x.begin(), x.end(), v.begin());
    } else {
      const auto x = rank_values(seed, r, n);
      for (size_t i = 0; i < v.size(); ++i) v[i] = as_dtype(x[i], dtype);
    }
    for (size_t i = 0; i < v.size(); ++i) {
      if (r == 0) out[i] = v[i];
      else if (op == ReduceOp::sum) out[i] += v[i];
      else if (op == ReduceOp::max) out[i] = std::max(out[i], v[i]);
      else out[i] = std::min(out[i], v[i]);
    }
  }
  return out;
}

// |got - want| ≤ tol·(1 + |want|); tol 0 for exact dtypes. bf16 results are rounded once at the
// end (fp32 accumulation), so they are within half a bf16 ulp (2^-9 relative) of the exact sum,
// plus fp32 summation error.
void expect_values(const std::vector<float>& got, const std::vector<double>& want, double tol, const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  int bad = 0;
  for (size_t i = 0; i < got.size() && bad < 5; ++i)
    if (!(std::abs(got[i] - want[i]) <= tol * (1 + std::abs(want[i])))) {
      ADD_FAILURE() << what << " [" << i << "]: got " << got[i] << ", want " << want[i];
      ++bad;
    }
}

double tolerance(DType t) {
  if (t == DType::bf16) return 1.0 / 256;
  if (t == DType::f32) return 1e-6;
  return 0;
}

struct Case {
  DType dtype;
  ReduceOp op;
};

TEST(Collectives, AllReduceEveryDtypeOpAndSize) {
  auto& world = mpi_world();
  const Case cases[] = {{DType::f32, ReduceOp::sum}, {DType::f32, ReduceOp::max}, {DType::f32, ReduceOp::min},
                        {DType::bf16, ReduceOp::sum}, {DType::bf16, ReduceOp::max}, {DType::i32, ReduceOp::sum},
                        {DType::i64, ReduceOp::sum},  {DType::i64, ReduceOp::min}};
  uint64_t seed = 100;
  for (const Case& c : cases)
    for (int64_t n : kSizes)
      for (bool async : {false, true}) {
        ++seed;
        Tensor t = rank_tensor(seed, world.rank(), n, c.dtype);
        if (async) {
          dist::CommHandle h = world.all_reduce_async(t, c.op);
          h.wait();
        } else {
          world.all_reduce(t, c.op);
        }
        expect_values(t.to(DType::f32).to_vector(), reference_reduce(seed, n, c.dtype, c.op, world.size()),
                      tolerance(c.dtype), "all_reduce");
      }
}

TEST(Collectives, ManyAsyncInFlightWaitedInReverse) {
  auto& world = mpi_world();
  std::vector<Tensor> ts;
  std::vector<dist::CommHandle> hs;
  for (int k = 0; k < 6; ++k) {
    ts.push_back(rank_tensor(200 + k, world.rank(), 513 + k, DType::f32));
    hs.push_back(world.all_reduce_async(ts.back()));
  }
  // Progress is driven by test() as an overlapping training loop would; then wait, last first.
  for (int spin = 0; spin < 100; ++spin)
    for (auto& h : hs) h.test();
  for (int k = 5; k >= 0; --k) hs[static_cast<size_t>(k)].wait();
  for (int k = 0; k < 6; ++k)
    expect_values(ts[static_cast<size_t>(k)].to_vector(),
                  reference_reduce(200 + k, 513 + k, DType::f32, ReduceOp::sum, world.size()), 1e-6, "async");
}

TEST(Collectives, ReduceScatter) {
  auto& world = mpi_world();
  const int P = world.size();
  uint64_t seed = 300;
  for (DType dtype : {DType::f32, DType::bf16, DType::i64})
    for (int64_t n : {int64_t{1}, int64_t{5}, int64_t{1001}})
      for (bool async : {false, true}) {
        ++seed;
        Tensor in = rank_tensor(seed, world.rank(), n * P, dtype);
        Tensor out = Tensor::empty({n}, dtype);
        if (async) world.reduce_scatter_async(in, out).wait();
        else world.reduce_scatter(in, out);
        const auto full = reference_reduce(seed, n * P, dtype, ReduceOp::sum, P);
        const std::vector<double> mine(full.begin() + world.rank() * n, full.begin() + (world.rank() + 1) * n);
        expect_values(out.to(DType::f32).to_vector(), mine, tolerance(dtype), "reduce_scatter");
      }
}

TEST(Collectives, AllGatherIsExactForEveryDtype) {
  auto& world = mpi_world();
  const int P = world.size();
  uint64_t seed = 400;
  for (DType dtype : {DType::f32, DType::bf16, DType::i32})
    for (int64_t n : {int64_t{1}, int64_t{3}, int64_t{777}})
      for (bool async : {false, true}) {
        ++seed;
        Tensor in = rank_tensor(seed, world.rank(), n, dtype);
        Tensor out = Tensor::empty({P * n}, dtype);
        if (async) world.all_gather_async(in, out).wait();
        else world.all_gather(in, out);
        std::vector<double> want;
        for (int r = 0; r < P; ++r) {
          const auto v = rank_tensor(seed, r, n, dtype).to(DType::f32).to_vector();
          want.insert(want.end(), v.begin(), v.end());
        }
        expect_values(out.to(DType::f32).to_vector(), want, 0, "all_gather");
      }
}

TEST(Collectives, AllToAllRoutesBlocks) {
  auto& world = mpi_world();
  const int P = world.size(), me = world.rank();
  uint64_t seed = 500;
  for (DType dtype : {DType::f32, DType::bf16, DType::i64})
    for (int64_t n : {int64_t{1}, int64_t{9}, int64_t{2049}})
      for (bool async : {false, true}) {
        ++seed;
        Tensor in = rank_tensor(seed, me, n * P, dtype);
        Tensor out = Tensor::empty({n * P}, dtype);
        if (async) world.all_to_all_async(in, out).wait();
        else world.all_to_all(in, out);
        std::vector<double> want;
        for (int j = 0; j < P; ++j) {  // block j comes from rank j's block `me`
          const auto v = rank_tensor(seed, j, n * P, dtype).to(DType::f32).to_vector();
          want.insert(want.end(), v.begin() + me * n, v.begin() + (me + 1) * n);
        }
        expect_values(out.to(DType::f32).to_vector(), want, 0, "all_to_all");
      }
}

TEST(Collectives, BroadcastFromEveryRoot) {
  auto& world = mpi_world();
  for (int root = 0; root < world.size(); ++root)
    for (DType dtype : {DType::f32, DType::bf16, DType::i64}) {
      const uint64_t seed = 600 + static_cast<uint64_t>(root);
      Tensor t = rank_tensor(seed, world.rank(), 301, dtype);
      if (root % 2) world.broadcast_async(t, root).wait();
      else world.broadcast(t, root);
      const auto want = rank_tensor(seed, root, 301, dtype).to(DType::f32).to_vector();
      expect_values(t.to(DType::f32).to_vector(), std::vector<double>(want.begin(), want.end()), 0, "broadcast");
    }
}

TEST(Collectives, SendRecvRing) {
  auto& world = mpi_world();
  const int P = world.size(), me = world.rank();
  const int next = (me + 1) % P, prev = (me + P - 1) % P;
  // Two tagged messages each way around the ring, received in the opposite order they were sent:
  // matching is by (peer, tag), so the payloads must not swap.
  Tensor a = rank_tensor(700, me, 257, DType::f32), b = rank_tensor(701, me, 3, DType::bf16);
  Tensor ra = Tensor::empty({257}, DType::f32), rb = Tensor::empty({3}, DType::bf16);
  dist::CommHandle recv_b = world.recv_async(rb, prev, 2);
  dist::CommHandle recv_a = world.recv_async(ra, prev, 1);
  dist::CommHandle send_a = world.send_async(a, next, 1);
  world.send(b, next, 2);
  send_a.wait();
  recv_a.wait();
  recv_b.wait();
  const auto wa = rank_tensor(700, prev, 257, DType::f32).to_vector();
  const auto wb = rank_tensor(701, prev, 3, DType::bf16).to(DType::f32).to_vector();
  expect_values(ra.to_vector(), std::vector<double>(wa.begin(), wa.end()), 0, "ring f32");
  expect_values(rb.to(DType::f32).to_vector(), std::vector<double>(wb.begin(), wb.end()), 0, "ring bf16");
}

TEST(Collectives, BarrierWaitsForTheSlowestRank) {
  // Rank r arrives r·40 ms late; nobody may leave before the last one arrived. The ranks share one
  // host under ctest, so steady_clock (CLOCK_MONOTONIC) readings are comparable across them.
  auto& world = mpi_world();
  auto now_us = [] {
    return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
  };
  for (bool async : {false, true}) {
    world.barrier();
    std::this_thread::sleep_for(std::chrono::milliseconds(40 * world.rank()));
    const int64_t arrived = now_us();
    if (async) world.barrier_async().wait();
    else world.barrier();
    const int64_t left = now_us();
    Tensor times = Tensor::empty({2 * world.size()}, DType::i64);
    world.all_gather(Tensor::from_vector_i64({arrived, left}, {2}), times);
    const auto t = times.to_vector_i64();
    int64_t last_arrival = 0;
    for (int r = 0; r < world.size(); ++r) last_arrival = std::max(last_arrival, t[static_cast<size_t>(2 * r)]);
    for (int r = 0; r < world.size(); ++r)
      EXPECT_GE(t[static_cast<size_t>(2 * r + 1)], last_arrival) << "rank " << r << " left the barrier early";
  }
}

TEST(Collectives, BadArgumentsAreErrorsBeforeAnyCommunication) {
  auto& world = mpi_world();
  const int P = world.size();
  Tensor in = Tensor::zeros({4 * P}, DType::f32);
  EXPECT_THROW(world.reduce_scatter(in, Tensor::zeros({3}, DType::f32)), Error);
  EXPECT_THROW(world.all_gather(Tensor::zeros({4}, DType::f32), Tensor::zeros({4 * P + 1}, DType::f32)), Error);
  EXPECT_THROW(world.all_gather(Tensor::zeros({4}, DType::f32), Tensor::zeros({4 * P}, DType::i32)), Error);
  EXPECT_THROW(world.all_reduce(Tensor::zeros({4, 6}, DType::f32).transpose(0, 1)), Error);
  EXPECT_THROW(world.send(in, P, 0), Error);
  EXPECT_THROW(world.broadcast(in, -1), Error);
  EXPECT_THROW(world.split(-1, 0, "bad"), Error);
  try {
    world.reduce_scatter(in, Tensor::zeros({3}, DType::f32));
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("reduce_scatter on communicator 'world'"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace foldcore::testing
