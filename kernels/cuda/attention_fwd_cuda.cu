// FlashAttention-2-style forward: one CTA per (query tile of 64 rows, h, b); K/V tiles of 64
// keys streamed through shared memory; online softmax in fp32 (running max m and sum l per row,
// O rescaled by exp(m_old − m_new)); biases read tile by tile from strided global memory;
// packed segments handled by visiting only the keys of the tile's segments and masking the rest;
// gate fused into the epilogue. The Lq×Lk score matrix is never materialised.
#include <cmath>

#include "kernels/cuda/attention_common.cuh"
#include "kernels/cuda/attention_cuda.h"
#include "kernels/cuda/attention_mma.cuh"
#include "core/profile.h"

namespace foldcore::ops::cuda {
namespace detail {

AttnParams make_params(const AttentionInputs& in) {
  AttnParams p;
  auto s3 = [](const Tensor& t, int64_t* s) {
    if (!t.defined()) return;
    for (int d = 0; d < 3; ++d) s[d] = t.stride(d);
  };
  p.q = in.q.data_ptr();
  p.k = in.k.data_ptr();
  p.v = in.v.data_ptr();
  s3(in.q, p.q_s);
  s3(in.k, p.k_s);
  s3(in.v, p.v_s);
  if (in.gate.defined()) {
    p.g = in.gate.data_ptr();
    s3(in.gate, p.g_s);
  }
  p.B = static_cast<int>(in.q.size(0));
  p.H = static_cast<int>(in.q.size(1));
  p.Lq = static_cast<int>(in.q.size(2));
  p.D = static_cast<int>(in.q.size(3));
  p.Lk = static_cast<int>(in.k.size(2));
  p.scale = in.scale;
  p.n_bias = static_cast<int>(in.biases.size());
  for (int t = 0; t < p.n_bias; ++t) {
    const Tensor& b = in.biases[t];
    p.bias[t].ptr = b.data_ptr();
    for (int d = 0; d < 4; ++d) p.bias[t].s[d] = b.size(d) == 1 ? 0 : b.stride(d);
  }
  if (in.cu_seqlens.defined()) {
    p.cu = in.cu_seqlens.data<int32_t>();
    p.n_seg = static_cast<int>(in.cu_seqlens.size(0) - 1);
  }
  return p;
}

namespace {

template <typename T, int Dp> struct FwdLayout {
  static constexpr int kLdT = ld_tile<T>(Dp);
  static constexpr int kLdS = kBlockN + 4;
  static constexpr bool kSeparateP = !std::is_same_v<T, float>;  // f32: P overwrites S in place
  static constexpr int kLdP = kSeparateP ? kBlockN + 8 : kLdS;
  static constexpr int kLdO = Dp + 4;
  static constexpr size_t kQ = 0;
  static constexpr size_t kK = kQ + sizeof(T) * kBlockM * kLdT;
  static constexpr size_t kV = kK + sizeof(T) * kBlockN * kLdT;
  static constexpr size_t kS = kV + sizeof(T) * kBlockN * kLdT;
  static constexpr size_t kP = kS + sizeof(float) * kBlockM * kLdS;
  static constexpr size_t kO = kP + (kSeparateP ? sizeof(T) * kBlockM * kLdP : 0);
  static constexpr size_t kRows = kO + sizeof(float) * kBlockM * kLdO;
  static constexpr size_t kBytes = kRows + sizeof(int) * 2 * kBlockM;
};

template <typename T, int Dp> __global__ void __launch_bounds__(kThreads) attention_fwd_kernel(const AttnParams p) {
  using L = FwdLayout<T, Dp>;
  FC_DYNAMIC_SHARED(unsigned char, smem, 128);
  T* sq = reinterpret_cast<T*>(smem + L::kQ);
  T* sk = reinterpret_cast<T*>(smem + L::kK);
  T* sv = reinterpret_cast<T*>(smem + L::kV);
  float* ss = reinterpret_cast<float*>(smem + L::kS);
  T* sp = reinterpret_cast<T*>(smem + (L::kSeparateP ? L::kP : L::kS));
  float* so = reinterpret_cast<float*>(smem + L::kO);
  int* row_lo = reinterpret_cast<int*>(smem + L::kRows);
  int* row_hi = row_lo + kBlockM;

  const int i0 = blockIdx.x * kBlockM, h = blockIdx.y, b = p.b0 + static_cast<int>(blockIdx.z);
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const T* q = head_slice<T>(p.q, p.q_s, b, h);
  const T* k = head_slice<T>(p.k, p.k_s, b, h);
  const T* v = head_slice<T>(p.v, p.v_s, b, h);

  for (int r = tid; r < kBlockM; r += kThreads) {
    const int i = i0 + r;
    int lo = 0, hi = 0;  // rows past Lq attend to nothing
    if (i < p.Lq) {
      if (p.cu) segment_of(p.cu, p.n_seg, i, lo, hi);
      else hi = p.Lk;
    }
    row_lo[r] = lo;
    row_hi[r] = hi;
  }
  load_tile<kBlockM, Dp>(sq, L::kLdT, q, p.q_s[2], i0, p.Lq, p.D);
  for (int idx = tid; idx < kBlockM * L::kLdO; idx += kThreads) so[idx] = 0.f;
  __syncthreads();
  // Segments are contiguous and ordered, so the tile's keys are [lo(first row), hi(last row)).
  const int n_rows = min(kBlockM, p.Lq - i0);
  const int j_begin = row_lo[0], j_end = row_hi[n_rows - 1];

  constexpr int kRowsPerWarp = kBlockM / kWarps;
  float m_run[kRowsPerWarp], l_run[kRowsPerWarp];
#pragma unroll
  for (int rr = 0; rr < kRowsPerWarp; ++rr) {
    m_run[rr] = -INFINITY;
    l_run[rr] = 0.f;
  }

  for (int j0 = j_begin; j0 < j_end; j0 += kBlockN) {
    load_tile<kBlockN, Dp>(sk, L::kLdT, k, p.k_s[2], j0, j_end, p.D);
    load_tile<kBlockN, Dp>(sv, L::kLdT, v, p.v_s[2], j0, j_end, p.D);
    __syncthreads();
    smem_gemm<kBlockM, kBlockN, Dp, false, true, false>(sq, L::kLdT, sk, L::kLdT, ss, L::kLdS);  // S = Q Kᵀ
    __syncthreads();
    // Online softmax: warp w owns rows [16w, 16w+16); lane owns columns lane and lane + 32.
#pragma unroll
    for (int rr = 0; rr < kRowsPerWarp; ++rr) {
      const int r = warp * kRowsPerWarp + rr, i = i0 + r;
      const int lo = row_lo[r], hi = row_hi[r];
      float sv2[2];
      float mx = -INFINITY;
#pragma unroll
      for (int c = 0; c < 2; ++c) {
        const int jj = lane + 32 * c, j = j0 + jj;
        float s = -INFINITY;
        if (j >= lo && j < hi) s = ss[r * L::kLdS + jj] * p.scale + bias_sum<T>(p, b, h, i, j);
        sv2[c] = s;
        mx = fmaxf(mx, s);
      }
      mx = warp_max(mx);
      const float m_new = fmaxf(m_run[rr], mx);
      const float alpha = m_new == -INFINITY ? 1.f : __expf(m_run[rr] - m_new);
      float psum = 0.f;
#pragma unroll
      for (int c = 0; c < 2; ++c) {
        const float pv = sv2[c] == -INFINITY ? 0.f : __expf(sv2[c] - m_new);
        psum += pv;
        sp[r * L::kLdP + lane + 32 * c] = from_f32<T>(pv);
      }
      psum = warp_sum(psum);
      l_run[rr] = l_run[rr] * alpha + psum;
      m_run[rr] = m_new;
      for (int d = lane; d < Dp; d += 32) so[r * L::kLdO + d] *= alpha;
    }
    __syncthreads();
    smem_gemm<kBlockM, Dp, kBlockN, false, false, true>(sp, L::kLdP, sv, L::kLdT, so, L::kLdO);  // O += P V
    __syncthreads();
  }

  // Epilogue: a = O / l, o = σ(g) ⊙ a, lse = m + log l.
#pragma unroll
  for (int rr = 0; rr < kRowsPerWarp; ++rr) {
    const int r = warp * kRowsPerWarp + rr, i = i0 + r;
    if (i >= p.Lq) continue;
    const float l = l_run[rr];
    const float inv = l > 0.f ? 1.f / l : 0.f;
    if (lane == 0) p.lse[b * p.lse_s[0] + h * p.lse_s[1] + i * p.lse_s[2]] = l > 0.f ? m_run[rr] + __logf(l) : -INFINITY;
    for (int d = lane; d < p.D; d += 32) {
      const float av = so[r * L::kLdO + d] * inv;
      if (p.a) static_cast<T*>(p.a)[b * p.a_s[0] + h * p.a_s[1] + i * p.a_s[2] + d] = from_f32<T>(av);
      float ov = av;
      if (p.g) ov *= sigmoidf_(to_f32(static_cast<const T*>(p.g)[b * p.g_s[0] + h * p.g_s[1] + i * p.g_s[2] + d]));
      static_cast<T*>(p.o)[b * p.o_s[0] + h * p.o_s[1] + i * p.o_s[2] + d] = from_f32<T>(ov);
    }
  }
}

}  // namespace
}  // namespace detail

void attention_forward(const AttentionInputs& in, const Tensor& o, const Tensor& lse, const Tensor& a) {
  using namespace detail;
  AttnParams p = make_params(in);
  p.o = o.data_ptr();
  p.lse = lse.data<float>();
  for (int d = 0; d < 3; ++d) {
    p.o_s[d] = o.stride(d);
    p.lse_s[d] = lse.stride(d);
  }
  if (a.defined()) {
    p.a = a.data_ptr();
    for (int d = 0; d < 3; ++d) p.a_s[d] = a.stride(d);
  }
  if (p.B == 0 || p.H == 0 || p.Lq == 0) return;
  FC_CHECK(p.H <= 65535, "attention_forward (CUDA): H must be <= 65535, got H = ", p.H);
  set_device(in.q.device());
  const profile::Scope stage("attention_fwd", in.q.device());  // FOLDCORE_PROFILE=1: the op's time
  const cudaStream_t stream = cuda_stream_of(in.q.device());
  if (use_mma_kernels(p, in.q.dtype())) {
    launch_attention_fwd_mma(p, stream);
    return;
  }
  cuda_dispatch_float(in.q.dtype(), [&](auto tag) {
    using T = decltype(tag);
    dispatch_head_dim(p.D, "attention_forward (CUDA)", [&](auto dp) {
      constexpr int Dp = decltype(dp)::value;
      const size_t bytes = FwdLayout<T, Dp>::kBytes;
      constexpr auto kernel = &attention_fwd_kernel<T, Dp>;
      FC_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
      launch_over_batch<kernel>(p, (p.Lq + kBlockM - 1) / kBlockM, bytes, stream);
    });
  });
}

}  // namespace foldcore::ops::cuda
