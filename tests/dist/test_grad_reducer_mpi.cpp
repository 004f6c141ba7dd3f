// Data parallelism: k ranks, each accumulating its own micro-batches and averaging gradients with
// the GradReducer, equal one process accumulating all k ranks' micro-batches (÷ k), for the
// gradients and for the parameters after several Adam steps. fp32; tolerance 1e-6 absolute +
// 1e-5 relative (only the summation order differs). Plus bucketing and marking behaviour.
#include <gtest/gtest.h>

#include <memory>

#include "autograd/autograd.h"
#include "core/error.h"
#include "dist/grad_reducer.h"
#include "dist_test_util.h"
#include "kernels/elementwise.h"
#include "nn/optimizer.h"
#include "test_util.h"

namespace foldcore::testing {
namespace {

namespace ag = foldcore::autograd;

constexpr int64_t kIn = 13, kHidden = 29, kOut = 5, kRows = 6;  // odd sizes: gaps in the flat buffer
constexpr int kMicroBatches = 2;                                   // per rank and step

// A 3-layer MLP in one ParamStore, identical on every rank (fixed seeds).
struct Mlp {
  ag::ParamStore ps;
  std::vector<ag::Variable> w, b;
  Mlp() {
    const int64_t dims[] = {kIn, kHidden, kHidden, kOut};
    for (int l = 0; l < 3; ++l) {
      const std::string p = "layer_" + std::to_string(l);
      const auto init = rank_values(900 + static_cast<uint64_t>(l), 0, dims[l] * dims[l + 1]);
      w.push_back(ps.add(p + "/weight", {dims[l], dims[l + 1]}, true,
                         Tensor::from_vector(init, {dims[l], dims[l + 1]})));
      b.push_back(ps.add(p + "/bias", {dims[l + 1]}, false,
                         Tensor::from_vector(rank_values(950 + static_cast<uint64_t>(l), 0, dims[l + 1]), {dims[l + 1]})));
    }
    ps.finalize();
  }
  // Accumulates the gradient of mean((mlp(x) − y)²) of micro-batch `sample` into ps.grads().
  void accumulate(int sample) {
    const Tensor x = Tensor::from_vector(rank_values(1000, sample, kRows * kIn), {kRows, kIn});
    std::vector<float> neg_y = rank_values(2000, sample, kRows * kOut);
    for (float& v : neg_y) v = -v;
    const Tensor minus_y = Tensor::from_vector(neg_y, {kRows, kOut});
    ag::Variable h(x);
    for (int l = 0; l < 3; ++l) {
      h = ag::linear(h, w[static_cast<size_t>(l)], b[static_cast<size_t>(l)]);
      if (l < 2) h = ag::relu(h);
    }
    const ag::Variable d = ag::add(h, ag::Variable(minus_y));
    ag::backward(ag::mean(ag::mul(d, d), {0, 1}));
  }
};

TEST(GradReducer, DataParallelEqualsOneProcessAccumulating) {
  auto& world = mpi_world();
  const int k = world.size();
  for (int64_t bucket_bytes : {int64_t{0}, int64_t{1000}, int64_t{1} << 30}) {
    SCOPED_TRACE(::testing::Message() << "bucket_bytes " << bucket_bytes);
    Mlp dp, single;
    dist::GradReducer reducer(world, dp.ps.grads(), dp.ps.segments(), {.bucket_bytes = bucket_bytes});
    nn::Adam opt_dp(dp.ps.values(), dp.ps.grads(), dp.ps.segments(), {.lr = 1e-2f});
    nn::Adam opt_single(single.ps.values(), single.ps.grads(), single.ps.segments(), {.lr = 1e-2f});
    for (int step = 0; step < 3; ++step) {
      // This rank's micro-batches: samples (step, rank, m); the single process runs them all.
      auto sample = [&](int rank, int m) { return (step * k + rank) * kMicroBatches + m; };
      dp.ps.zero_grad();
      for (int m = 0; m < kMicroBatches; ++m) dp.accumulate(sample(world.rank(), m));
      // Mark as backward would finish them: last parameters first, one segment at a time.
      const auto segs = dp.ps.segments();
      for (size_t i = segs.size(); i-- > 0;) reducer.mark_ready(segs[i].offset, segs[i].size);
      EXPECT_EQ(reducer.buckets_launched(), reducer.num_buckets()) << "every bucket launched before finish()";
      reducer.finish();
      const Tensor g_dp = dp.ps.grads().clone();

      single.ps.zero_grad();
      for (int r = 0; r < k; ++r)
        for (int m = 0; m < kMicroBatches; ++m) single.accumulate(sample(r, m));
      ops::scale(single.ps.grads(), 1.f / static_cast<float>(k), single.ps.grads());
      FC_EXPECT_CLOSE(g_dp, single.ps.grads(), 1e-6, 1e-5);

      opt_dp.step();
      opt_single.step();
      FC_EXPECT_CLOSE(dp.ps.values(), single.ps.values(), 1e-6, 1e-5);
    }
    // The replicas stay bit-identical across ranks: every rank applied the same averaged gradient.
    Tensor mine = dp.ps.values().clone(), root = dp.ps.values().clone();
    world.broadcast(root, 0);
    EXPECT_EQ(mine.to_vector(), root.to_vector());
  }
}

TEST(GradReducer, BucketsFollowTheBackwardOrderAndLaunchInOrder) {
  auto& world = mpi_world();
  Mlp mlp;
  const auto segs = mlp.ps.segments();
  ASSERT_EQ(segs.size(), 6u);
  // 1000 bytes = 250 floats. From the end: bias 2 + weight 2 span 165 floats (with the alignment
  // gap), + bias 1: 197, still < 250, so weight 1 (841) joins too: bucket 0 = segments 2..5, and
  // bucket 1 = segments 0..1. Buckets are whole segments grouped from the end.
  dist::GradReducer reducer(world, mlp.ps.grads(), segs, {.bucket_bytes = 1000});
  const auto ranges = reducer.bucket_ranges();
  ASSERT_EQ(ranges.size(), 2u);
  EXPECT_EQ(ranges.front().second, segs.back().offset + segs.back().size);
  EXPECT_EQ(ranges.front().first, segs[2].offset);
  EXPECT_EQ(ranges.back().first, segs.front().offset);
  for (size_t i = 1; i < ranges.size(); ++i) EXPECT_LE(ranges[i].second, ranges[i - 1].first);

  Tensor(mlp.ps.grads()).fill_(world.rank() + 1.0);
  // Marking the first parameters first completes bucket 1, which must wait for bucket 0.
  reducer.mark_ready(segs[0].offset, segs[0].size);
  reducer.mark_ready(segs[1].offset, segs[2].offset + segs[2].size - segs[1].offset);  // two segments at once
  EXPECT_EQ(reducer.buckets_launched(), 0);
  reducer.mark_ready(segs[3].offset, segs[5].offset + segs[5].size - segs[3].offset);
  EXPECT_EQ(reducer.buckets_launched(), reducer.num_buckets());
  reducer.finish();
  // Mean over ranks of (rank + 1) = (k + 1) / 2 on every element, gaps included.
  const float want = (world.size() + 1) / 2.f;
  for (const auto& s : segs)
    EXPECT_EQ(mlp.ps.grads().narrow(0, s.offset, s.size).to_vector(), std::vector<float>(static_cast<size_t>(s.size), want));

  // Nothing marked: finish() still reduces everything (parameters unused this step).
  Tensor(mlp.ps.grads()).fill_(2.0 * world.rank());
  reducer.finish();
  EXPECT_FLOAT_EQ(mlp.ps.grads().narrow(0, segs[2].offset, 1).item(), static_cast<float>(world.size() - 1));
}

TEST(GradReducer, MarkingMistakesAreErrors) {
  auto& world = mpi_world();
  Mlp mlp;
  const auto segs = mlp.ps.segments();
  dist::GradReducer reducer(world, mlp.ps.grads(), segs);
  EXPECT_THROW(reducer.mark_ready(segs[1].offset + 1, 3), Error);        // not a segment start
  EXPECT_THROW(reducer.mark_ready(segs[1].offset, segs[1].size - 1), Error);  // cuts a segment
  reducer.mark_ready(segs[4].offset, segs[4].size);
  EXPECT_THROW(reducer.mark_ready(segs[4].offset, segs[4].size), Error);  // twice in a step
  reducer.finish();
  reducer.mark_ready(segs[4].offset, segs[4].size);  // a new step
  reducer.finish();
  EXPECT_THROW(dist::GradReducer(world, mlp.ps.grads(), {{10, 5, true}, {12, 5, true}}), Error);  // overlap
}

}  // namespace
}  // namespace foldcore::testing
