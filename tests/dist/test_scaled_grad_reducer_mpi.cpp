// ScaledGradReducer: buffer = Σ_r scale_r · x_r + base_r, each rank's scale given only at finish()
// after its buckets went out, against the sum computed locally from every rank's regenerated data.
// Segment sizes are odd (chunks padded, gaps between segments) and the scales differ per rank, so
// a reducer that summed before scaling, mixed chunks or lost padding fails. fp32: the reference
// sums in the same rank order, products rounded the same way, so the tolerance is 1e-6 relative
// (it only covers the base's reduce-scatter, whose internal order MPI picks). Every rank must hold
// the same bits.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/error.h"
#include "dist/scaled_grad_reducer.h"
#include "dist_test_util.h"
#include "test_util.h"

namespace foldcore::testing {
namespace {

// Segments of sizes 7, 33, 1, 64, 5, 130 with gaps of 3 (zeros) between them.
std::vector<ops::ParamSegment> layout(int64_t& total) {
  std::vector<ops::ParamSegment> s;
  int64_t at = 0;
  for (int64_t n : {7, 33, 1, 64, 5, 130}) {
    s.push_back({at, n, true});
    at += n + 3;
  }
  total = at;
  return s;
}

std::vector<float> masked(std::vector<float> v, const std::vector<ops::ParamSegment>& segs) {
  std::vector<float> out(v.size(), 0.f);
  for (const auto& s : segs) std::copy(v.begin() + s.offset, v.begin() + s.offset + s.size, out.begin() + s.offset);
  return out;
}

TEST(ScaledGradReducer, SumOfScaledContributionsWithScalesKnownLate) {
  auto& world = mpi_world();
  const int p = world.size();
  int64_t total = 0;
  const auto segs = layout(total);
  for (int64_t bucket_bytes : {int64_t{0}, int64_t{200}, int64_t{1} << 30}) {
    for (bool with_base : {false, true}) {
      SCOPED_TRACE(::testing::Message() << "bucket_bytes " << bucket_bytes << " base " << with_base);
      Tensor buffer = Tensor::zeros({total}, DType::f32);
      dist::ScaledGradReducer reducer(world, buffer, segs, bucket_bytes);
      for (int step = 0; step < 2; ++step) {
        auto x_of = [&](int r) { return masked(rank_values(100 + static_cast<uint64_t>(step), r, total), segs); };
        auto base_of = [&](int r) { return masked(rank_values(200 + static_cast<uint64_t>(step), r, total), segs); };
        auto scale_of = [&](int r) { return 0.25 + 0.5 * r + step; };
        if (with_base) {
          const std::vector<float> b = base_of(world.rank());
          reducer.add_base(Tensor::from_vector(b, {total}));
        }
        // The buffer is written segment by segment, marked as it goes, last segment first (as a
        // backward finishes them); its scale is known only afterwards.
        const std::vector<float> x = x_of(world.rank());
        for (size_t i = segs.size(); i-- > 0;) {
          for (int64_t e = segs[i].offset; e < segs[i].offset + segs[i].size; ++e) buffer.data<float>()[e] = x[e];
          reducer.mark_ready(segs[i].offset, segs[i].size);
        }
        EXPECT_EQ(reducer.buckets_launched(), reducer.num_buckets());
        reducer.finish(scale_of(world.rank()));

        std::vector<float> want(static_cast<size_t>(total), 0.f);
        for (int r = 0; r < p; ++r) {
          const std::vector<float> xr = x_of(r);
          for (int64_t e = 0; e < total; ++e) want[e] += static_cast<float>(scale_of(r)) * xr[e];
        }
        if (with_base)
          for (int r = 0; r < p; ++r) {
            const std::vector<float> br = base_of(r);
            for (int64_t e = 0; e < total; ++e) want[e] += br[e];
          }
        const std::vector<float> got = buffer.to_vector();
        for (int64_t e = 0; e < total; ++e)
          ASSERT_NEAR(got[e], want[e], 1e-6 * std::max(1.f, std::abs(want[e]))) << "element " << e << " step " << step;
        // The same bits on every rank: max − min over the ranks is 0.
        Tensor hi = buffer.clone(), lo = buffer.clone();
        world.all_reduce(hi, dist::ReduceOp::max);
        world.all_reduce(lo, dist::ReduceOp::min);
        EXPECT_EQ(hi.to_vector(), lo.to_vector());
      }
    }
  }
}

TEST(ScaledGradReducer, BucketsGoOutInOrderAndMisuseIsAnError) {
  auto& world = mpi_world();
  int64_t total = 0;
  const auto segs = layout(total);
  Tensor buffer = Tensor::zeros({total}, DType::f32);
  dist::ScaledGradReducer reducer(world, buffer, segs, 0);  // one bucket per segment
  ASSERT_EQ(reducer.num_buckets(), 6);
  EXPECT_EQ(reducer.bucket_ranges().front().first, segs.back().offset);  // end of the buffer first
  // Marking the first segment launches nothing: the buckets of the later segments come first.
  reducer.mark_ready(segs[0].offset, segs[0].size);
  EXPECT_EQ(reducer.buckets_launched(), 0);
  reducer.mark_ready(segs[5].offset, segs[5].size);
  EXPECT_EQ(reducer.buckets_launched(), 1);
  EXPECT_THROW(reducer.mark_ready(segs[5].offset, segs[5].size), Error);   // twice
  EXPECT_THROW(reducer.mark_ready(segs[3].offset + 1, 2), Error);          // not a segment start
  EXPECT_THROW(reducer.add_base(Tensor::zeros({total}, DType::f32)), Error);  // after a launch
  reducer.finish(1.0);  // launches the rest
  EXPECT_EQ(reducer.buckets_launched(), 0);
}

}  // namespace
}  // namespace foldcore::testing
