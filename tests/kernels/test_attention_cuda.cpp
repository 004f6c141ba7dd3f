// CUDA attention vs the CPU reference, f32 and bf16, forward and backward (incl. dbias), at
// AlphaFold (pair bias, mask bias, gate, D = 32) and BERT (padding mask or packed, D = 64) shapes,
// plus odd sizes and strided views; global attention likewise.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "core/kernel_profile.h"
#include "core/random.h"
#include "core/tensor.h"
#include "kernels/attention.h"
#include "test_util.h"

namespace foldcore {
namespace {

using ops::AttentionGrads;
using ops::AttentionInputs;

// |cuda − cpu| ≤ tol·max|cpu| + tol·|cpu|. f32: tol 1e-3 (different summation order and fast
// exp on the GPU; errors ~1e-5 of the row scale). bf16: tol 2e-2 — the GPU rounds P and dA to
// bf16 (rel. 2^-9) before the tensor-core products and rounds outputs to bf16, while the CPU
// reference keeps them in fp32; sums over ≤ 130 keys of such terms stay within ~1e-2.
// `term_scale` is the size of the terms a result is summed from, for results that cancel to ~0:
// with one key (Lk = 1) dS = P·(dP − δ) is zero in exact math, but dP = dO·v and δ = dO·o are
// rounded differently, so dq, dk and dbias carry noise of order tol·|dO||v| — the scale of dv.
void expect_close(const Tensor& got, const Tensor& ref, double tol, const char* what, double term_scale = 0) {
  const auto r = ref.to_vector();
  double mx = term_scale;
  for (float x : r) mx = std::max(mx, static_cast<double>(std::fabs(x)));
  const auto res = testing::all_close(got.to(Device::cpu()).to(DType::f32), ref.to(DType::f32), tol * mx + 1e-6, tol);
  EXPECT_TRUE(res.ok) << what << ": " << res.message;
}

struct Setup {
  int64_t B, H, Lq, Lk, D;
  bool gated, pair_bias, mask_bias, full_bias, strided;
  std::vector<int64_t> cu;
  // Activations, outputs and gradients as views of [L, B, H, D] (autograd::attention's seq_major:
  // the column-wise attentions on projections as they lie; batch rows H·D apart, sequence rows
  // B·H·D apart). Overrides `strided`.
  bool seq_major = false;
};

// An uninitialised [B, H, L, D] tensor laid out as `like` is: a permuted view of [L, B, H, D] when
// that is how `like` lies, else contiguous.
Tensor empty_as(const Tensor& like, DType dt, Device dev) {
  const int64_t b = like.size(0), h = like.size(1), l = like.size(2), d = like.size(3);
  if (l > 1 && b > 1 && like.stride(2) > like.stride(0))
    return Tensor::empty({l, b, h, d}, dt, dev).permute({1, 2, 0, 3});
  return Tensor::empty(like.shape(), dt, dev);
}

AttentionInputs make(const Setup& s, DType dt, Device dev, uint64_t seed) {
  Generator gen(seed);
  AttentionInputs in;
  auto act = [&](int64_t L) {
    if (s.seq_major) return randn({L, s.B, s.H, s.D}, gen).to(dt).to(dev).permute({1, 2, 0, 3});
    if (!s.strided) return randn({s.B, s.H, L, s.D}, gen).to(dt).to(dev);
    return randn({s.B, L, s.H, s.D}, gen).to(dt).to(dev).permute({0, 2, 1, 3});  // [B,L,H,D] projection layout
  };
  in.q = act(s.Lq);
  in.k = act(s.Lk);
  in.v = act(s.Lk);
  if (s.gated) in.gate = act(s.Lq);
  if (s.pair_bias) in.biases.push_back(randn({1, s.H, s.Lq, s.Lk}, gen).to(dt).to(dev));
  if (s.mask_bias) {
    auto m = rand_uniform({s.B, 1, 1, s.Lk}, gen).to_vector();
    for (size_t j = 0; j < m.size(); ++j) m[j] = (m[j] < 0.2f && j % s.Lk != 0) ? -1e9f : 0.f;
    in.biases.push_back(Tensor::from_vector(m, {s.B, 1, 1, s.Lk}, dt, dev));
  }
  if (s.full_bias) in.biases.push_back(randn({s.B, s.H, s.Lq, s.Lk}, gen, 0, 0.5f).to(dt).to(dev));
  if (!s.cu.empty())
    in.cu_seqlens = Tensor::from_vector_i64(s.cu, {static_cast<int64_t>(s.cu.size())}, DType::i32, dev);
  in.scale = 1.f / std::sqrt(static_cast<float>(s.D));
  return in;
}

struct Result {
  Tensor o, a, lse;
  AttentionGrads grads;
};

Result run(const AttentionInputs& in, const Tensor& d_o) {
  const Device dev = in.q.device();
  const DType dt = in.q.dtype();
  Result r;
  r.o = empty_as(in.q, dt, dev);
  r.a = empty_as(in.q, dt, dev);
  r.lse = Tensor::empty({in.q.size(0), in.q.size(1), in.q.size(2)}, DType::f32, dev);
  ops::attention_forward(in, r.o, r.lse, r.a);
  r.grads.dq = empty_as(in.q, dt, dev);
  r.grads.dk = empty_as(in.k, dt, dev);
  r.grads.dv = empty_as(in.v, dt, dev);
  if (in.gate.defined()) r.grads.dgate = empty_as(in.q, dt, dev);
  for (const Tensor& b : in.biases) r.grads.dbias.push_back(Tensor::full(b.shape(), 0.25, DType::f32, dev));  // +=
  ops::attention_backward(in, in.gate.defined() ? r.a : r.o, r.lse, d_o, r.grads);
  synchronize(dev);
  return r;
}

void compare_inputs(const AttentionInputs& gpu, const AttentionInputs& cpu, DType dt) {
  const double tol = dt == DType::f32 ? 1e-3 : 2e-2;
  Generator gen(8);
  Tensor w = empty_as(gpu.q, dt, Device::cpu());
  w.copy_(randn(gpu.q.shape(), gen).to(dt));
  const Result rg = run(gpu, w.to(Device::cuda())), rc = run(cpu, w);
  expect_close(rg.o, rc.o, tol, "o");
  expect_close(rg.a, rc.a, tol, "a");
  expect_close(rg.lse, rc.lse, tol, "lse");
  double dv_scale = 0;
  for (float x : rc.grads.dv.to(DType::f32).to_vector()) dv_scale = std::max(dv_scale, static_cast<double>(std::fabs(x)));
  expect_close(rg.grads.dq, rc.grads.dq, tol, "dq", dv_scale);
  expect_close(rg.grads.dk, rc.grads.dk, tol, "dk", dv_scale);
  expect_close(rg.grads.dv, rc.grads.dv, tol, "dv");
  if (cpu.gate.defined()) expect_close(rg.grads.dgate, rc.grads.dgate, tol, "dgate");
  for (size_t t = 0; t < rc.grads.dbias.size(); ++t) {
    SCOPED_TRACE(t);
    expect_close(rg.grads.dbias[t], rc.grads.dbias[t], tol, "dbias", dv_scale);
  }
}

void compare(const Setup& s, DType dt) { compare_inputs(make(s, dt, Device::cuda(), 7), make(s, dt, Device::cpu(), 7), dt); }

// Parameter: dtype and the CUDA kernel family (bf16 runs both the register-tiled mma.sync kernels
// and the shared-memory ones; f32 always runs the shared-memory kernels).
// dbias_pass: the batch-shared bias gradients through the separate pass (ops::set_attention_dbias_pass).
// composed_bytes > 0: the backward composed of cuBLASLt products (ops::set_attention_bwd_composed)
// with that bound on a chunk's scores (1: one batch row per chunk, so the chunks' loop, each
// chunk's rows of the batch-indexed biases and gradients, and the dbias sums over several chunks
// all run; 256 MiB: every case here in one chunk). Packed sequences keep the fused kernel.
struct KernelCase {
  DType dtype;
  ops::AttentionKernel kernel;
  bool dbias_pass = false;
  int64_t composed_bytes = 0;
};

class AttentionCuda : public ::testing::TestWithParam<KernelCase> {
 protected:
  void SetUp() override {
    ops::set_attention_kernel(GetParam().kernel);
    ops::set_attention_dbias_pass(GetParam().dbias_pass);
    ops::set_attention_bwd_composed(GetParam().composed_bytes > 0);
    if (GetParam().composed_bytes > 0) ops::set_attention_bwd_composed_bytes(GetParam().composed_bytes);
  }
  void TearDown() override {
    ops::set_attention_kernel(saved_);
    ops::set_attention_dbias_pass(saved_pass_);
    ops::set_attention_bwd_composed(saved_composed_);
    ops::set_attention_bwd_composed_bytes(saved_composed_bytes_);
  }
  static DType dt() { return GetParam().dtype; }

 private:
  ops::AttentionKernel saved_ = ops::attention_kernel();
  bool saved_pass_ = ops::attention_dbias_pass();
  bool saved_composed_ = ops::attention_bwd_composed();
  int64_t saved_composed_bytes_ = ops::attention_bwd_composed_bytes();
};

TEST_P(AttentionCuda, AlphaFoldShapes) {
  FC_REQUIRE_CUDA();
  for (int64_t L : {64, 130}) {
    SCOPED_TRACE(L);
    compare({8, 8, L, L, 32, true, true, true, false, false, {}}, dt());
  }
}

TEST_P(AttentionCuda, BertPaddingMask) {
  FC_REQUIRE_CUDA();
  compare({2, 16, 128, 128, 64, false, false, true, false, true, {}}, dt());
}

TEST_P(AttentionCuda, BertPacked) {
  FC_REQUIRE_CUDA();
  compare({1, 4, 128, 128, 64, false, false, false, false, false, {0, 37, 37, 100, 128}}, dt());
  compare({1, 2, 200, 200, 64, true, true, false, false, false, {0, 70, 71, 200}}, dt());
}

TEST_P(AttentionCuda, OddShapesFullBiasAndPaddedHeadDims) {
  FC_REQUIRE_CUDA();
  compare({2, 3, 17, 33, 8, true, false, false, true, true, {}}, dt());
  compare({3, 2, 1, 65, 20, false, true, true, false, false, {}}, dt());
  compare({1, 1, 129, 1, 16, true, true, false, true, false, {}}, dt());
}

// The column-wise attentions' layout (autograd::attention seq_major): q, k, v, the gate, the
// outputs and every gradient as views of [L, B, H, D] (rows B·H·D apart), at the triangle
// attention's and the MSA column attention's shapes (pair bias, key mask, gate, D = 32) and an odd
// one (head dim 8, ragged tiles).
TEST_P(AttentionCuda, SeqMajorLayout) {
  FC_REQUIRE_CUDA();
  foldcore::Setup tri{6, 4, 70, 70, 32, true, true, true, false, false, {}};
  tri.seq_major = true;
  compare(tri, dt());
  foldcore::Setup msa{5, 8, 33, 33, 32, true, false, true, false, false, {}};
  msa.seq_major = true;
  compare(msa, dt());
  foldcore::Setup odd{3, 2, 17, 17, 8, true, true, false, true, false, {}};
  odd.seq_major = true;
  compare(odd, dt());
}

// Biases in every layout the kernels read differently (the mma kernels stage the biases' sum per
// tile in shared memory, 8 keys per 16-byte load where a bias's keys are unit-stride and its rows
// 16-byte aligned, one key at a time otherwise): a transposed view (keys strided), a bias
// broadcast along the keys, one aligned row broadcast over everything with Lk = 60 (the last
// 8-key vector of each row is ragged), and a view whose rows start off the 16-byte grid; four at
// once (kMaxBiases), each with its gradient.
TEST_P(AttentionCuda, BiasLayouts) {
  FC_REQUIRE_CUDA();
  const int64_t B = 2, H = 2, Lq = 70, Lk = 60, D = 32;
  auto build = [&](Device dev) {
    AttentionInputs in = make({B, H, Lq, Lk, D, true, false, false, false, false, {}}, dt(), dev, 11);
    Generator gen(12);
    in.biases.push_back(randn({1, H, Lk, Lq}, gen).to(dt()).to(dev).permute({0, 1, 3, 2}));
    in.biases.push_back(randn({B, H, Lq, 1}, gen).to(dt()).to(dev));
    in.biases.push_back(randn({1, 1, 1, Lk}, gen).to(dt()).to(dev));
    in.biases.push_back(randn({B, 1, Lq, Lk + 1}, gen).to(dt()).to(dev).narrow(3, 1, Lk));
    return in;
  };
  compare_inputs(build(Device::cuda()), build(Device::cpu()), dt());
}

// More batch rows than one launch covers: the kernels run the batch in slices (launch_over_batch),
// each indexing its rows from the slice's first. Slices of 3 rows over B = 8 (two full slices and a
// ragged one): every row's output and gradients, the bias shared by all rows (its gradient summed
// across the slices' launches) and the per-row mask come out as on the CPU.
TEST_P(AttentionCuda, BatchInSlices) {
  FC_REQUIRE_CUDA();
  const int saved = ops::attention_batch_slice();
  ops::set_attention_batch_slice(3);
  compare({8, 2, 19, 23, 32, true, true, true, false, false, {}}, dt());
  ops::set_attention_batch_slice(saved);
  EXPECT_THROW(ops::set_attention_batch_slice(0), Error);
  EXPECT_THROW(ops::set_attention_batch_slice(65536), Error);
}

// More batch rows than a grid's z extent (65,535) at the default slice: the row-chunked triangle
// attention of a pair stack at N = 4,096 runs 16 × 4,096 = 65,536 rows per call, which the kernels
// once refused. Rows on both sides of the 65,535 boundary must come out as on the CPU. On a GPU
// only: the host emulation runs the 65,537 CTAs of one kernel in about 7 minutes (BatchInSlices
// covers the slicing there).
TEST_P(AttentionCuda, BatchBeyondTheGridLimit) {
  FC_REQUIRE_CUDA();
#if FOLDCORE_CUDA_EMULATE
  GTEST_SKIP() << "65,537 CTAs per kernel: minutes on the host emulation; BatchInSlices covers the slicing";
#endif
  compare({65537, 1, 2, 3, 16, true, true, true, false, false, {}}, dt());
}

INSTANTIATE_TEST_SUITE_P(Kernels, AttentionCuda,
                         ::testing::Values(KernelCase{DType::f32, ops::AttentionKernel::smem},
                                           KernelCase{DType::bf16, ops::AttentionKernel::smem},
                                           KernelCase{DType::bf16, ops::AttentionKernel::mma},
                                           KernelCase{DType::bf16, ops::AttentionKernel::mma, true},
                                           KernelCase{DType::bf16, ops::AttentionKernel::mma, false, int64_t{256} << 20},
                                           KernelCase{DType::bf16, ops::AttentionKernel::mma, false, 1}),
                         [](const auto& info) {
                           const int64_t c = info.param.composed_bytes;
                           return std::string(dtype_name(info.param.dtype)) + "_" +
                                  ops::attention_kernel_name(info.param.kernel) +
                                  (info.param.dbias_pass ? "_dbiaspass" : "") +
                                  (c == 0 ? "" : (c == 1 ? "_composed_by_row" : "_composed"));
                         });

// The calls of each kernel whose name contains `name` in a kernel profile's report.
int64_t calls_of(const kernel_profile::Report& rep, const std::string& name) {
  int64_t n = 0;
  for (const auto& row : rep.kernels)
    if (row.name.find(name) != std::string::npos) n += row.calls;
  return n;
}

// run(in, d_o) under the kernel profile: its result and the kernels that ran.
Result profiled_run(const AttentionInputs& in, const Tensor& d_o, kernel_profile::Report& rep) {
  kernel_profile::reset();
  kernel_profile::set_enabled(true);
  Result r = run(in, d_o);
  kernel_profile::set_enabled(false);
  rep = kernel_profile::collect();
  return r;
}

// One bf16 forward of `in` under the kernel profile: one kernel ran, and its name contains `want`
// (attention_fwd_mma_kernel<Dp, pipelined, paired epilogue>: ", true, " names a pipelined one,
// ", true>" a paired epilogue).
Result profiled_mma_forward(const AttentionInputs& in, const std::string& want) {
  Result r;
  r.o = Tensor::empty(in.q.shape(), DType::bf16, Device::cuda());
  r.a = Tensor::empty(in.q.shape(), DType::bf16, Device::cuda());
  r.lse = Tensor::empty({in.q.size(0), in.q.size(1), in.q.size(2)}, DType::f32, Device::cuda());
  kernel_profile::reset();
  kernel_profile::set_enabled(true);
  ops::attention_forward(in, r.o, r.lse, r.a);
  kernel_profile::set_enabled(false);
  const kernel_profile::Report rep = kernel_profile::collect();
  EXPECT_EQ(rep.kernels.size(), 1u);
  for (const auto& row : rep.kernels) {
    EXPECT_NE(row.name.find("attention_fwd_mma_kernel<"), std::string::npos) << row.name;
    EXPECT_NE(row.name.find(want), std::string::npos) << row.name;
  }
  return r;
}

// The same values at a row offset of one element (rows off the 16-byte grid).
Tensor misaligned(const Tensor& t) {
  Shape wide = t.shape();
  wide[wide.size() - 1] += 1;
  Tensor w = Tensor::zeros(wide, t.dtype(), t.device()).narrow(wide.size() - 1, 1, t.size(-1));
  w.copy_(t);
  return w;
}

// Two forwards' o, a and lse, bit for bit.
void expect_same_forward(const Result& x, const Result& y) {
  auto host = [](const Tensor& t) { return t.to(Device::cpu()).to(DType::f32).to_vector(); };
  EXPECT_EQ(host(x.o), host(y.o));
  EXPECT_EQ(host(x.a), host(y.a));
  EXPECT_EQ(host(x.lse), host(y.lse));
}

// The mma forward's two forms (kernels/cuda/attention_fwd_mma_cuda.cu): the pipelined one
// (cp.async into two stages, the biases staged as raw bf16 and summed per score) where the rows are
// 16-byte aligned and every bias read 8 keys at a time or broadcast over the rows, the synchronous
// one otherwise.
// The same values stored so that the synchronous form must run (every bias, or k, at a row offset
// of one element) give the same bits for o, a and lse: both sum a score's biases from 0 in order
// and run the same products. Cases: a pair bias, a key mask (one staged row) and a full bias over
// Lk = 200 (a ragged last tile), gated; head dims 8 (padded to 16), 32 and 64; no bias with Lk =
// 100 (k misaligned for the synchronous run); Lk = 100 with a key mask off the 16-byte grid and a
// bias whose rows end in a partial vector. The kernel profile names the form that ran.
TEST(AttentionCudaForms, PipelinedForwardEqualsSynchronousBitForBit) {
  FC_REQUIRE_CUDA();
  const ops::AttentionKernel saved = ops::attention_kernel();
  ops::set_attention_kernel(ops::AttentionKernel::mma);
  auto forward = [](const AttentionInputs& in, bool pipelined) {
    return profiled_mma_forward(in, pipelined ? ", true, " : ", false, ");
  };
  for (int64_t D : {8, 32, 64}) {
    SCOPED_TRACE("D " + std::to_string(D));
    AttentionInputs in = make({3, 2, 70, 200, D, true, true, true, true, false, {}}, DType::bf16, Device::cuda(), 21);
    const Result pipelined = forward(in, true);
    for (Tensor& b : in.biases) b = misaligned(b);
    expect_same_forward(pipelined, forward(in, false));
  }
  AttentionInputs in = make({2, 3, 50, 100, 32, false, false, false, false, false, {}}, DType::bf16, Device::cuda(), 22);
  const Result pipelined = forward(in, true);
  in.k = misaligned(in.k);
  expect_same_forward(pipelined, forward(in, false));
  // Lk = 100: a key mask whose rows are 200 bytes apart (staged by plain loads) and a pair bias with
  // 16-byte rows whose last 8-key vector is partial (a zero-filled copy); against the synchronous
  // form of the same inputs (ops::set_attention_pipeline(false)).
  AttentionInputs ragged = make({3, 2, 50, 100, 32, true, false, true, false, false, {}}, DType::bf16, Device::cuda(), 26);
  Generator gen(27);
  ragged.biases.push_back(randn({1, 2, 50, 104}, gen).to(DType::bf16).to(Device::cuda()).narrow(3, 0, 100));
  const Result ragged_pipelined = forward(ragged, true);
  ops::set_attention_pipeline(false);
  expect_same_forward(ragged_pipelined, forward(ragged, false));
  ops::set_attention_pipeline(true);
  ops::set_attention_kernel(saved);
}

// The mma forward's epilogue reads the gate and writes a and o two bf16 at a time where D is even
// and their rows are 4-byte aligned (the kernel's kPairOut), one at a time otherwise: a gate whose
// rows start one element off the 4-byte grid (the same values) makes the second form run, and o, a
// and lse must be the same bits, for both forward forms (pipelined and synchronous) and head dims
// 8, 32 and 64; the kernel profile names the form that ran. (Odd head dims take the second form
// too: OddShapes….)
TEST(AttentionCudaForms, PairedEpilogueEqualsElementEpilogue) {
  FC_REQUIRE_CUDA();
  const ops::AttentionKernel saved = ops::attention_kernel();
  ops::set_attention_kernel(ops::AttentionKernel::mma);
  auto forward = [](const AttentionInputs& in, bool paired) {
    return profiled_mma_forward(in, paired ? ", true>" : ", false>");
  };
  for (const bool pipelined : {true, false}) {
    ops::set_attention_pipeline(pipelined);
    for (int64_t D : {8, 32, 64}) {
      SCOPED_TRACE(std::string(pipelined ? "pipelined" : "synchronous") + " D " + std::to_string(D));
      AttentionInputs in = make({3, 2, 70, 100, D, true, true, true, false, false, {}}, DType::bf16, Device::cuda(), 61);
      const Result paired = forward(in, true);
      in.gate = misaligned(in.gate);
      expect_same_forward(paired, forward(in, false));
    }
  }
  ops::set_attention_pipeline(true);
  ops::set_attention_kernel(saved);
}

// The backward's row-wise passes (preprocess, dq conversion) in their 16-byte-per-thread form
// against the per-element form (ops::set_attention_bwd_vec_rows), in the projections' [B, L, H, D]
// layout, for both kernel families and fp32: the gate's gradient and dv do not depend on delta's
// summation order and must agree bit for bit; dq and dk do (dS = P·(dP − δ)), and agree to fp32
// rounding of δ carried through one product (3e-6 of their largest entry for fp32; one bf16 ulp,
// 2^-8 relative, for bf16 outputs). The kernel profile says which kernels ran; head dim 12 (not a
// whole number of 16-byte vectors) takes the per-element ones in both settings.
TEST(AttentionCudaForms, VectorRowPassesMatchPerElementOnes) {
  FC_REQUIRE_CUDA();
  const ops::AttentionKernel saved = ops::attention_kernel();
  auto backward = [](const AttentionInputs& in, const Tensor& d_o, bool vec, bool want_vec) {
    ops::set_attention_bwd_vec_rows(vec);
    kernel_profile::Report rep;
    Result r = profiled_run(in, d_o, rep);
    ops::set_attention_bwd_vec_rows(true);
    EXPECT_EQ(calls_of(rep, "attention_bwd_pre_vec_kernel<"), want_vec ? 1 : 0);
    EXPECT_EQ(calls_of(rep, "attention_bwd_pre_kernel<"), want_vec ? 0 : 1);
    EXPECT_EQ(calls_of(rep, "dq_convert_vec_kernel<"), want_vec ? 1 : 0);
    EXPECT_EQ(calls_of(rep, "dq_convert_kernel<"), want_vec ? 0 : 1);
    return r;
  };
  auto host = [](const Tensor& t) { return t.to(Device::cpu()).to(DType::f32); };
  struct Case {
    DType dt;
    ops::AttentionKernel kernel;
  };
  for (const Case c : {Case{DType::bf16, ops::AttentionKernel::mma}, Case{DType::bf16, ops::AttentionKernel::smem},
                       Case{DType::f32, ops::AttentionKernel::smem}}) {
    ops::set_attention_kernel(c.kernel);
    for (int64_t D : {8, 12, 32, 64}) {
      SCOPED_TRACE(std::string(dtype_name(c.dt)) + " " + ops::attention_kernel_name(c.kernel) + " D " + std::to_string(D));
      const AttentionInputs in = make({2, 3, 40, 70, D, true, true, true, false, true, {}}, c.dt, Device::cuda(), 31);
      Generator gen(32);
      const Tensor d_o = randn({2, 40, 3, D}, gen).to(c.dt).to(Device::cuda()).permute({0, 2, 1, 3});
      const bool vec_fits = D != 12;
      const Result v = backward(in, d_o, true, vec_fits), e = backward(in, d_o, false, false);
      EXPECT_EQ(host(v.grads.dgate).to_vector(), host(e.grads.dgate).to_vector());
      EXPECT_EQ(host(v.grads.dv).to_vector(), host(e.grads.dv).to_vector());
      const double tol = c.dt == DType::f32 ? 3e-6 : 1.0 / 256;
      expect_close(v.grads.dq, host(e.grads.dq), tol, "dq");
      expect_close(v.grads.dk, host(e.grads.dk), tol, "dk");
    }
  }
  ops::set_attention_kernel(saved);
}

// AttentionGrads::dbias_zero: a fresh gradient slot (undefined values, NaN here) is zeroed by the op
// before it adds, on the CPU by the dispatcher and on CUDA by the vectorised preprocess (a fill
// where it cannot: the per-element preprocess, or a slot whose length is not a multiple of 4).
// Against slots that hold zeros without the flag: the same sums up to the order of the atomics.
TEST(AttentionCudaForms, FreshBiasGradientSlotsAreZeroedFirst) {
  FC_REQUIRE_CUDA();
  auto backward = [](const AttentionInputs& in, bool fresh) {
    const Device dev = in.q.device();
    Result r;
    r.o = empty_as(in.q, in.q.dtype(), dev);
    r.a = empty_as(in.q, in.q.dtype(), dev);
    r.lse = Tensor::empty({in.q.size(0), in.q.size(1), in.q.size(2)}, DType::f32, dev);
    ops::attention_forward(in, r.o, r.lse, r.a);
    r.grads.dq = empty_as(in.q, in.q.dtype(), dev);
    r.grads.dk = empty_as(in.k, in.q.dtype(), dev);
    r.grads.dv = empty_as(in.v, in.q.dtype(), dev);
    r.grads.dgate = empty_as(in.q, in.q.dtype(), dev);
    for (const Tensor& b : in.biases) {
      r.grads.dbias.push_back(Tensor::full(b.shape(), fresh ? std::nan("") : 0.0, DType::f32, dev));
      r.grads.dbias_zero.push_back(fresh);
    }
    Generator gen(9);
    const Tensor d_o = randn(in.q.shape(), gen).to(in.q.dtype()).to(dev);
    ops::attention_backward(in, r.a, r.lse, d_o, r.grads);
    return r;
  };
  for (const bool vec : {true, false})
  for (const int64_t L : {64, 65}) {  // L = 65, H = 3: the pair bias's slot is 12,675 floats (a fill)
    SCOPED_TRACE(std::string(vec ? "vectorised preprocess" : "per-element preprocess") + " L=" + std::to_string(L));
    ops::set_attention_bwd_vec_rows(vec);
    const foldcore::Setup s{4, L == 64 ? 8 : 3, L, L, 32, true, true, true, true, false, {}};
    for (const Device dev : {Device::cpu(), Device::cuda()}) {
      const AttentionInputs in = make(s, DType::bf16, dev, 11);
      const Result fresh = backward(in, true), zeroed = backward(in, false);
      for (size_t t = 0; t < fresh.grads.dbias.size(); ++t) {
        SCOPED_TRACE("dbias " + std::to_string(t) + " on " + dev.str());
        expect_close(fresh.grads.dbias[t].to(Device::cpu()), zeroed.grads.dbias[t].to(Device::cpu()), 1e-5, "dbias");
      }
    }
  }
  ops::set_attention_bwd_vec_rows(true);
}

// The mma backward's two forms of the per-score work (ops::set_attention_bwd_row_form,
// kernels/cuda/attention_bwd_mma_cuda.cu): by row (each query row's lse and delta read once, no
// range check in a full tile, the bias-gradient descriptors walked once per 16-query slice, dSᵀ
// stored as packed pairs and read back transposed for dQ) and per score. Both run the same
// expressions and add the same terms to each element in the same order, so dk, dv, the gate's
// gradient and an unshared bias gradient (each element written by one thread) are the same bits.
// dq (fp32 atomics across key blocks) and the shared bias gradients (atomics across b, h or keys)
// take their terms in the order the CTAs run, which changes from launch to launch on a GPU and on
// the host emulation alike (it runs the blocks in a seeded order that differs per launch), so
// those agree to one bf16 ulp (dq) or fp32 rounding (dbias). Cases: full tiles (L = 128: no range check, the 32-bit bias-gradient offsets
// and dQ's direct offsets) with a pair bias (shared over b), a key mask (summed over the queries
// and shared over h) and a per-row bias (unshared); ragged tiles (70 × 200) at head dims 8 and 32;
// packed segments (range checks inside full-sized tiles); four biases at once over full tiles, one
// of them broadcast along the keys. The kernel profile names the form that ran: the row form at
// head dims up to 32, the per-score form at 64 whatever the choice.
TEST(AttentionCudaForms, BackwardRowFormEqualsPerScoreForm) {
  FC_REQUIRE_CUDA();
  const ops::AttentionKernel saved = ops::attention_kernel();
  const bool saved_form = ops::attention_bwd_row_form();
  ops::set_attention_kernel(ops::AttentionKernel::mma);
  auto backward = [](const AttentionInputs& in, const Tensor& d_o, bool row_form) {
    ops::set_attention_bwd_row_form(row_form);
    kernel_profile::reset();
    kernel_profile::set_enabled(true);
    Result r = run(in, d_o);
    kernel_profile::set_enabled(false);
    const std::string want = row_form && in.q.size(3) <= 32 ? "true>" : "false>";
    int main_kernels = 0;
    for (const auto& row : kernel_profile::collect().kernels) {
      if (row.name.find("attention_bwd_mma_kernel<") == std::string::npos) continue;
      ++main_kernels;
      EXPECT_EQ(row.name.substr(row.name.size() - want.size()), want) << row.name;
    }
    EXPECT_EQ(main_kernels, 1);
    return r;
  };
  auto host = [](const Tensor& t) { return t.to(Device::cpu()).to(DType::f32).to_vector(); };
  auto expect_same = [&](const Result& x, const Result& y, const AttentionInputs& in) {
    EXPECT_EQ(host(x.grads.dk), host(y.grads.dk));
    EXPECT_EQ(host(x.grads.dv), host(y.grads.dv));
    if (x.grads.dgate.defined()) {
      EXPECT_EQ(host(x.grads.dgate), host(y.grads.dgate));
    }
    expect_close(x.grads.dq, y.grads.dq.to(Device::cpu()).to(DType::f32), 1.0 / 256, "dq");
    for (size_t t = 0; t < x.grads.dbias.size(); ++t) {
      SCOPED_TRACE("dbias " + std::to_string(t));
      const Tensor& b = in.biases[t];
      const bool unshared = b.size(0) == in.q.size(0) && b.size(1) == in.q.size(1) && b.size(2) > 1 && b.size(3) > 1;
      if (unshared) {
        EXPECT_EQ(host(x.grads.dbias[t]), host(y.grads.dbias[t]));
      } else {
        expect_close(x.grads.dbias[t], y.grads.dbias[t].to(Device::cpu()), 1e-5, "dbias");
      }
    }
  };
  auto check = [&](const AttentionInputs& in, uint64_t seed) {
    Generator gen(seed);
    Tensor d_o = empty_as(in.q, DType::bf16, Device::cuda());
    d_o.copy_(randn(in.q.shape(), gen).to(DType::bf16).to(Device::cuda()));
    const Result rows = backward(in, d_o, true), scores = backward(in, d_o, false);
    expect_same(rows, scores, in);
  };
  {
    SCOPED_TRACE("full tiles");
    check(make({3, 2, 128, 128, 32, true, true, true, true, true, {}}, DType::bf16, Device::cuda(), 51), 52);
  }
  for (int64_t D : {8, 32, 64}) {
    SCOPED_TRACE("ragged tiles, D " + std::to_string(D));
    check(make({3, 2, 70, 200, D, true, true, true, true, false, {}}, DType::bf16, Device::cuda(), 53), 54);
  }
  {
    SCOPED_TRACE("segments");
    check(make({1, 2, 192, 192, 32, true, true, false, false, false, {0, 64, 70, 192}}, DType::bf16, Device::cuda(), 55), 56);
  }
  {
    SCOPED_TRACE("four biases, full tiles");
    const int64_t B = 2, H = 2, L = 64;
    AttentionInputs in = make({B, H, L, L, 32, true, false, false, false, false, {}}, DType::bf16, Device::cuda(), 57);
    Generator gen(58);
    in.biases.push_back(randn({1, H, L, L}, gen).to(DType::bf16).to(Device::cuda()).permute({0, 1, 3, 2}));
    in.biases.push_back(randn({B, H, L, 1}, gen).to(DType::bf16).to(Device::cuda()));
    in.biases.push_back(randn({1, 1, 1, L}, gen).to(DType::bf16).to(Device::cuda()));
    in.biases.push_back(randn({B, 1, L, L}, gen).to(DType::bf16).to(Device::cuda()));
    check(in, 59);
  }
  ops::set_attention_bwd_row_form(saved_form);
  ops::set_attention_kernel(saved);
}

// The composed backward (ops::set_attention_bwd_composed): which kernels run, and its gradients
// against the fused kernel's. It runs its two row passes once per chunk of batch rows (one chunk by
// default at these sizes, B with a 1-byte bound) and neither the fused main kernel nor the dq
// conversion; with segments (cu_seqlens) the fused kernel runs. dv and the gate's gradient come
// from the same preprocess and P in bf16 (both forms round P to bf16 for its product with dA): within
// 1e-2 of the largest; dq, dk and dbias are summed from dS, which the composed form makes from the
// bf16 P and the fused one from the fp32 P: within 2^-6 of the largest term (dv's scale, as in
// compare_inputs: the one-key case cancels).
TEST(AttentionCudaForms, ComposedBackwardRunsItsProductsAndMatchesTheFusedKernel) {
  FC_REQUIRE_CUDA();
  const ops::AttentionKernel saved = ops::attention_kernel();
  const bool saved_composed = ops::attention_bwd_composed();
  const int64_t saved_bytes = ops::attention_bwd_composed_bytes();
  ops::set_attention_kernel(ops::AttentionKernel::mma);
  auto backward = [](const AttentionInputs& in, const Tensor& d_o, bool composed, int want_chunks) {
    ops::set_attention_bwd_composed(composed);
    kernel_profile::Report rep;
    Result r = profiled_run(in, d_o, rep);
    EXPECT_EQ(calls_of(rep, "attention_scores_pass_kernel<__nv_bfloat16, false>"), want_chunks);  // P
    EXPECT_EQ(calls_of(rep, "attention_scores_pass_kernel<__nv_bfloat16, true>"), want_chunks);   // dS
    EXPECT_EQ(calls_of(rep, "attention_bwd_mma_kernel<"), want_chunks == 0 ? 1 : 0);
    EXPECT_EQ(calls_of(rep, "dq_convert"), want_chunks == 0 ? 1 : 0);
    return r;
  };
  auto check = [&](const AttentionInputs& in, uint64_t seed, int chunks) {
    Generator gen(seed);
    Tensor d_o = empty_as(in.q, DType::bf16, Device::cuda());
    d_o.copy_(randn(in.q.shape(), gen).to(DType::bf16).to(Device::cuda()));
    const Result fused = backward(in, d_o, false, 0), composed = backward(in, d_o, true, chunks);
    if (chunks == 0) return;
    auto ref = [](const Tensor& t) { return t.to(Device::cpu()).to(DType::f32); };
    double dv_scale = 0;
    for (float x : ref(fused.grads.dv).to_vector()) dv_scale = std::max(dv_scale, static_cast<double>(std::fabs(x)));
    expect_close(composed.grads.dv, ref(fused.grads.dv), 1e-2, "dv");
    if (in.gate.defined()) expect_close(composed.grads.dgate, ref(fused.grads.dgate), 1e-2, "dgate");
    expect_close(composed.grads.dq, ref(fused.grads.dq), 1.0 / 64, "dq", dv_scale);
    expect_close(composed.grads.dk, ref(fused.grads.dk), 1.0 / 64, "dk", dv_scale);
    for (size_t t = 0; t < fused.grads.dbias.size(); ++t) {
      SCOPED_TRACE("dbias " + std::to_string(t));
      expect_close(composed.grads.dbias[t], ref(fused.grads.dbias[t]), 1.0 / 64, "dbias", dv_scale);
    }
  };
  const AttentionInputs af2 = make({4, 8, 64, 64, 32, true, true, true, false, true, {}}, DType::bf16, Device::cuda(), 61);
  {
    SCOPED_TRACE("MSA row attention's form, one chunk");
    check(af2, 62, 1);
  }
  {
    SCOPED_TRACE("the same, one batch row per chunk");
    ops::set_attention_bwd_composed_bytes(1);
    check(af2, 62, 4);
    ops::set_attention_bwd_composed_bytes(saved_bytes);
  }
  {
    SCOPED_TRACE("ragged shapes, a full bias");
    check(make({3, 2, 70, 45, 32, false, true, true, true, false, {}}, DType::bf16, Device::cuda(), 63), 64, 1);
  }
  {
    SCOPED_TRACE("segments: the fused kernel");
    check(make({1, 2, 192, 192, 32, true, true, false, false, false, {0, 64, 70, 192}}, DType::bf16, Device::cuda(), 65),
          66, 0);
  }
  EXPECT_THROW(ops::set_attention_bwd_composed_bytes(0), Error);
  ops::set_attention_bwd_composed(saved_composed);
  ops::set_attention_kernel(saved);
}

TEST(AttentionCudaErrors, HeadDimAbove64IsAnError) {
  FC_REQUIRE_CUDA();
  const AttentionInputs in = make({1, 1, 8, 8, 80, false, false, false, false, false, {}}, DType::f32, Device::cuda(), 1);
  Tensor o = Tensor::empty(in.q.shape(), DType::f32, Device::cuda());
  Tensor lse = Tensor::empty({1, 1, 8}, DType::f32, Device::cuda());
  EXPECT_THROW(ops::attention_forward(in, o, lse), Error);
}

class GlobalAttentionCuda : public ::testing::TestWithParam<DType> {};

TEST_P(GlobalAttentionCuda, MatchesCpu) {
  FC_REQUIRE_CUDA();
  const DType dt = GetParam();
  const double tol = dt == DType::f32 ? 1e-3 : 2e-2;
  for (int64_t S : {7, 300}) {
    SCOPED_TRACE(S);
    const int64_t B = 5, H = 8, D = 8;
    Generator gen(41);
    const Tensor q = randn({B, H, D}, gen).to(dt), k = randn({B, S, D}, gen).to(dt), v = randn({B, S, D}, gen).to(dt);
    const Tensor g = randn({B, S, H, D}, gen).to(dt), bias = randn({B, S}, gen).to(dt), w = randn({B, S, H, D}, gen).to(dt);
    auto run_global = [&](Device dev) {
      std::vector<Tensor> r = {Tensor::empty({B, S, H, D}, dt, dev), Tensor::empty({B, H, D}, dt, dev),
                               Tensor::empty({B, H, D}, dt, dev),    Tensor::empty({B, S, D}, dt, dev),
                               Tensor::empty({B, S, D}, dt, dev),    Tensor::empty({B, S, H, D}, dt, dev)};
      const Tensor qd = q.to(dev), kd = k.to(dev), vd = v.to(dev), bd = bias.to(dev), gd = g.to(dev);
      ops::global_attention_forward(qd, kd, vd, bd, gd, 0.35f, r[0], r[1]);
      ops::global_attention_backward(qd, kd, vd, bd, gd, 0.35f, r[1], w.to(dev), r[2], r[3], r[4], r[5]);
      synchronize(dev);
      return r;
    };
    const auto rg = run_global(Device::cuda()), rc = run_global(Device::cpu());
    const char* names[] = {"o", "a", "dq", "dk", "dv", "dg"};
    for (int t = 0; t < 6; ++t) expect_close(rg[t], rc[t], tol, names[t]);
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, GlobalAttentionCuda, ::testing::Values(DType::f32, DType::bf16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

class AttentionCombineCuda : public ::testing::TestWithParam<DType> {};

// The split-key merge on CUDA vs the CPU reference on the same inputs: strided (projection-layout)
// outputs, some rows with an empty side (lse −inf), very different lse (weights underflowing).
TEST_P(AttentionCombineCuda, MatchesCpu) {
  FC_REQUIRE_CUDA();
  const DType dt = GetParam();
  const double tol = dt == DType::f32 ? 1e-5 : 1e-2;  // expf/logf vs std::exp/log; bf16 output rounding
  const int64_t B = 3, H = 4, L = 257, D = 16;
  Generator gen(61);
  const Tensor a = randn({B, L, H, D}, gen).to(dt), p = randn({B, L, H, D}, gen).to(dt);
  auto lse_vec = [&](float scale) {
    auto v = randn({B, H, L}, gen, 0, scale).to_vector();
    for (size_t i = 0; i < v.size(); i += 17) v[i] = -std::numeric_limits<float>::infinity();
    return v;
  };
  const auto lv = lse_vec(3.f), pv = lse_vec(40.f);
  auto run_combine = [&](Device dev) {
    const Tensor ad = a.to(dev).permute({0, 2, 1, 3});  // [B,H,L,D] view of [B,L,H,D]
    Tensor ld = Tensor::from_vector(lv, {B, H, L}, DType::f32, dev);
    ops::attention_combine(ad, ld, p.to(dev).permute({0, 2, 1, 3}), Tensor::from_vector(pv, {B, H, L}, DType::f32, dev));
    synchronize(dev);
    return std::pair{ad.contiguous(), ld};
  };
  const auto [ag, lg] = run_combine(Device::cuda());
  const auto [ac, lc] = run_combine(Device::cpu());
  expect_close(ag, ac, tol, "a");
  const auto lgv = lg.to(Device::cpu()).to_vector(), lcv = lc.to_vector();
  for (size_t i = 0; i < lcv.size(); ++i) {
    if (std::isinf(lcv[i])) EXPECT_EQ(lgv[i], lcv[i]) << i;
    else EXPECT_NEAR(lgv[i], lcv[i], 1e-5 * (1 + std::fabs(lcv[i]))) << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, AttentionCombineCuda, ::testing::Values(DType::f32, DType::bf16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

}  // namespace
}  // namespace foldcore
