// AlphaFold2 global attention (Alg. 19) on CUDA: one block per batch entry (a column of the
// extra MSA). The keys are visited in chunks of kChunk: a first pass gets each head's softmax
// statistics (max m, sum l) with an online reduction, later passes recompute the scores (cheap:
// H·S·D per pass) instead of storing an H×S matrix, so any number of sequences fits.
#include "kernels/cuda/attention_common.cuh"
#include "kernels/cuda/attention_cuda.h"

namespace foldcore::ops::cuda {
namespace {

using detail::sigmoidf_;

constexpr int kChunk = 256;  // = threads per block; one key per thread per chunk

struct GlobalParams {
  const void *q, *k, *v, *bias, *g;
  int64_t q_s[2], k_s[2], v_s[2], bias_s[2], g_s[3];
  int H, S, D;
  float scale;
};

template <typename T> __device__ float global_score(const GlobalParams& p, const float* qh, int b, int j) {
  const T* kr = static_cast<const T*>(p.k) + b * p.k_s[0] + j * p.k_s[1];
  float dot = 0.f;
  for (int d = 0; d < p.D; ++d) dot += qh[d] * to_f32(kr[d]);
  float s = p.scale * dot;
  if (p.bias) s += to_f32(static_cast<const T*>(p.bias)[b * p.bias_s[0] + j * p.bias_s[1]]);
  return s;
}

// Combines online-softmax partials (m1, l1) ⊕ (m2, l2).
__device__ __forceinline__ void combine(float& m, float& l, float m2, float l2) {
  const float mn = fmaxf(m, m2);
  if (mn == -INFINITY) return;
  l = l * __expf(m - mn) + l2 * __expf(m2 - mn);
  m = mn;
}

// Per-head (max, sum) of exp(scores) over all keys, into sm[h], sl[h]. q in shared memory.
template <typename T> __device__ void global_stats(const GlobalParams& p, const float* sq, int b, float* sm, float* sl, float* red) {
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  for (int h = 0; h < p.H; ++h) {
    float m = -INFINITY, l = 0.f;
    for (int j = tid; j < p.S; j += blockDim.x) combine(m, l, global_score<T>(p, sq + h * p.D, b, j), 1.f);
    for (int o = 16; o > 0; o >>= 1) combine(m, l, __shfl_xor_sync(0xffffffffu, m, o), __shfl_xor_sync(0xffffffffu, l, o));
    if (lane == 0) {
      red[2 * warp] = m;
      red[2 * warp + 1] = l;
    }
    __syncthreads();
    if (tid == 0) {
      for (int w = 1; w < static_cast<int>(blockDim.x / 32); ++w) combine(m, l, red[2 * w], red[2 * w + 1]);
      sm[h] = m;
      sl[h] = l;
    }
    __syncthreads();
  }
}

__device__ __forceinline__ float prob(float s, float m, float l) { return l > 0.f ? __expf(s - m) / l : 0.f; }

template <typename T> __global__ void global_fwd_kernel(const GlobalParams p, T* o, int64_t o0, int64_t o1, int64_t o2, T* a, int64_t a0, int64_t a1) {
  FC_DYNAMIC_SHARED(float, gsm, 16);
  const int H = p.H, D = p.D, b = blockIdx.x, tid = threadIdx.x;
  float* sq = gsm;              // [H][D]
  float* sa = sq + H * D;       // [H][D]
  float* sp = sa + H * D;       // [H][kChunk]
  float* sm = sp + H * kChunk;  // [H]
  float* sl = sm + H;           // [H]
  float* red = sl + H;          // [2 · warps]
  for (int idx = tid; idx < H * D; idx += blockDim.x) {
    sq[idx] = to_f32(static_cast<const T*>(p.q)[b * p.q_s[0] + (idx / D) * p.q_s[1] + idx % D]);
    sa[idx] = 0.f;
  }
  __syncthreads();
  global_stats<T>(p, sq, b, sm, sl, red);
  for (int c0 = 0; c0 < p.S; c0 += kChunk) {
    const int j = c0 + tid;
    for (int h = 0; h < H; ++h) sp[h * kChunk + tid] = j < p.S ? prob(global_score<T>(p, sq + h * D, b, j), sm[h], sl[h]) : 0.f;
    __syncthreads();
    const int n = min(kChunk, p.S - c0);
    for (int idx = tid; idx < H * D; idx += blockDim.x) {  // each (h, d) owned by one thread
      const int h = idx / D, d = idx % D;
      float acc = 0.f;
      for (int jj = 0; jj < n; ++jj) acc += sp[h * kChunk + jj] * to_f32(static_cast<const T*>(p.v)[b * p.v_s[0] + (c0 + jj) * p.v_s[1] + d]);
      sa[idx] += acc;
    }
    __syncthreads();
  }
  for (int idx = tid; idx < H * D; idx += blockDim.x) a[b * a0 + (idx / D) * a1 + idx % D] = from_f32<T>(sa[idx]);
  const int64_t n_out = static_cast<int64_t>(p.S) * H * D;
  for (int64_t idx = tid; idx < n_out; idx += blockDim.x) {
    const int d = static_cast<int>(idx % D), h = static_cast<int>((idx / D) % H), j = static_cast<int>(idx / D / H);
    const float gv = to_f32(static_cast<const T*>(p.g)[b * p.g_s[0] + j * p.g_s[1] + h * p.g_s[2] + d]);
    o[b * o0 + j * o1 + h * o2 + d] = from_f32<T>(sigmoidf_(gv) * sa[h * D + d]);
  }
}

struct GlobalGrads {
  const void *a, *d_o;
  void *dq, *dk, *dv, *dg;
  int64_t a_s[2], do_s[3], dq_s[2], dk_s[2], dv_s[2], dg_s[3];
};

template <typename T> __global__ void global_bwd_kernel(const GlobalParams p, const GlobalGrads gg) {
  FC_DYNAMIC_SHARED(float, gsm, 16);
  const int H = p.H, D = p.D, b = blockIdx.x, tid = threadIdx.x;
  float* sq = gsm;               // [H][D]
  float* sa = sq + H * D;        // [H][D]
  float* sda = sa + H * D;       // [H][D]  dA = Σ_j dO ⊙ σ(g)
  float* sdq = sda + H * D;      // [H][D]
  float* sp = sdq + H * D;       // [H][kChunk]
  float* sds = sp + H * kChunk;  // [H][kChunk]
  float* sm = sds + H * kChunk;  // [H]
  float* sl = sm + H;
  float* sdelta = sl + H;
  float* red = sdelta + H;
  for (int idx = tid; idx < H * D; idx += blockDim.x) {
    const int h = idx / D, d = idx % D;
    sq[idx] = to_f32(static_cast<const T*>(p.q)[b * p.q_s[0] + h * p.q_s[1] + d]);
    const float av = to_f32(static_cast<const T*>(gg.a)[b * gg.a_s[0] + h * gg.a_s[1] + d]);
    sa[idx] = av;
    sdq[idx] = 0.f;
    float acc = 0.f;
    for (int j = 0; j < p.S; ++j) {
      const float sg = sigmoidf_(to_f32(static_cast<const T*>(p.g)[b * p.g_s[0] + j * p.g_s[1] + h * p.g_s[2] + d]));
      const float dov = to_f32(static_cast<const T*>(gg.d_o)[b * gg.do_s[0] + j * gg.do_s[1] + h * gg.do_s[2] + d]);
      acc += dov * sg;
      static_cast<T*>(gg.dg)[b * gg.dg_s[0] + j * gg.dg_s[1] + h * gg.dg_s[2] + d] = from_f32<T>(dov * av * sg * (1.f - sg));
    }
    sda[idx] = acc;
  }
  __syncthreads();
  for (int h = tid; h < H; h += blockDim.x) {
    float dl = 0.f;
    for (int d = 0; d < D; ++d) dl += sda[h * D + d] * sa[h * D + d];
    sdelta[h] = dl;
  }
  global_stats<T>(p, sq, b, sm, sl, red);  // has __syncthreads
  for (int c0 = 0; c0 < p.S; c0 += kChunk) {
    const int j = c0 + tid;
    if (j < p.S) {
      const T* vr = static_cast<const T*>(p.v) + b * p.v_s[0] + j * p.v_s[1];
      for (int h = 0; h < H; ++h) {
        const float pj = prob(global_score<T>(p, sq + h * D, b, j), sm[h], sl[h]);
        float dp = 0.f;
        for (int d = 0; d < D; ++d) dp += sda[h * D + d] * to_f32(vr[d]);
        sp[h * kChunk + tid] = pj;
        sds[h * kChunk + tid] = pj * (dp - sdelta[h]);
      }
      T* dkr = static_cast<T*>(gg.dk) + b * gg.dk_s[0] + j * gg.dk_s[1];
      T* dvr = static_cast<T*>(gg.dv) + b * gg.dv_s[0] + j * gg.dv_s[1];
      for (int d = 0; d < D; ++d) {  // this thread owns key j
        float dk = 0.f, dv = 0.f;
        for (int h = 0; h < H; ++h) {
          dk += sds[h * kChunk + tid] * sq[h * D + d];
          dv += sp[h * kChunk + tid] * sda[h * D + d];
        }
        dkr[d] = from_f32<T>(p.scale * dk);
        dvr[d] = from_f32<T>(dv);
      }
    }
    __syncthreads();
    const int n = min(kChunk, p.S - c0);
    for (int idx = tid; idx < H * D; idx += blockDim.x) {
      const int h = idx / D, d = idx % D;
      float acc = 0.f;
      for (int jj = 0; jj < n; ++jj) acc += sds[h * kChunk + jj] * to_f32(static_cast<const T*>(p.k)[b * p.k_s[0] + (c0 + jj) * p.k_s[1] + d]);
      sdq[idx] += acc;
    }
    __syncthreads();
  }
  for (int idx = tid; idx < H * D; idx += blockDim.x)
    static_cast<T*>(gg.dq)[b * gg.dq_s[0] + (idx / D) * gg.dq_s[1] + idx % D] = from_f32<T>(p.scale * sdq[idx]);
}

GlobalParams make_global(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& bias, const Tensor& g, float scale) {
  GlobalParams p{};
  p.q = q.data_ptr();
  p.k = k.data_ptr();
  p.v = v.data_ptr();
  p.g = g.data_ptr();
  p.bias = bias.defined() ? bias.data_ptr() : nullptr;
  for (int d = 0; d < 2; ++d) {
    p.q_s[d] = q.stride(d);
    p.k_s[d] = k.stride(d);
    p.v_s[d] = v.stride(d);
    p.bias_s[d] = bias.defined() ? bias.stride(d) : 0;
  }
  for (int d = 0; d < 3; ++d) p.g_s[d] = g.stride(d);
  p.H = static_cast<int>(q.size(1));
  p.S = static_cast<int>(k.size(1));
  p.D = static_cast<int>(q.size(2));
  p.scale = scale;
  return p;
}

template <typename K> void prepare_launch(K kernel, size_t smem_floats, const char* op) {
  const size_t bytes = smem_floats * sizeof(float);
  FC_CHECK(bytes <= 160 * 1024, op, ": H·D too large for the CUDA kernel (", bytes, " bytes of shared memory)");
  FC_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
}

}  // namespace

void global_attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& bias,
                              const Tensor& g, float scale, const Tensor& o, const Tensor& a) {
  const GlobalParams p = make_global(q, k, v, bias, g, scale);
  const int B = static_cast<int>(q.size(0));
  if (B == 0) return;
  set_device(q.device());
  const cudaStream_t stream = cuda_stream_of(q.device());
  const size_t floats = 2 * p.H * p.D + p.H * kChunk + 2 * p.H + 2 * (kChunk / 32);
  cuda_dispatch_float(q.dtype(), [&](auto tag) {
    using T = decltype(tag);
    constexpr auto kernel = &global_fwd_kernel<T>;
    prepare_launch(kernel, floats, "global_attention_forward (CUDA)");
    launch_kernel<kernel>(B, kChunk, floats * sizeof(float), stream, p, static_cast<T*>(o.data_ptr()), o.stride(0), o.stride(1), o.stride(2),
                                                           static_cast<T*>(a.data_ptr()), a.stride(0), a.stride(1));
    FC_CUDA_CHECK_LAUNCH();
  });
}

void global_attention_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& bias,
                               const Tensor& g, float scale, const Tensor& a, const Tensor& d_o, const Tensor& dq,
                               const Tensor& dk, const Tensor& dv, const Tensor& dg) {
  const GlobalParams p = make_global(q, k, v, bias, g, scale);
  const int B = static_cast<int>(q.size(0));
  if (B == 0) return;
  GlobalGrads gg{};
  gg.a = a.data_ptr();
  gg.d_o = d_o.data_ptr();
  gg.dq = dq.data_ptr();
  gg.dk = dk.data_ptr();
  gg.dv = dv.data_ptr();
  gg.dg = dg.data_ptr();
  for (int d = 0; d < 2; ++d) {
    gg.a_s[d] = a.stride(d);
    gg.dq_s[d] = dq.stride(d);
    gg.dk_s[d] = dk.stride(d);
    gg.dv_s[d] = dv.stride(d);
  }
  for (int d = 0; d < 3; ++d) {
    gg.do_s[d] = d_o.stride(d);
    gg.dg_s[d] = dg.stride(d);
  }
  set_device(q.device());
  const cudaStream_t stream = cuda_stream_of(q.device());
  const size_t floats = 4 * p.H * p.D + 2 * p.H * kChunk + 3 * p.H + 2 * (kChunk / 32);
  cuda_dispatch_float(q.dtype(), [&](auto tag) {
    using T = decltype(tag);
    constexpr auto kernel = &global_bwd_kernel<T>;
    prepare_launch(kernel, floats, "global_attention_backward (CUDA)");
    launch_kernel<kernel>(B, kChunk, floats * sizeof(float), stream, p, gg);
    FC_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace foldcore::ops::cuda
