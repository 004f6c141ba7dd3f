// CPU LayerNorm vs naive double-precision math, and backward vs finite differences.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <tuple>
#include <vector>

#include "core/random.h"
#include "kernels/elementwise.h"
#include "kernels/layernorm.h"
#include "test_util.h"

namespace foldcore {
namespace {

struct Naive {
  std::vector<float> y, mean, rstd, dx, dgamma, dbeta;
};

Naive naive_layernorm(const std::vector<float>& x, const std::vector<float>& g, const std::vector<float>& b,
                      const std::vector<float>& dy, int64_t rows, int64_t c, double eps) {
  Naive n;
  n.y.resize(rows * c);
  n.dx.resize(rows * c);
  n.dgamma.assign(c, 0.f);
  n.dbeta.assign(c, 0.f);
  std::vector<double> dg(c, 0), db(c, 0);
  for (int64_t r = 0; r < rows; ++r) {
    double mu = 0, var = 0;
    for (int64_t j = 0; j < c; ++j) mu += x[r * c + j];
    mu /= c;
    for (int64_t j = 0; j < c; ++j) var += (x[r * c + j] - mu) * (x[r * c + j] - mu);
    const double rs = 1 / std::sqrt(var / c + eps);
    n.mean.push_back(static_cast<float>(mu));
    n.rstd.push_back(static_cast<float>(rs));
    double sg = 0, sgx = 0;
    for (int64_t j = 0; j < c; ++j) {
      const double xh = (x[r * c + j] - mu) * rs;
      n.y[r * c + j] = static_cast<float>(xh * g[j] + b[j]);
      const double gh = dy[r * c + j] * g[j];
      sg += gh;
      sgx += gh * xh;
      dg[j] += dy[r * c + j] * xh;
      db[j] += dy[r * c + j];
    }
    for (int64_t j = 0; j < c; ++j) {
      const double xh = (x[r * c + j] - mu) * rs;
      n.dx[r * c + j] = static_cast<float>(rs * (dy[r * c + j] * g[j] - sg / c - xh * sgx / c));
    }
  }
  for (int64_t j = 0; j < c; ++j) n.dgamma[j] = static_cast<float>(dg[j]), n.dbeta[j] = static_cast<float>(db[j]);
  return n;
}

void run(const Shape& shape, DType dt, Generator& gen, double atol, double rtol) {
  const int64_t c = shape.back(), rows = shape.product() / c;
  // Offset mean and non-unit scale so the statistics matter.
  Tensor x = randn(shape, gen, 0.5f, 2.f, dt), dy = randn(shape, gen, 0, 1, dt);
  Tensor gamma = randn({c}, gen, 1.f, 0.3f), beta = randn({c}, gen);
  Tensor y = Tensor::zeros(shape, dt), dx = Tensor::zeros(shape, dt);
  Tensor mean = Tensor::zeros({rows}, DType::f32), rstd = Tensor::zeros({rows}, DType::f32);
  Tensor dgamma = Tensor::full({c}, 1.0, DType::f32), dbeta = Tensor::full({c}, -1.0, DType::f32);
  const float eps = 1e-5f;
  ops::layernorm_forward(x, gamma, beta, eps, y, mean, rstd);
  ops::layernorm_backward(dy, x, gamma, mean, rstd, dx, dgamma, dbeta);
  const Naive n = naive_layernorm(x.to_vector(), gamma.to_vector(), beta.to_vector(), dy.to_vector(), rows, c, eps);
  std::vector<float> dg0(n.dgamma), db0(n.dbeta);
  for (auto& v : dg0) v += 1.f;  // accumulated onto the initial 1 / -1
  for (auto& v : db0) v -= 1.f;
  SCOPED_TRACE(shape.str() + " " + std::string(dtype_name(dt)));
  FC_EXPECT_CLOSE(y, Tensor::from_vector(n.y, shape), atol, rtol);
  FC_EXPECT_CLOSE(mean, Tensor::from_vector(n.mean, {rows}), 1e-5, 1e-5);
  FC_EXPECT_CLOSE(rstd, Tensor::from_vector(n.rstd, {rows}), 1e-5, 1e-4);
  FC_EXPECT_CLOSE(dx, Tensor::from_vector(n.dx, shape), atol, rtol);
  // dgamma/dbeta sum `rows` terms in fp32: allow rows·2⁻²⁴-ish relative drift on top.
  FC_EXPECT_CLOSE(dgamma, Tensor::from_vector(dg0, {c}), 1e-4 * rows, 1e-4);
  FC_EXPECT_CLOSE(dbeta, Tensor::from_vector(db0, {c}), 1e-4 * rows, 1e-4);
}

TEST(LayerNorm, ForwardBackwardMatchNaiveF32) {
  Generator gen(21);
  // fp32 two-pass statistics on |x| ≲ 10: errors ~1e-6 relative.
  for (const Shape& s : {Shape{1, 1}, Shape{7, 33}, Shape{2, 3, 65}, Shape{5, 1}, Shape{33, 7}, Shape{4, 256}})
    run(s, DType::f32, gen, 1e-4, 1e-4);
}

TEST(LayerNorm, SixteenBitStorage) {
  Generator gen(22);
  // The naive reference reads the same rounded inputs; only the bf16/f16 output rounding
  // (2⁻⁸ / 2⁻¹¹ relative) differs, and |y|, |dx| are O(1–5).
  for (DType dt : {DType::bf16, DType::f16}) {
    run({7, 65}, dt, gen, 2e-2, 1e-2);
    run({3, 2, 33}, dt, gen, 2e-2, 1e-2);
  }
}

TEST(LayerNorm, RejectsBadShapes) {
  Generator gen(23);
  Tensor x = randn({4, 8}, gen), y = Tensor::zeros({4, 8}, DType::f32);
  Tensor g = Tensor::full({8}, 1.0, DType::f32), b = Tensor::zeros({8}, DType::f32);
  Tensor mean = Tensor::zeros({4}, DType::f32), rstd = Tensor::zeros({4}, DType::f32);
  EXPECT_THROW(ops::layernorm_forward(x, Tensor::zeros({7}, DType::f32), b, 1e-5f, y, mean, rstd), Error);
  // A 16-bit y is for an f32 x only (the LayerNorm before a bf16 GEMM); a bf16 x with an f32 y is an
  // error, as is a dy of the other 16-bit dtype (an f32 dy of a bf16 x is allowed: the next test).
  const Tensor xb = x.to(DType::bf16);
  EXPECT_THROW(ops::layernorm_forward(xb, g, b, 1e-5f, y, mean, rstd), Error);
  EXPECT_THROW(ops::layernorm_backward(y.to(DType::f16), xb, g, mean, rstd, xb, Tensor::zeros({8}, DType::f32), b),
               Error);
  EXPECT_THROW(ops::layernorm_forward(x, g, b, 1e-5f, y, Tensor::zeros({3}, DType::f32), rstd), Error);
  EXPECT_THROW(ops::layernorm_forward(x.transpose(0, 1), g, b, 1e-5f, y, mean, rstd), Error);
  EXPECT_THROW(ops::layernorm_backward(y, x, g, mean, rstd, y, Tensor{}, b), Error);
}

// A 16-bit y for an f32 x equals the f32 y converted (one rounding, the same bits), and the
// backward from that dy equals the backward from dy converted to f32, bit for bit; with
// accumulate_dx the gradient rounded to dx's dtype is added to dx's contents, the same bits as a
// temporary added afterwards (f32 x; and a bf16 x, where the sum rounds once more).
TEST(LayerNorm, SixteenBitOutputAndAccumulatedGradientMatchTheComposition) {
  Generator gen(25);
  for (DType y16 : {DType::bf16, DType::f16}) {
    SCOPED_TRACE(dtype_name(y16));
    const int64_t rows = 9, c = 40;
    const Tensor x = randn({rows, c}, gen, 0.5f, 2.f), gamma = randn({c}, gen, 1.f, 0.3f), beta = randn({c}, gen);
    Tensor y = Tensor::empty({rows, c}, DType::f32), yh = Tensor::empty({rows, c}, y16);
    Tensor mean = Tensor::empty({rows}, DType::f32), rstd = Tensor::empty({rows}, DType::f32);
    ops::layernorm_forward(x, gamma, beta, 1e-5f, y, mean, rstd);
    ops::layernorm_forward(x, gamma, beta, 1e-5f, yh, mean, rstd);
    EXPECT_EQ(yh.to(DType::f32).to_vector(), y.to(y16).to(DType::f32).to_vector());
    const Tensor dyh = randn({rows, c}, gen, 0, 1, y16);
    Tensor dx = Tensor::empty({rows, c}, DType::f32), dxh = Tensor::empty({rows, c}, DType::f32);
    Tensor dg = Tensor::zeros({c}, DType::f32), db = Tensor::zeros({c}, DType::f32);
    Tensor dgh = Tensor::zeros({c}, DType::f32), dbh = Tensor::zeros({c}, DType::f32);
    ops::layernorm_backward(dyh.to(DType::f32), x, gamma, mean, rstd, dx, dg, db);
    ops::layernorm_backward(dyh, x, gamma, mean, rstd, dxh, dgh, dbh);
    EXPECT_EQ(dxh.to_vector(), dx.to_vector());
    EXPECT_EQ(dgh.to_vector(), dg.to_vector());
    EXPECT_EQ(dbh.to_vector(), db.to_vector());
    // accumulate_dx onto a previous gradient.
    const Tensor prev = randn({rows, c}, gen);
    Tensor acc = prev.clone(), sum = Tensor::empty({rows, c}, DType::f32);
    ops::layernorm_backward(dyh, x, gamma, mean, rstd, acc, dgh, dbh, true);
    ops::add(prev, dx, sum);
    EXPECT_EQ(acc.to_vector(), sum.to_vector());
  }
  // bf16 x: the gradient is rounded to bf16, then added (and rounded again).
  const int64_t rows = 5, c = 24;
  const Tensor x = randn({rows, c}, gen, 0.f, 1.f, DType::bf16), gamma = randn({c}, gen, 1.f, 0.3f);
  Tensor y = Tensor::empty({rows, c}, DType::bf16), mean = Tensor::empty({rows}, DType::f32);
  Tensor rstd = Tensor::empty({rows}, DType::f32), dg = Tensor::zeros({c}, DType::f32), db = Tensor::zeros({c}, DType::f32);
  ops::layernorm_forward(x, gamma, Tensor::zeros({c}, DType::f32), 1e-5f, y, mean, rstd);
  const Tensor dy = randn({rows, c}, gen, 0, 1, DType::bf16), prev = randn({rows, c}, gen, 0, 1, DType::bf16);
  Tensor dx = Tensor::empty({rows, c}, DType::bf16), acc = prev.clone(), sum = Tensor::empty({rows, c}, DType::bf16);
  ops::layernorm_backward(dy, x, gamma, mean, rstd, dx, dg, db);
  ops::layernorm_backward(dy, x, gamma, mean, rstd, acc, dg, db, true);
  ops::add(prev, dx, sum);
  EXPECT_EQ(acc.to(DType::f32).to_vector(), sum.to(DType::f32).to_vector());
}

// The backward of a bf16 x from an fp32 dy (the GEMMs' fp32 gradient of a bf16 LayerNorm output,
// with bf16 training streams): the fp32 backward of x converted (exact) with dx rounded once to
// bf16, and the same dgamma and dbeta, bit for bit; with accumulate_dx the rounded gradient is
// added to dx's contents and rounded again.
TEST(LayerNorm, Fp32GradientOfABf16InputEqualsTheFp32BackwardRounded) {
  Generator gen(26);
  const int64_t rows = 11, c = 48;
  const Tensor x = randn({rows, c}, gen, 0.5f, 2.f, DType::bf16), gamma = randn({c}, gen, 1.f, 0.3f);
  const Tensor beta = randn({c}, gen), dy = randn({rows, c}, gen);
  Tensor y = Tensor::empty({rows, c}, DType::bf16), mean = Tensor::empty({rows}, DType::f32);
  Tensor rstd = Tensor::empty({rows}, DType::f32);
  ops::layernorm_forward(x, gamma, beta, 1e-5f, y, mean, rstd);
  Tensor dx32 = Tensor::empty({rows, c}, DType::f32), dx = Tensor::empty({rows, c}, DType::bf16);
  Tensor dg32 = Tensor::zeros({c}, DType::f32), db32 = Tensor::zeros({c}, DType::f32);
  Tensor dg = Tensor::zeros({c}, DType::f32), db = Tensor::zeros({c}, DType::f32);
  ops::layernorm_backward(dy, x.to(DType::f32), gamma, mean, rstd, dx32, dg32, db32);
  ops::layernorm_backward(dy, x, gamma, mean, rstd, dx, dg, db);
  EXPECT_EQ(dx.to(DType::f32).to_vector(), dx32.to(DType::bf16).to(DType::f32).to_vector());
  EXPECT_EQ(dg.to_vector(), dg32.to_vector());
  EXPECT_EQ(db.to_vector(), db32.to_vector());
  const Tensor prev = randn({rows, c}, gen, 0.f, 1.f, DType::bf16);
  Tensor acc = prev.clone(), sum = Tensor::empty({rows, c}, DType::bf16);
  ops::layernorm_backward(dy, x, gamma, mean, rstd, acc, dg, db, true);
  ops::add(prev, dx, sum);
  EXPECT_EQ(acc.to(DType::f32).to_vector(), sum.to(DType::f32).to_vector());
}

// The channel-major op (x [C, rows...], y [rows..., C]) against the naive math on x's transpose:
// y, the statistics, dx (compared in x's layout) and the parameters' sums; then with a 16-bit y
// of an f32 x, and with accumulate_dx (the gradient added to dx's contents).
TEST(LayerNorm, ChannelMajorMatchesTheNaiveMathOnTheTransposedInput) {
  Generator gen(27);
  for (const Shape& s : {Shape{1, 1}, Shape{7, 5}, Shape{33, 2, 3}, Shape{4, 65}}) {
    SCOPED_TRACE(s.str());
    const int64_t c = s[0], rows = s.product() / c;
    const Tensor x = randn(s, gen, 0.5f, 2.f), gamma = randn({c}, gen, 1.f, 0.3f), beta = randn({c}, gen);
    std::vector<int64_t> last(s.begin() + 1, s.end());
    last.push_back(c);
    const Shape ys(last);
    const Tensor dy = randn(ys, gen);
    Tensor y = Tensor::zeros(ys, DType::f32), dx = Tensor::zeros(s, DType::f32);
    Tensor mean = Tensor::zeros({rows}, DType::f32), rstd = Tensor::zeros({rows}, DType::f32);
    Tensor dgamma = Tensor::zeros({c}, DType::f32), dbeta = Tensor::zeros({c}, DType::f32);
    ops::layernorm_channel_major_forward(x, gamma, beta, 1e-5f, y, mean, rstd);
    ops::layernorm_channel_major_backward(dy, x, gamma, mean, rstd, dx, dgamma, dbeta);
    // x's transpose [rows, C], element by element.
    const std::vector<float> xv = x.to_vector();
    std::vector<float> xt(xv.size());
    for (int64_t ch = 0; ch < c; ++ch)
      for (int64_t r = 0; r < rows; ++r) xt[r * c + ch] = xv[ch * rows + r];
    const Naive n = naive_layernorm(xt, gamma.to_vector(), beta.to_vector(), dy.to_vector(), rows, c, 1e-5);
    std::vector<float> dxc(n.dx.size());
    for (int64_t ch = 0; ch < c; ++ch)
      for (int64_t r = 0; r < rows; ++r) dxc[ch * rows + r] = n.dx[r * c + ch];
    FC_EXPECT_CLOSE(y, Tensor::from_vector(n.y, ys), 1e-4, 1e-4);
    FC_EXPECT_CLOSE(mean, Tensor::from_vector(n.mean, {rows}), 1e-5, 1e-5);
    FC_EXPECT_CLOSE(rstd, Tensor::from_vector(n.rstd, {rows}), 1e-5, 1e-4);
    FC_EXPECT_CLOSE(dx, Tensor::from_vector(dxc, s), 1e-4, 1e-4);
    FC_EXPECT_CLOSE(dgamma, Tensor::from_vector(n.dgamma, {c}), 1e-4 * rows, 1e-4);
    FC_EXPECT_CLOSE(dbeta, Tensor::from_vector(n.dbeta, {c}), 1e-4 * rows, 1e-4);
    // A bf16 y: the f32 y rounded once; accumulate_dx: the same dx added to what dx held.
    Tensor yh = Tensor::zeros(ys, DType::bf16);
    ops::layernorm_channel_major_forward(x, gamma, beta, 1e-5f, yh, mean, rstd);
    EXPECT_EQ(yh.to(DType::f32).to_vector(), y.to(DType::bf16).to(DType::f32).to_vector());
    const Tensor prev = randn(s, gen);
    Tensor acc = prev.clone(), sum = Tensor::empty(s, DType::f32);
    ops::layernorm_channel_major_backward(dy, x, gamma, mean, rstd, acc, dgamma, dbeta, true);
    ops::add(prev, dx, sum);
    EXPECT_EQ(acc.to_vector(), sum.to_vector());
  }
}

TEST(LayerNorm, ChannelMajorRejectsBadShapes) {
  Generator gen(28);
  const Tensor x = randn({8, 4}, gen), g = Tensor::full({8}, 1.0, DType::f32), b = Tensor::zeros({8}, DType::f32);
  Tensor mean = Tensor::zeros({4}, DType::f32), rstd = Tensor::zeros({4}, DType::f32);
  // y must be x with its channels last: [4, 8], not x's own shape.
  EXPECT_THROW(ops::layernorm_channel_major_forward(x, g, b, 1e-5f, Tensor::zeros({8, 4}, DType::f32), mean, rstd),
               Error);
  const Tensor y = Tensor::zeros({4, 8}, DType::f32);
  EXPECT_NO_THROW(ops::layernorm_channel_major_forward(x, g, b, 1e-5f, y, mean, rstd));
  EXPECT_THROW(ops::layernorm_channel_major_forward(x, Tensor::full({4}, 1.0, DType::f32), b, 1e-5f, y, mean, rstd),
               Error);
  EXPECT_THROW(ops::layernorm_channel_major_forward(x.transpose(0, 1), g, b, 1e-5f, y, mean, rstd), Error);
  EXPECT_THROW(ops::layernorm_channel_major_forward(x, g, b, 1e-5f, y, Tensor::zeros({8}, DType::f32), rstd), Error);
  // dx in x's layout; dgamma required.
  EXPECT_THROW(ops::layernorm_channel_major_backward(y, x, g, mean, rstd, Tensor::zeros({4, 8}, DType::f32),
                                                     Tensor::zeros({8}, DType::f32), b),
               Error);
  EXPECT_THROW(ops::layernorm_channel_major_backward(y, x, g, mean, rstd, Tensor::zeros({8, 4}, DType::f32), Tensor{}, b),
               Error);
}

// LayerNorm and a head-major projection (x [rows..., C], w [C, H], out [H, rows...]) against the
// naive math: out[h, r] = Σ_c LN(x)[r, c]·w[c, h]; dy = Σ_h dout[h, r]·w[c, h]; dw += Σ_r y·dout;
// dx, dγ, dβ LayerNorm's backward from dy. fp32 (1e-4: fp32 sums of O(1) terms), and with w in
// bf16 (y and w rounded as the GEMM reads them; out rounded to bf16: 2⁻⁸ relative) from a bf16
// dout and an f32 one (read as it is, not rounded); accumulate_dx adds the gradient to what dx held.
TEST(LayerNorm, ProjectHeadsMatchesTheNaiveMath) {
  Generator gen(29);
  for (const auto& [s, heads, wdt, ddt] : {std::tuple{Shape{7, 5}, int64_t{3}, DType::f32, DType::f32},
                                           std::tuple{Shape{3, 4, 33}, int64_t{8}, DType::f32, DType::f32},
                                           std::tuple{Shape{6, 40}, int64_t{4}, DType::bf16, DType::bf16},
                                           std::tuple{Shape{6, 40}, int64_t{4}, DType::bf16, DType::f32}}) {
    SCOPED_TRACE(s.str() + " heads " + std::to_string(heads) + " w " + std::string(dtype_name(wdt)) + " dout " +
                 std::string(dtype_name(ddt)));
    const int64_t c = s.back(), rows = s.product() / c;
    const Tensor x = randn(s, gen, 0.5f, 2.f), gamma = randn({c}, gen, 1.f, 0.3f), beta = randn({c}, gen);
    const Tensor w = randn({c, heads}, gen, 0.f, 0.3f).to(wdt);
    std::vector<int64_t> hd{heads};
    for (int d = 0; d + 1 < s.size(); ++d) hd.push_back(s[d]);
    const Shape hs(hd);
    const Tensor dout = randn(hs, gen, 0.f, 1.f, ddt);
    Tensor out = Tensor::zeros(hs, wdt), mean = Tensor::zeros({rows}, DType::f32), rstd = Tensor::zeros({rows}, DType::f32);
    ops::layernorm_project_heads_forward(x, gamma, beta, 1e-5f, w, out, mean, rstd);
    Tensor dx = Tensor::zeros(s, DType::f32), dg = Tensor::zeros({c}, DType::f32), db = Tensor::zeros({c}, DType::f32);
    Tensor dw = Tensor::full({c, heads}, 0.25, DType::f32);
    ops::layernorm_project_heads_backward(dout, x, gamma, beta, 1e-5f, mean, rstd, w, dx, dg, db, dw);
    // Naive: y as the GEMM reads it (rounded to w's dtype), double sums.
    const Naive ln = naive_layernorm(x.to_vector(), gamma.to_vector(), beta.to_vector(), std::vector<float>(rows * c, 0.f),
                                     rows, c, 1e-5);
    const std::vector<float> y = Tensor::from_vector(ln.y, {rows, c}).to(wdt).to(DType::f32).to_vector();
    const std::vector<float> wv = w.to(DType::f32).to_vector();
    const std::vector<float> dv = dout.to(DType::f32).to_vector();  // an f32 dout read as it is
    std::vector<float> o(heads * rows), dy(rows * c), dwn(c * heads);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t h = 0; h < heads; ++h) {
        double t = 0;
        for (int64_t k = 0; k < c; ++k) t += static_cast<double>(y[r * c + k]) * wv[k * heads + h];
        o[h * rows + r] = static_cast<float>(t);
      }
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t k = 0; k < c; ++k) {
        double t = 0;
        for (int64_t h = 0; h < heads; ++h) t += static_cast<double>(dv[h * rows + r]) * wv[k * heads + h];
        dy[r * c + k] = static_cast<float>(t);
      }
    for (int64_t k = 0; k < c; ++k)
      for (int64_t h = 0; h < heads; ++h) {
        double t = 0.25;
        for (int64_t r = 0; r < rows; ++r) t += static_cast<double>(y[r * c + k]) * dv[h * rows + r];
        dwn[k * heads + h] = static_cast<float>(t);
      }
    const Naive back = naive_layernorm(x.to_vector(), gamma.to_vector(), beta.to_vector(), dy, rows, c, 1e-5);
    const bool sixteen = wdt != DType::f32;
    FC_EXPECT_CLOSE(out.to(DType::f32), Tensor::from_vector(o, hs), sixteen ? 2e-2 : 1e-4, sixteen ? 1e-2 : 1e-4);
    FC_EXPECT_CLOSE(mean, Tensor::from_vector(ln.mean, {rows}), 1e-5, 1e-5);
    FC_EXPECT_CLOSE(dx, Tensor::from_vector(back.dx, s), 1e-4, 1e-4);
    FC_EXPECT_CLOSE(dg, Tensor::from_vector(back.dgamma, {c}), 1e-4 * rows, 1e-4);
    FC_EXPECT_CLOSE(db, Tensor::from_vector(back.dbeta, {c}), 1e-4 * rows, 1e-4);
    FC_EXPECT_CLOSE(dw, Tensor::from_vector(dwn, {c, heads}), 1e-4 * rows, 1e-4);
    const Tensor prev = randn(s, gen);
    Tensor acc = prev.clone(), sum = Tensor::empty(s, DType::f32);
    ops::layernorm_project_heads_backward(dout, x, gamma, beta, 1e-5f, mean, rstd, w, acc, dg, db, dw, true);
    ops::add(prev, dx, sum);
    EXPECT_EQ(acc.to_vector(), sum.to_vector());
  }
  // Bad shapes: out not [H, rows...]; w not [C, H]; dout of another 16-bit dtype than w's.
  const Tensor x = randn({4, 8}, gen), g = Tensor::full({8}, 1.0, DType::f32), b = Tensor::zeros({8}, DType::f32);
  Tensor mean = Tensor::zeros({4}, DType::f32), rstd = Tensor::zeros({4}, DType::f32);
  const Tensor w = randn({8, 2}, gen);
  EXPECT_THROW(ops::layernorm_project_heads_forward(x, g, b, 1e-5f, w, Tensor::zeros({4, 2}, DType::f32), mean, rstd),
               Error);
  EXPECT_THROW(ops::layernorm_project_heads_forward(x, g, b, 1e-5f, randn({7, 2}, gen), Tensor::zeros({2, 4}, DType::f32),
                                                    mean, rstd),
               Error);
  EXPECT_NO_THROW(ops::layernorm_project_heads_forward(x, g, b, 1e-5f, w, Tensor::zeros({2, 4}, DType::f32), mean, rstd));
  const Tensor wb = w.to(DType::bf16);
  Tensor dx = Tensor::zeros({4, 8}, DType::f32), dg = Tensor::zeros({8}, DType::f32), dbt = Tensor::zeros({8}, DType::f32);
  EXPECT_THROW(ops::layernorm_project_heads_backward(Tensor::zeros({2, 4}, DType::f16), x, g, b, 1e-5f, mean, rstd, wb, dx,
                                                     dg, dbt, Tensor::zeros({8, 2}, DType::f32)),
               Error);
  EXPECT_THROW(ops::layernorm_project_heads_backward(Tensor::zeros({2, 4}, DType::bf16), x, g, b, 1e-5f, mean, rstd, wb, dx,
                                                     dg, dbt, Tensor::zeros({2, 8}, DType::f32)),
               Error);
}

// loss = Σ y ⊙ w; checks dx, dgamma, dbeta against central differences.
TEST(LayerNorm, BackwardMatchesFiniteDifferences) {
  Generator gen(24);
  const int64_t rows = 3, c = 7;
  Tensor x = randn({rows, c}, gen, 0.3f, 1.5f), gamma = randn({c}, gen, 1.f, 0.3f), beta = randn({c}, gen);
  Tensor w = randn({rows, c}, gen);
  Tensor y = Tensor::zeros({rows, c}, DType::f32);
  Tensor mean = Tensor::zeros({rows}, DType::f32), rstd = Tensor::zeros({rows}, DType::f32);
  auto loss = [&] {
    ops::layernorm_forward(x, gamma, beta, 1e-5f, y, mean, rstd);
    return testing::weighted_sum(y, w);
  };
  loss();
  Tensor dx = Tensor::zeros({rows, c}, DType::f32);
  Tensor dgamma = Tensor::zeros({c}, DType::f32), dbeta = Tensor::zeros({c}, DType::f32);
  ops::layernorm_backward(w, x, gamma, mean, rstd, dx, dgamma, dbeta);
  // eps = 1e-2 on O(1) inputs: LayerNorm is smooth (rstd ≈ 0.7), truncation error ~eps² ≈ 1e-4;
  // f32 rounding of a loss of ~10 is ~1e-6/eps = 1e-4. A wrong term would be O(0.1).
  testing::check_gradient(loss, x, dx, 1e-2, 2e-3, 1e-2);
  testing::check_gradient(loss, gamma, dgamma, 1e-2, 2e-3, 1e-2);
  testing::check_gradient(loss, beta, dbeta, 1e-2, 2e-3, 1e-2);
}

}  // namespace
}  // namespace foldcore
