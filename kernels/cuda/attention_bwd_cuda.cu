// FlashAttention-2-style backward.
//  1. preprocess (one warp per row): dA = dO ⊙ σ(g) (written to a bf16 scratch for the register-tiled
//     kernel; the shared-memory kernel forms it again per tile), delta[i] = Σ_d dA·a, dg = dO ⊙ a ⊙ σ(1−σ).
//  2. main kernel: one CTA per (key tile of 64, h, b). K, V stay in shared memory; for every query
//     tile that can see these keys: recompute S = Q Kᵀ and p = exp(scale·S + Σbias − lse),
//     dP = dA Vᵀ, dS = p ⊙ (dP − delta); dV += Pᵀ dA and dK += dSᵀ Q accumulate in shared fp32;
//     dQ += dS K goes to an fp32 scratch with atomicAdd; dbias is written per tile (sums over
//     query rows kept per column in registers and written once at the end).
//  3. dq scratch → dq (dtype, strides) with the scale applied.
// For bf16 the main kernel is by default the register-tiled one (attention_bwd_mma_cuda.cu; see
// ops::AttentionKernel); steps 1 and 3 are the same for both.
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <utility>

#include "core/cuda/vec.cuh"
#include "kernels/cuda/attention_common.cuh"
#include "kernels/cuda/attention_cuda.h"
#include "kernels/cuda/attention_mma.cuh"
#include "core/profile.h"

namespace foldcore::ops::cuda {
namespace detail {
namespace {

template <typename T> __global__ void attention_bwd_pre_kernel(const AttnParams p, const T* a, int64_t a0, int64_t a1, int64_t a2) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= static_cast<int64_t>(p.B) * p.H * p.Lq) return;
  const int i = static_cast<int>(row % p.Lq), h = static_cast<int>((row / p.Lq) % p.H), b = static_cast<int>(row / p.Lq / p.H);
  const T* dor = static_cast<const T*>(p.d_o) + b * p.do_s[0] + h * p.do_s[1] + i * p.do_s[2];
  const T* ar = a + b * a0 + h * a1 + i * a2;
  float delta = 0.f;
  for (int d = lane; d < p.D; d += 32) {
    const float dov = to_f32(dor[d]), av = to_f32(ar[d]);
    float sg = 1.f;
    if (p.g) {
      sg = sigmoidf_(to_f32(static_cast<const T*>(p.g)[b * p.g_s[0] + h * p.g_s[1] + i * p.g_s[2] + d]));
      if (p.dg)
        static_cast<T*>(p.dg)[b * p.dg_s[0] + h * p.dg_s[1] + i * p.dg_s[2] + d] = from_f32<T>(dov * av * sg * (1.f - sg));
    }
    delta += dov * sg * av;
    if (p.da) p.da[row * p.D + d] = bf16_bits(dov * sg);  // the mma kernel's dA (T is bf16 there)
  }
  delta = warp_sum(delta);
  if (lane == 0) p.delta[row] = delta;
}

// Fresh bias-gradient slots the preprocess zeroes before the main kernel adds into them: up to
// kMaxBiases contiguous fp32 ranges, 16-byte aligned, n a multiple of 4 (ptr null: none).
struct ZeroRanges {
  float* ptr[kMaxBiases];
  int64_t n[kMaxBiases];
};

// The same, vectorised: each thread takes V = 16 / sizeof(T) consecutive head-dim elements of a
// row (one 16-byte access per tensor), a row's D / V threads are adjacent lanes (D / V a power of
// two ≤ 32, `lanes_log2` its log) and sum delta with xor shuffles; the row's indices are
// decomposed once per thread, in I (32-bit where B·H·Lq·D/V fits). It also zeroes the thread's V
// elements of the dq accumulator (fp32, 16-byte aligned: D is a multiple of V) and its share of
// the `zero` ranges. The caller checks that every pointer and every row stride is a multiple of V
// elements. delta is summed in another order than the per-element kernel's (V elements in turn,
// then the lanes' tree): the same value to fp32 rounding.
template <typename T, typename I>
__global__ void attention_bwd_pre_vec_kernel(const AttnParams p, const T* a, int64_t a0, int64_t a1, int64_t a2,
                                             int lanes_log2, const ZeroRanges zero) {
  constexpr int V = 16 / static_cast<int>(sizeof(T));
  const I t = static_cast<I>(blockIdx.x) * static_cast<I>(blockDim.x) + static_cast<I>(threadIdx.x);
  const VecOf<float, 4> z4{};
  {  // the fresh dbias slots, four floats per thread and step over the whole grid
    const int64_t threads = static_cast<int64_t>(gridDim.x) * blockDim.x;
    FC_UNROLL
    for (int r = 0; r < kMaxBiases; ++r)
      if (zero.ptr[r])
        for (int64_t e = 4 * static_cast<int64_t>(t); e < zero.n[r]; e += 4 * threads) store_vec<float, 4>(zero.ptr[r] + e, z4);
  }
  const I row = t >> lanes_log2;
  const int d0 = static_cast<int>(t & ((I(1) << lanes_log2) - 1)) * V;
  const bool active = row < static_cast<I>(p.B) * static_cast<I>(p.H) * static_cast<I>(p.Lq);
  float delta = 0.f;
  if (active) {  // every lane still takes part in the shuffles below
    const I i = row % static_cast<I>(p.Lq), bh = row / static_cast<I>(p.Lq);
    const I h = bh % static_cast<I>(p.H), b = bh / static_cast<I>(p.H);
    const VecOf<T, V> dov = load_vec<T, V>(static_cast<const T*>(p.d_o) + b * p.do_s[0] + h * p.do_s[1] + i * p.do_s[2] + d0);
    const VecOf<T, V> av = load_vec<T, V>(a + b * a0 + h * a1 + i * a2 + d0);
    VecOf<T, V> gv{}, dgv;
    if (p.g) gv = load_vec<T, V>(static_cast<const T*>(p.g) + b * p.g_s[0] + h * p.g_s[1] + i * p.g_s[2] + d0);
    VecOf<uint16_t, V> dav;
    FC_UNROLL
    for (int e = 0; e < V; ++e) {
      const float dof = to_f32(dov.v[e]), af = to_f32(av.v[e]);
      float sg = 1.f;
      if (p.g) {
        sg = sigmoidf_(to_f32(gv.v[e]));
        dgv.v[e] = from_f32<T>(dof * af * sg * (1.f - sg));
      }
      delta += dof * sg * af;
      dav.v[e] = bf16_bits(dof * sg);
    }
    if (p.g && p.dg) store_vec<T, V>(static_cast<T*>(p.dg) + b * p.dg_s[0] + h * p.dg_s[1] + i * p.dg_s[2] + d0, dgv);
    if (p.da) store_vec<uint16_t, V>(p.da + static_cast<int64_t>(row) * p.D + d0, dav);
    if (p.dq_acc) {  // the main kernel's dq accumulator, [rows, D] fp32: zeroed here, not by a memset
      float* q = p.dq_acc + static_cast<int64_t>(row) * p.D + d0;
      FC_UNROLL
      for (int e = 0; e < V; e += 4) store_vec<float, 4>(q + e, z4);
    }
  }
  for (int o = 1; o < (1 << lanes_log2); o <<= 1) delta += __shfl_xor_sync(0xffffffffu, delta, o);
  if (active && d0 == 0) p.delta[row] = delta;
}

template <typename T, int Dp> struct BwdLayout {
  static constexpr int kLdT = ld_tile<T>(Dp);
  static constexpr int kLdS = kBlockN + 4;
  static constexpr bool kSeparateP = !std::is_same_v<T, float>;  // f32: P, dS overwrite S, dP in place
  static constexpr int kLdP = kSeparateP ? kBlockN + 8 : kLdS;
  static constexpr int kLdO = Dp + 4;
  static constexpr size_t kTileT = sizeof(T) * kBlockM * kLdT;  // kBlockM == kBlockN
  static constexpr size_t kQ = 0, kDA = kQ + kTileT, kK = kDA + kTileT, kV = kK + kTileT;
  static constexpr size_t kS = kV + kTileT;
  static constexpr size_t kDP = kS + sizeof(float) * kBlockM * kLdS;
  static constexpr size_t kP = kDP + sizeof(float) * kBlockM * kLdS;
  static constexpr size_t kDS = kP + (kSeparateP ? sizeof(T) * kBlockM * kLdP : 0);
  static constexpr size_t kDK = kDS + (kSeparateP ? sizeof(T) * kBlockM * kLdP : 0);
  static constexpr size_t kDV = kDK + sizeof(float) * kBlockN * kLdO;
  static constexpr size_t kDQ = kDV + sizeof(float) * kBlockN * kLdO;
  static constexpr size_t kRows = kDQ + sizeof(float) * kBlockM * kLdO;  // lse, delta, lo, hi
  static constexpr size_t kPart = kRows + 4 * sizeof(float) * kBlockM;
  static constexpr size_t kBytes = kPart + sizeof(float) * 2 * kMaxBiases * kBlockN;
};
static_assert(kBlockM == kBlockN, "the backward layout assumes square tiles");
static_assert(kThreads == 2 * kBlockN, "the dS pass maps two threads to each key column");

template <typename T, int Dp> __global__ void __launch_bounds__(kThreads) attention_bwd_kernel(const AttnParams p) {
  using L = BwdLayout<T, Dp>;
  FC_DYNAMIC_SHARED(unsigned char, smem, 128);
  T* sq = reinterpret_cast<T*>(smem + L::kQ);
  T* sda = reinterpret_cast<T*>(smem + L::kDA);
  T* sk = reinterpret_cast<T*>(smem + L::kK);
  T* sv = reinterpret_cast<T*>(smem + L::kV);
  float* ss = reinterpret_cast<float*>(smem + L::kS);
  float* sdp = reinterpret_cast<float*>(smem + L::kDP);
  T* sp = reinterpret_cast<T*>(smem + (L::kSeparateP ? L::kP : L::kS));
  T* sds = reinterpret_cast<T*>(smem + (L::kSeparateP ? L::kDS : L::kDP));
  float* sdk = reinterpret_cast<float*>(smem + L::kDK);
  float* sdv = reinterpret_cast<float*>(smem + L::kDV);
  float* sdq = reinterpret_cast<float*>(smem + L::kDQ);
  float* s_lse = reinterpret_cast<float*>(smem + L::kRows);
  float* s_delta = s_lse + kBlockM;
  int* row_lo = reinterpret_cast<int*>(s_delta + kBlockM);
  int* row_hi = row_lo + kBlockM;
  float* part = reinterpret_cast<float*>(smem + L::kPart);  // [2][kMaxBiases][kBlockN]

  const int j0 = blockIdx.x * kBlockN, h = blockIdx.y, b = p.b0 + static_cast<int>(blockIdx.z);
  const int tid = threadIdx.x;
  const T* q = head_slice<T>(p.q, p.q_s, b, h);
  const T* k = head_slice<T>(p.k, p.k_s, b, h);
  const T* v = head_slice<T>(p.v, p.v_s, b, h);
  const T* dO = head_slice<T>(p.d_o, p.do_s, b, h);
  const T* g = p.g ? head_slice<T>(p.g, p.g_s, b, h) : nullptr;
  const int64_t bh_row = (static_cast<int64_t>(b) * p.H + h) * p.Lq;  // first row of (b,h) in delta/dq_acc

  int i_begin, i_end;
  bwd_query_range(p, j0, min(j0 + kBlockN, p.Lk) - 1, i_begin, i_end);
  load_tile<kBlockN, Dp>(sk, L::kLdT, k, p.k_s[2], j0, p.Lk, p.D);
  load_tile<kBlockN, Dp>(sv, L::kLdT, v, p.v_s[2], j0, p.Lk, p.D);
  for (int idx = tid; idx < kBlockN * L::kLdO; idx += kThreads) sdk[idx] = sdv[idx] = 0.f;

  const int jj = tid % kBlockN, half = tid / kBlockN, j = j0 + jj;  // dS pass: thread ↔ column
  float colsum[kMaxBiases] = {0.f, 0.f, 0.f, 0.f};

  for (int i0 = i_begin; i0 < i_end; i0 += kBlockM) {
    bwd_load_query_rows<kBlockM>(p, b, h, i0, i_end, bh_row, row_lo, row_hi, s_lse, s_delta);
    load_tile<kBlockM, Dp>(sq, L::kLdT, q, p.q_s[2], i0, i_end, p.D);
    for (int idx = tid; idx < kBlockM * Dp; idx += kThreads) {  // dA = dO ⊙ σ(g)
      const int r = idx / Dp, c = idx % Dp;
      sda[r * L::kLdT + c] = from_f32<T>(bwd_da(dO, g, p, i0 + r, i_end, c));
    }
    __syncthreads();
    smem_gemm<kBlockM, kBlockN, Dp, false, true, false>(sq, L::kLdT, sk, L::kLdT, ss, L::kLdS);    // S = Q Kᵀ
    smem_gemm<kBlockM, kBlockN, Dp, false, true, false>(sda, L::kLdT, sv, L::kLdT, sdp, L::kLdS);  // dP = dA Vᵀ
    __syncthreads();
    for (int r = half; r < kBlockM; r += 2) {
      const int i = i0 + r;
      float pv = 0.f, ds = 0.f;
      const bool valid = j < p.Lk && j >= row_lo[r] && j < row_hi[r];
      if (valid) {
        pv = __expf(ss[r * L::kLdS + jj] * p.scale + bias_sum<T>(p, b, h, i, j) - s_lse[r]);
        ds = pv * (sdp[r * L::kLdS + jj] - s_delta[r]);
#pragma unroll
        for (int t = 0; t < kMaxBiases; ++t) {
          const DbiasDesc& db = p.dbias[t];
          if (!db.ptr) continue;
          if (db.sum_i) {
            colsum[t] += ds;
          } else {
            float* e = db.ptr + b * db.s[0] + h * db.s[1] + i * db.s[2] + j * db.s[3];
            if (db.shared) atomicAdd(e, ds);
            else *e += ds;
          }
        }
      }
      sp[r * L::kLdP + jj] = from_f32<T>(pv);
      sds[r * L::kLdP + jj] = from_f32<T>(ds);
    }
    __syncthreads();
    smem_gemm<kBlockN, Dp, kBlockM, true, false, true>(sp, L::kLdP, sda, L::kLdT, sdv, L::kLdO);   // dV += Pᵀ dA
    smem_gemm<kBlockN, Dp, kBlockM, true, false, true>(sds, L::kLdP, sq, L::kLdT, sdk, L::kLdO);   // dK += dSᵀ Q
    if (p.dq_acc) smem_gemm<kBlockM, Dp, kBlockN, false, false, false>(sds, L::kLdP, sk, L::kLdT, sdq, L::kLdO);  // dQ
    __syncthreads();
    if (p.dq_acc) {
      for (int idx = tid; idx < kBlockM * Dp; idx += kThreads) {
        const int r = idx / Dp, c = idx % Dp, i = i0 + r;
        if (i < i_end && c < p.D) atomicAdd(p.dq_acc + (bh_row + i) * p.D + c, p.scale * sdq[r * L::kLdO + c]);
      }
    }
    __syncthreads();
  }

  // dK = scale · Σ dSᵀ Q, dV = Σ Pᵀ dA.
  for (int idx = tid; idx < kBlockN * Dp; idx += kThreads) {
    const int r = idx / Dp, c = idx % Dp, jr = j0 + r;
    if (jr >= p.Lk || c >= p.D) continue;
    if (p.dk)
      static_cast<T*>(p.dk)[b * p.dk_s[0] + h * p.dk_s[1] + jr * p.dk_s[2] + c] = from_f32<T>(p.scale * sdk[r * L::kLdO + c]);
    if (p.dv)
      static_cast<T*>(p.dv)[b * p.dv_s[0] + h * p.dv_s[1] + jr * p.dv_s[2] + c] = from_f32<T>(sdv[r * L::kLdO + c]);
  }
  // dbias summed over query rows: combine the two row halves in a fixed order, then write.
#pragma unroll
  for (int t = 0; t < kMaxBiases; ++t) part[(half * kMaxBiases + t) * kBlockN + jj] = colsum[t];
  __syncthreads();
  if (half == 0 && j < p.Lk) {
#pragma unroll
    for (int t = 0; t < kMaxBiases; ++t) {
      const DbiasDesc& db = p.dbias[t];
      if (!db.ptr || !db.sum_i) continue;
      const float total = part[t * kBlockN + jj] + part[(kMaxBiases + t) * kBlockN + jj];
      float* e = db.ptr + b * db.s[0] + h * db.s[1] + j * db.s[3];
      if (db.shared) atomicAdd(e, total);
      else *e += total;
    }
  }
}

template <typename T> __global__ void dq_convert_kernel(const float* acc, T* dq, int H, int Lq, int D, int64_t s0, int64_t s1, int64_t s2, int64_t n) {
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < n;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t d = idx % D, i = (idx / D) % Lq, h = (idx / D / Lq) % H, b = idx / D / Lq / H;
    dq[b * s0 + h * s1 + i * s2 + d] = from_f32<T>(acc[idx]);
  }
}

// The same, V = 16 / sizeof(T) elements per thread (one 16-byte store, the fp32 reads as 16-byte
// vectors), the index decomposed once per vector in I; D, the strides and dq's pointer multiples
// of V (the caller checks).
template <typename T, typename I>
__global__ void dq_convert_vec_kernel(const float* acc, T* dq, int H, int Lq, int D, int64_t s0, int64_t s1, int64_t s2,
                                      I n_vecs) {
  constexpr int V = 16 / static_cast<int>(sizeof(T));
  const I dv = static_cast<I>(D / V);
  for (I t = static_cast<I>(blockIdx.x) * static_cast<I>(blockDim.x) + static_cast<I>(threadIdx.x); t < n_vecs;
       t += static_cast<I>(gridDim.x) * static_cast<I>(blockDim.x)) {
    const I row = t / dv, d = (t - row * dv) * V;
    const I i = row % static_cast<I>(Lq), bh = row / static_cast<I>(Lq);
    const I h = bh % static_cast<I>(H), b = bh / static_cast<I>(H);
    const VecOf<float, V> in = load_vec<float, V>(acc + static_cast<int64_t>(t) * V);
    VecOf<T, V> out;
    FC_UNROLL
    for (int e = 0; e < V; ++e) out.v[e] = from_f32<T>(in.v[e]);
    store_vec<T, V>(dq + b * s0 + h * s1 + i * s2 + d, out);
  }
}

// Whether the attention backward's row-wise passes may use their vector kernels: V = 16 /
// sizeof(T) divides D and D / V is a power of two ≤ 32, and every pointer and row stride given
// is a multiple of V elements.
template <typename T> bool vec_rows_ok(int D, std::initializer_list<std::pair<const void*, const int64_t*>> tensors) {
  constexpr int V = 16 / static_cast<int>(sizeof(T));
  if (D % V != 0 || D / V > 32 || ((D / V) & (D / V - 1)) != 0) return false;
  for (const auto& [ptr, s] : tensors) {
    if (ptr == nullptr) continue;
    if (reinterpret_cast<uintptr_t>(ptr) % 16 != 0) return false;
    for (int k = 0; k < 3; ++k)
      if (s[k] % V != 0) return false;
  }
  return true;
}

int log2_exact(int v) {
  int l = 0;
  while ((1 << l) < v) ++l;
  return l;
}

}  // namespace
}  // namespace detail

void attention_backward(const AttentionInputs& in, const Tensor& a_or_o, const Tensor& lse, const Tensor& d_o,
                        const AttentionGrads& grads) {
  using namespace detail;
  AttnParams p = make_params(in);
  if (p.B == 0 || p.H == 0 || p.Lq == 0 || p.Lk == 0) {
    grads.zero_fresh_dbias();
    if (grads.dq.defined()) Tensor(grads.dq).zero_();
    if (grads.dk.defined()) Tensor(grads.dk).zero_();
    if (grads.dv.defined()) Tensor(grads.dv).zero_();
    if (grads.dgate.defined()) Tensor(grads.dgate).zero_();
    return;
  }
  FC_CHECK(p.H <= 65535, "attention_backward (CUDA): H must be <= 65535, got H = ", p.H);
  const Device dev = in.q.device();
  set_device(dev);
  // FOLDCORE_PROFILE=1: the op's time and its phases (attention_bwd/pre, main, dbias_pass,
  // dq_convert; each waits for the device at its ends, so they add up to the op's time).
  const profile::Scope stage("attention_bwd", dev);
  std::optional<profile::Scope> phase;  // ends before `stage`
  const cudaStream_t stream = cuda_stream_of(dev);
  p.lse = lse.data<float>();
  for (int d = 0; d < 3; ++d) {
    p.lse_s[d] = lse.stride(d);
    p.do_s[d] = d_o.stride(d);
  }
  p.d_o = d_o.data_ptr();
  auto set3 = [](const Tensor& t, void*& ptr, int64_t* s) {
    if (!t.defined()) return;
    ptr = t.data_ptr();
    for (int d = 0; d < 3; ++d) s[d] = t.stride(d);
  };
  set3(grads.dk, p.dk, p.dk_s);
  set3(grads.dv, p.dv, p.dv_s);
  set3(grads.dgate, p.dg, p.dg_s);
  const int64_t rows = static_cast<int64_t>(p.B) * p.H * p.Lq;
  Tensor delta = Tensor::empty({rows}, DType::f32, dev);
  p.delta = delta.data<float>();
  // The register-tiled main kernel reads dA = dO ⊙ σ(g) from a bf16 scratch the preprocess
  // writes (row-major, 16-byte loads) instead of forming it from dO and g in every key block; so
  // does the composed backward (its products' dA operand), which needs no dq accumulator.
  const bool mma = use_mma_kernels(p, in.q.dtype());
  const bool composed = mma && attention_bwd_composed() && p.cu == nullptr;
  // The dq accumulator [rows, D] (fp32 atomics of the main kernel), zeroed by the vectorised
  // preprocess as it passes each row, else by a memset before the per-element one.
  Tensor dq_acc;
  if (grads.dq.defined() && !composed) {
    dq_acc = Tensor::empty({rows * p.D}, DType::f32, dev);
    p.dq_acc = dq_acc.data<float>();
  }
  for (size_t t = 0; t < grads.dbias.size(); ++t) {
    const Tensor& db = grads.dbias[t];
    if (!db.defined()) continue;
    DbiasDesc& d = p.dbias[t];
    d.ptr = db.data<float>();
    for (int a = 0; a < 4; ++a) d.s[a] = db.size(a) == 1 ? 0 : db.stride(a);
    d.sum_i = db.size(2) == 1;
    // Another CTA (other b or h) or another thread of this CTA (other j) adds to the same element.
    d.shared = (db.size(0) == 1 && p.B > 1) || (db.size(1) == 1 && p.H > 1) || (db.size(3) == 1 && p.Lk > 1);
    d.off32 = (p.Lq - 1) * d.s[2] + (p.Lk - 1) * d.s[3] <= INT32_MAX;
  }

  Tensor da;
  if (mma) {
    da = Tensor::empty({rows * p.D}, DType::bf16, dev);
    p.da = static_cast<uint16_t*>(da.data_ptr());
  }

  cuda_dispatch_float(in.q.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const int warps_per_block = 8;
    phase.emplace("pre", dev);  // dA = dO ⊙ σ(g) (the mma kernel's scratch), delta, dg, the dq scratch zeroed
    const int64_t a_s[3] = {a_or_o.stride(0), a_or_o.stride(1), a_or_o.stride(2)};
    constexpr int V = 16 / static_cast<int>(sizeof(T));
    const bool vec_pre = attention_bwd_vec_rows() &&
        vec_rows_ok<T>(p.D, {{p.d_o, p.do_s}, {a_or_o.data_ptr(), a_s}, {p.g, p.g_s}, {p.dg, p.dg_s}});
    if (dq_acc.defined() && !vec_pre) {
      ::foldcore::detail::count_launch();
      const kernel_profile::detail::Scope timed("memset (attention dq accumulator)", stream);
      FC_CUDA_CHECK(cudaMemsetAsync(dq_acc.data_ptr(), 0, dq_acc.nbytes(), stream));
    }
    // Fresh dbias slots: zeroed by the vectorised preprocess where they are contiguous, aligned
    // and a multiple of 4 floats long, else here.
    ZeroRanges zero{};
    for (size_t t = 0; t < grads.dbias_zero.size(); ++t) {
      const Tensor& db = grads.dbias[t];
      if (!grads.dbias_zero[t] || !db.defined()) continue;
      if (vec_pre && db.is_contiguous() && db.numel() % 4 == 0 && reinterpret_cast<uintptr_t>(db.data_ptr()) % 16 == 0) {
        zero.ptr[t] = db.data<float>();
        zero.n[t] = db.numel();
      } else {
        Tensor(db).zero_();
      }
    }
    if (vec_pre) {
      const int lanes_log2 = log2_exact(p.D / V);
      const int64_t threads = rows << lanes_log2;
      const unsigned grid = static_cast<unsigned>((threads + 255) / 256);
      auto go = [&](auto itag) {
        using I = decltype(itag);
        launch_kernel<attention_bwd_pre_vec_kernel<T, I>>(grid, 256, 0, stream, p, static_cast<const T*>(a_or_o.data_ptr()),
                                                          a_s[0], a_s[1], a_s[2], lanes_log2, zero);
      };
      if (static_cast<int64_t>(grid) * 256 <= INT32_MAX) go(int32_t{});
      else go(int64_t{});
    } else {
      launch_kernel<attention_bwd_pre_kernel<T>>(static_cast<unsigned>((rows + warps_per_block - 1) / warps_per_block), 32 * warps_per_block, 0, stream,
          p, static_cast<const T*>(a_or_o.data_ptr()), a_s[0], a_s[1], a_s[2]);
    }
    FC_CUDA_CHECK_LAUNCH();
    phase.reset();
    phase.emplace("main", dev);
    if (composed) {
      run_attention_bwd_composed(in, p, grads, da, stream);
    } else if (mma) {
      // The opt-in pass takes the gradients of the biases shared by the batch rows (not summed over
      // query rows) away from the main kernel's atomics.
      AttnParams pass = p;
      bool any_pass = false;
      for (int t = 0; t < kMaxBiases; ++t) {
        DbiasDesc& main = p.dbias[t];
        DbiasDesc& own = pass.dbias[t];
        const Tensor* db = static_cast<size_t>(t) < grads.dbias.size() ? &grads.dbias[t] : nullptr;
        const bool batch_shared = attention_dbias_pass() && main.ptr && db && db->size(0) == 1 && p.B > 1 && !main.sum_i;
        if (!batch_shared) {
          own.ptr = nullptr;
          continue;
        }
        own.shared = (db->size(1) == 1 && p.H > 1) || (db->size(3) == 1 && p.Lk > 1);
        main.ptr = nullptr;
        any_pass = true;
      }
      launch_attention_bwd_mma(p, stream);
      if (any_pass) {
        phase.reset();
        phase.emplace("dbias_pass", dev);
        launch_attention_dbias_mma(pass, stream);
      }
    } else dispatch_head_dim(p.D, "attention_backward (CUDA)", [&](auto dp) {
      constexpr int Dp = decltype(dp)::value;
      const size_t bytes = BwdLayout<T, Dp>::kBytes;
      constexpr auto kernel = &attention_bwd_kernel<T, Dp>;
      FC_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
      launch_over_batch<kernel>(p, (p.Lk + kBlockN - 1) / kBlockN, bytes, stream);
    });
    phase.reset();
    if (grads.dq.defined() && !composed) {
      phase.emplace("dq_convert", dev);
      const int64_t n = rows * p.D;
      const int64_t dq_s[3] = {grads.dq.stride(0), grads.dq.stride(1), grads.dq.stride(2)};
      if (attention_bwd_vec_rows() && vec_rows_ok<T>(p.D, {{grads.dq.data_ptr(), dq_s}})) {
        const int64_t n_vecs = n / V;
        auto go = [&](auto itag) {
          using I = decltype(itag);
          launch_kernel<dq_convert_vec_kernel<T, I>>(grid_for(n_vecs, 256), 256, 0, stream, p.dq_acc,
                                                     static_cast<T*>(grads.dq.data_ptr()), p.H, p.Lq, p.D, dq_s[0], dq_s[1],
                                                     dq_s[2], static_cast<I>(n_vecs));
        };
        if (n_vecs <= INT32_MAX / 2) go(int32_t{});
        else go(int64_t{});
      } else {
        launch_kernel<dq_convert_kernel<T>>(grid_for(n, 256), 256, 0, stream, p.dq_acc, static_cast<T*>(grads.dq.data_ptr()), p.H, p.Lq, p.D,
                                            dq_s[0], dq_s[1], dq_s[2], n);
      }
      FC_CUDA_CHECK_LAUNCH();
    }
  });
}

}  // namespace foldcore::ops::cuda
