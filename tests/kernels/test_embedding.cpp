// CPU reference of kernels/embedding.h against naive loops and finite differences.
#include <gtest/gtest.h>

#include <vector>

#include "core/random.h"
#include "kernels/embedding.h"
#include "test_util.h"

namespace foldcore {
namespace {

TEST(Embedding, ForwardGathersRows) {
  Generator gen(41);
  for (DType it : {DType::i32, DType::i64}) {
    Tensor table = randn({11, 7}, gen);
    Tensor idx = randint({3, 5}, gen, 0, 11, it);
    Tensor out = Tensor::empty({3, 5, 7}, DType::f32);
    ops::embedding_forward(table, idx, out);
    const auto tv = table.to_vector(), ov = out.to_vector();
    const auto iv = idx.to_vector_i64();
    for (int64_t r = 0; r < 15; ++r)
      for (int c = 0; c < 7; ++c) EXPECT_EQ(ov[r * 7 + c], tv[iv[r] * 7 + c]);
  }
  Tensor tb = randn({4, 3}, gen, 0, 1, DType::bf16), ob = Tensor::empty({2, 3}, DType::bf16);
  ops::embedding_forward(tb, Tensor::from_vector_i64({3, 0}, {2}), ob);
  const auto tbv = tb.to_vector(), obv = ob.to_vector();
  for (int c = 0; c < 3; ++c) {
    EXPECT_EQ(obv[c], tbv[9 + c]);
    EXPECT_EQ(obv[3 + c], tbv[c]);
  }
}

TEST(Embedding, BackwardScatterAddsAndAccumulates) {
  Generator gen(42);
  Tensor idx = Tensor::from_vector_i64({2, 0, 2, 5, 2, 0, 1}, {7}, DType::i32);
  Tensor dout = randn({7, 9}, gen);
  Tensor dtable = Tensor::full({6, 9}, 1.0, DType::f32);
  ops::embedding_backward(dout, idx, dtable);
  std::vector<double> want(6 * 9, 1.0);
  const auto dv = dout.to_vector();
  const auto iv = idx.to_vector_i64();
  for (int r = 0; r < 7; ++r)
    for (int c = 0; c < 9; ++c) want[iv[r] * 9 + c] += dv[r * 9 + c];
  const auto got = dtable.to_vector();
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-6) << i;
  EXPECT_EQ(got[4 * 9], 1.f);  // row 4 never indexed: untouched
}

TEST(Embedding, BackwardMatchesFiniteDifferences) {
  // out is linear in table, so the central difference is exact up to f32 rounding of the loss
  // (|loss| ~ 5, eps 1e-3: ≤ 5e-3); atol 1e-2, rtol 1e-2.
  Generator gen(43);
  Tensor table = randn({5, 4}, gen), idx = randint({2, 6}, gen, 0, 5), w = randn({2, 6, 4}, gen);
  Tensor out = Tensor::empty({2, 6, 4}, DType::f32);
  Tensor dtable = Tensor::zeros({5, 4}, DType::f32);
  ops::embedding_backward(w, idx, dtable);
  auto loss = [&] {
    ops::embedding_forward(table, idx, out);
    return testing::weighted_sum(out, w);
  };
  testing::check_gradient(loss, table, dtable, 1e-3, 1e-2, 1e-2);
}

TEST(Embedding, OutOfRangeIndexIsAnErrorNamingIt) {
  Tensor table = Tensor::zeros({4, 2}, DType::f32), out = Tensor::empty({3, 2}, DType::f32);
  for (int64_t bad : {4, -1}) {
    Tensor idx = Tensor::from_vector_i64({0, bad, 1}, {3});
    try {
      ops::embedding_forward(table, idx, out);
      ADD_FAILURE() << "no error for index " << bad;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("index " + std::to_string(bad)), std::string::npos) << e.what();
    }
    EXPECT_THROW(ops::embedding_backward(out, idx, Tensor::zeros({4, 2}, DType::f32)), Error);
  }
  EXPECT_THROW(ops::embedding_forward(table, Tensor::zeros({3}, DType::f32), out), Error);  // float idx
  EXPECT_THROW(ops::embedding_forward(table, Tensor::zeros({4}, DType::i64), out), Error);  // shape
  EXPECT_THROW(ops::embedding_backward(out, Tensor::zeros({3}, DType::i64), Tensor::zeros({4, 2}, DType::bf16)),
               Error);
}

TEST(Embedding, OneHot) {
  Tensor idx = Tensor::from_vector_i64({0, 3, -1, 2, 7, 1}, {2, 3}, DType::i32);
  for (DType dt : {DType::f32, DType::bf16}) {
    Tensor out = Tensor::empty({2, 3, 4}, dt);
    ops::one_hot(idx, 4, out);
    const auto ov = out.to_vector();
    const auto iv = idx.to_vector_i64();
    for (int r = 0; r < 6; ++r)
      for (int c = 0; c < 4; ++c) EXPECT_EQ(ov[r * 4 + c], iv[r] == c ? 1.f : 0.f) << r << "," << c;
  }
  EXPECT_THROW(ops::one_hot(idx, 5, Tensor::empty({2, 3, 4}, DType::f32)), Error);
}

}  // namespace
}  // namespace foldcore
