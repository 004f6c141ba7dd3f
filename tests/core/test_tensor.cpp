#include <gtest/gtest.h>
#include <cmath>

#include "core/half.h"
#include "core/random.h"
#include "core/tensor.h"
#include "test_util.h"

namespace foldcore {
namespace {

TEST(Tensor, CreateAndMetadata) {
  Tensor t = Tensor::zeros({2, 3, 5}, DType::f32);
  EXPECT_EQ(t.dim(), 3);
  EXPECT_EQ(t.numel(), 30);
  EXPECT_EQ(t.size(-1), 5);
  EXPECT_EQ(t.stride(0), 15);
  EXPECT_TRUE(t.is_contiguous());
  EXPECT_EQ(t.nbytes(), 120u);
  for (float v : t.to_vector()) EXPECT_EQ(v, 0.f);
  EXPECT_THROW(t.size(3), Error);
}

TEST(Tensor, PermuteNarrowSelectExpandMatchNaiveIndexing) {
  std::vector<float> v(2 * 3 * 4);
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i);
  Tensor t = Tensor::from_vector(v, {2, 3, 4});
  Tensor p = t.permute({2, 0, 1});  // [4,2,3]
  EXPECT_FALSE(p.is_contiguous());
  const auto pv = p.contiguous().to_vector();
  for (int c = 0; c < 4; ++c)
    for (int a = 0; a < 2; ++a)
      for (int b = 0; b < 3; ++b) EXPECT_EQ(pv[(c * 2 + a) * 3 + b], v[(a * 3 + b) * 4 + c]);

  Tensor n = t.narrow(2, 1, 2);  // [2,3,2]
  const auto nv = n.to_vector();
  for (int a = 0; a < 2; ++a)
    for (int b = 0; b < 3; ++b)
      for (int c = 0; c < 2; ++c) EXPECT_EQ(nv[(a * 3 + b) * 2 + c], v[(a * 3 + b) * 4 + c + 1]);

  Tensor s = t.select(1, -1);  // [2,4] = t[:, 2, :]
  EXPECT_EQ(s.shape(), (Shape{2, 4}));
  EXPECT_EQ(s.to_vector()[5], v[(1 * 3 + 2) * 4 + 1]);

  Tensor row = Tensor::from_vector({1, 2, 3}, {3});
  Tensor e = row.unsqueeze(0).expand({4, 3});
  EXPECT_EQ(e.stride(0), 0);
  const auto ev = e.contiguous().to_vector();
  for (int i = 0; i < 4; ++i) EXPECT_EQ(ev[i * 3 + 2], 3.f);
}

// Permute copies take a tiled (and, above ~1 MiB, OpenMP-parallel) transpose path; every element
// must land where naive index arithmetic puts it, for odd shapes (partial tiles), 16-bit
// elements, narrowed destinations and permutations that leave the unit-stride axis in the middle.
// Exact equality: a copy moves bits.
TEST(Tensor, TiledPermuteCopyMatchesNaiveIndexing) {
  struct Case {
    Shape shape;
    std::vector<int> perm;
  };
  const std::vector<Case> cases = {{{37, 45, 19}, {2, 0, 1}}, {{37, 45, 19}, {1, 2, 0}}, {{3, 50, 70}, {0, 2, 1}},
                                   {{5, 33, 2, 40}, {0, 3, 2, 1}}, {{130, 131, 17}, {2, 0, 1}},
                                   {{17, 130, 131}, {1, 2, 0}}, {{64, 64}, {1, 0}}, {{31, 2, 33}, {2, 1, 0}}};
  Generator gen(7);
  for (DType dt : {DType::f32, DType::bf16}) {
    for (const Case& c : cases) {
      const int nd = c.shape.size();
      const Tensor src = randn(c.shape, gen, 0.f, 1.f, dt);
      const Tensor p = src.permute(c.perm);
      const Tensor got = p.contiguous();
      const std::vector<float> sv = src.to(DType::f32).to_vector();
      const std::vector<float> gv = got.to(DType::f32).to_vector();
      // Walk got's multi-index; the source offset follows from the permuted strides.
      std::vector<int64_t> idx(nd, 0);
      for (int64_t flat = 0; flat < p.numel(); ++flat) {
        int64_t r = flat, soff = 0;
        for (int a = nd - 1; a >= 0; --a) {
          idx[a] = r % p.size(a);
          r /= p.size(a);
          soff += idx[a] * p.stride(a);
        }
        ASSERT_EQ(gv[flat], sv[soff]) << c.shape.str() << " flat " << flat;
      }
      // Into a narrowed destination (row stride larger than the row): the same values.
      Shape wide = p.shape();
      wide[nd - 1] += 3;
      Tensor dst = Tensor::zeros(wide, dt);
      dst.narrow(nd - 1, 2, p.size(nd - 1)).copy_(p);
      const std::vector<float> dv = dst.narrow(nd - 1, 2, p.size(nd - 1)).contiguous().to(DType::f32).to_vector();
      EXPECT_EQ(dv, gv) << c.shape.str();
      for (float v : dst.narrow(nd - 1, 0, 2).contiguous().to(DType::f32).to_vector())
        ASSERT_EQ(v, 0.f) << "copy wrote outside the narrowed view";
    }
  }
}

TEST(Tensor, ViewAndReshape) {
  Tensor t = Tensor::zeros({4, 6}, DType::f32);
  EXPECT_EQ(t.view({2, -1, 3}).shape(), (Shape{2, 4, 3}));
  EXPECT_THROW(t.view({5, -1}), Error);
  EXPECT_THROW(t.transpose(0, 1).view({24}), Error);
  EXPECT_EQ(t.transpose(0, 1).reshape({24}).numel(), 24);
}

TEST(Tensor, DtypeConversionRoundTrips) {
  std::vector<float> v = {0.f, 1.f, -2.5f, 3.14159f, 65504.f, 1e-3f, -7.f};
  for (DType dt : {DType::f32, DType::bf16, DType::f16}) {
    Tensor t = Tensor::from_vector(v, {7}, dt);
    const auto back = t.to_vector();
    const double tol = dt == DType::bf16 ? 1.0 / 128 : dt == DType::f16 ? 1.0 / 1024 : 0;
    for (size_t i = 0; i < v.size(); ++i) EXPECT_NEAR(back[i], v[i], std::fabs(v[i]) * tol) << dtype_name(dt);
  }
  Tensor ints = Tensor::from_vector({1.f, -3.f, 7.f}, {3}, DType::i32);
  EXPECT_EQ(ints.to_vector_i64(), (std::vector<int64_t>{1, -3, 7}));
}

TEST(Half, Bf16RoundsToNearestEven) {
  // 1 + 2^-8 is exactly halfway between bf16 1.0 and 1 + 2^-7: ties to even -> 1.0.
  EXPECT_EQ(static_cast<float>(bf16(1.0f + 1.0f / 256)), 1.0f);
  EXPECT_EQ(static_cast<float>(bf16(1.0f + 3.0f / 256)), 1.0f + 1.0f / 64);
  EXPECT_TRUE(std::isnan(static_cast<float>(bf16(NAN))));
  EXPECT_TRUE(std::isinf(static_cast<float>(bf16(INFINITY))));
}

TEST(Half, F16MatchesIeee) {
  EXPECT_EQ(f16(1.0f).bits, 0x3c00);
  EXPECT_EQ(f16(-2.0f).bits, 0xc000);
  EXPECT_EQ(f16(65504.f).bits, 0x7bff);
  EXPECT_EQ(f16(1e6f).bits, 0x7c00);             // overflow to +Inf
  EXPECT_EQ(f16(5.960464477539063e-08f).bits, 1);  // smallest subnormal
  EXPECT_EQ(static_cast<float>(f16(1e-5f)), f16::to_float(f16(1e-5f).bits));
  for (uint16_t b : {0x0001, 0x03ff, 0x0400, 0x3555, 0x7bff, 0xfbff}) EXPECT_EQ(f16(f16::to_float(b)).bits, b);
}

TEST(Tensor, CopyBetweenStridedViewsConverts) {
  Generator gen(3);
  Tensor a = randn({5, 7}, gen);
  Tensor b = Tensor::zeros({7, 5}, DType::bf16);
  b.transpose(0, 1).copy_(a);
  const auto av = a.to_vector();
  const auto bv = b.to_vector();
  for (int i = 0; i < 5; ++i)
    for (int j = 0; j < 7; ++j) EXPECT_NEAR(bv[j * 5 + i], av[i * 7 + j], std::fabs(av[i * 7 + j]) / 128 + 1e-6);
}

TEST(Tensor, ErrorsCarryContext) {
  try {
    with_context("loading weights", [] { FC_THROW("bad key 'x'"); });
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "loading weights: bad key 'x'");
  }
  try {
    FC_CHECK(1 + 1 == 3, "math is broken: ", 42);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("math is broken: 42"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("test_tensor.cpp"), std::string::npos);
  }
}

TEST(Device, Parse) {
  EXPECT_EQ(Device::parse("cpu"), Device::cpu());
  EXPECT_EQ(Device::parse("cuda:3"), Device::cuda(3));
  EXPECT_THROW(Device::parse("tpu"), Error);
  EXPECT_THROW(Device::parse("cuda:x"), Error);
}

// A --device this process cannot use is refused with the device and the reason: no CUDA backend in
// the build, no device visible (with the runtime's own reason: a GPU-less machine with the CUDA
// libraries said only "CUDA driver version is insufficient" from deep inside the first op), or an
// index past the last device. What it can use is accepted.
TEST(Device, ParseUsableRefusesWhatThisProcessCannotUse) {
  EXPECT_EQ(parse_usable_device("cpu"), Device::cpu());
  EXPECT_THROW(parse_usable_device("tpu"), Error);
  const int n = cuda_device_count();
  const std::string past = "cuda:" + std::to_string(n);
  try {
    parse_usable_device(past);
    ADD_FAILURE() << past << " accepted with " << n << " CUDA devices";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("device '" + past + "'"), std::string::npos) << what;
    const std::string why = !cuda_built() ? "no CUDA backend"
                            : n == 0      ? "no CUDA device is visible to this process (the CUDA runtime"
                                          : "this process sees " + std::to_string(n) + " CUDA device";
    EXPECT_NE(what.find(why), std::string::npos) << what;
  }
  if (n > 0) {
    EXPECT_EQ(parse_usable_device("cuda:" + std::to_string(n - 1)), Device::cuda(n - 1));
  }
}

}  // namespace
}  // namespace foldcore
