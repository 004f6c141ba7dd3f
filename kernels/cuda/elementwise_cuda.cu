// CUDA elementwise family: grid-stride kernels, fp32 math, 16-bit storage. Contiguous maps load
// and store 16-byte packs when every pointer is 16-byte aligned (4 f32 or 8 bf16/f16 per access).
// Dropout draws one Philox block per 4 consecutive elements when the mask is not shared (the
// block holds exactly the 4 words philox_keep would compute for them one by one).
#include "kernels/cuda/elementwise_cuda.h"

#include <cstdint>
#include <type_traits>

#include "core/cuda/cuda_utils.cuh"
#include "core/cuda/launch.cuh"
#include "core/cuda/vec.cuh"
#include "core/philox.h"
#include "kernels/cuda/activation_math.cuh"

namespace foldcore::ops::cuda {
namespace {

constexpr int kBlock = 256;


template <typename T, int N> struct Ptrs {
  const T* p[N];
};

// out[i] = T(f(x, i)) with x[j] = float(in_j[i]). out may alias an input: every element is read
// and written by the same thread, reads first.
template <typename T, int NIN, typename F>
__global__ void map_kernel(int64_t n, Ptrs<T, NIN> in, T* out, bool vec, F f) {
  const int64_t tid = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  int64_t start = 0;
  if (vec) {
    constexpr int kN = Pack16<T>::kN;
    const int64_t nv = n / kN;
    for (int64_t v = tid; v < nv; v += stride) {
      Pack16<T> a[NIN];
#pragma unroll
      for (int j = 0; j < NIN; ++j) a[j] = reinterpret_cast<const Pack16<T>*>(in.p[j])[v];
      Pack16<T> o;
#pragma unroll
      for (int k = 0; k < kN; ++k) {
        float x[NIN];
#pragma unroll
        for (int j = 0; j < NIN; ++j) x[j] = to_f32(a[j].v[k]);
        o.v[k] = from_f32<T>(f(x, v * kN + k));
      }
      reinterpret_cast<Pack16<T>*>(out)[v] = o;
    }
    start = nv * kN;
  }
  for (int64_t i = start + tid; i < n; i += stride) {
    float x[NIN];
#pragma unroll
    for (int j = 0; j < NIN; ++j) x[j] = to_f32(in.p[j][i]);
    out[i] = from_f32<T>(f(x, i));
  }
}

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

// Launches map_kernel over contiguous tensors of CUDA type T (all of out's dtype).
template <typename T, int NIN, typename F> void launch_map(const Tensor (&ins)[NIN], const Tensor& out, F f) {
  Ptrs<T, NIN> p{};
  bool vec = aligned16(out.data_ptr());
  for (int j = 0; j < NIN; ++j) {
    p.p[j] = static_cast<const T*>(ins[j].data_ptr());
    vec = vec && aligned16(p.p[j]);
  }
  const int64_t n = out.numel();
  const int64_t work = vec ? (n + Pack16<T>::kN - 1) / Pack16<T>::kN : n;
  launch_kernel<map_kernel<T, NIN, F>>(grid_for(work, kBlock), kBlock, 0, cuda_stream_of(out.device()),
      n, p, static_cast<T*>(out.data_ptr()), vec, f);
  FC_CUDA_CHECK_LAUNCH();
}

// ---- functors (fp32 math; same formulas as the CPU reference) ----
struct Affine2 {  // alpha·a + beta·b + gamma·a·b
  float alpha, beta, gamma;
  __device__ float operator()(const float* x, int64_t) const { return alpha * x[0] + beta * x[1] + gamma * x[0] * x[1]; }
};
struct Scale {
  float s;
  __device__ float operator()(const float* x, int64_t) const { return s * x[0]; }
};
struct ReciprocalShift {  // IEEE division (no fast-math): the host's 1 / (x + eps) bit for bit
  float eps;
  __device__ float operator()(const float* x, int64_t) const { return 1.0f / (x[0] + eps); }
};
__device__ __forceinline__ float sigmoidf(float v) { return 1.0f / (1.0f + expf(-v)); }
struct ReluFwd {
  __device__ float operator()(const float* x, int64_t) const { return x[0] > 0.f ? x[0] : 0.f; }
};
struct GeluFwd {
  __device__ float operator()(const float* x, int64_t) const { return x[0] * gelu_cdf(x[0]); }
};
// ReluBwd, GeluBwd: activation_math.cuh (the fused bias-gradient sums use them too).
struct SigmoidFwd {
  __device__ float operator()(const float* x, int64_t) const { return sigmoidf(x[0]); }
};
struct SigmoidBwd {  // x[0] = y, x[1] = dy
  __device__ float operator()(const float* x, int64_t) const { return x[1] * x[0] * (1.f - x[0]); }
};
struct SigmoidGate {  // x[0] = g, x[1] = x
  __device__ float operator()(const float* x, int64_t) const { return sigmoidf(x[0]) * x[1]; }
};

template <typename F> void unary(const Tensor& x, const Tensor& out, F f) {
  cuda_dispatch_float(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const Tensor ins[1] = {x};
    launch_map<T, 1>(ins, out, f);
  });
}
template <typename F> void binary_map(const Tensor& a, const Tensor& b, const Tensor& out, F f) {
  cuda_dispatch_float(a.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const Tensor ins[2] = {a, b};
    launch_map<T, 2>(ins, out, f);
  });
}

// a, out contiguous; b strided (broadcast views have stride 0), its dims merged (strided_desc) and
// indexed in 32 bits where they fit.
template <typename T, typename I>
__global__ void strided_binary_kernel(I n, const T* a, const T* b, StridedDescT<I> bd, T* out, Affine2 f) {
  for (I i = static_cast<I>(blockIdx.x) * static_cast<I>(blockDim.x) + static_cast<I>(threadIdx.x); i < n;
       i += static_cast<I>(gridDim.x) * static_cast<I>(blockDim.x)) {
    const float x[2] = {to_f32(a[i]), to_f32(b[bd.offset_of(i)])};
    out[i] = from_f32<T>(f(x, i));
  }
}

// How b's elements of one 16-byte pack of a are read (strided_binary_vec_kernel).
enum class PackRead { kBroadcast, kContiguous, kStrided };

// The 16-byte form of strided_binary_kernel: a and out 16-byte aligned, b's innermost merged dim a
// multiple of the pack's kN elements long, so that a pack's kN elements lie in one run of b along
// that dim: one offset (the divisions) per pack, and b read once (kBroadcast: a mask [..., 1]
// over the channels), as one 16-byte pack (kContiguous: a bias [C] over rows) or element by
// element (kStrided). out may alias a (each pack is read before it is written, by one thread).
template <typename T, typename I, PackRead R>
__global__ void strided_binary_vec_kernel(I nv, const T* a, const T* b, StridedDescT<I> bd, I inner_stride, T* out,
                                          Affine2 f) {
  constexpr int kN = Pack16<T>::kN;
  for (I v = static_cast<I>(blockIdx.x) * static_cast<I>(blockDim.x) + static_cast<I>(threadIdx.x); v < nv;
       v += static_cast<I>(gridDim.x) * static_cast<I>(blockDim.x)) {
    const I i0 = v * kN;
    const I off = bd.offset_of(i0);
    const Pack16<T> av = reinterpret_cast<const Pack16<T>*>(a)[v];
    float bv[kN];
    if constexpr (R == PackRead::kBroadcast) {
      const float s = to_f32(b[off]);
#pragma unroll
      for (int k = 0; k < kN; ++k) bv[k] = s;
    } else if constexpr (R == PackRead::kContiguous) {
      const Pack16<T> pb = *reinterpret_cast<const Pack16<T>*>(b + off);
#pragma unroll
      for (int k = 0; k < kN; ++k) bv[k] = to_f32(pb.v[k]);
    } else {
#pragma unroll
      for (int k = 0; k < kN; ++k) bv[k] = to_f32(b[off + static_cast<I>(k) * inner_stride]);
    }
    Pack16<T> o;
#pragma unroll
    for (int k = 0; k < kN; ++k) {
      const float x[2] = {to_f32(av.v[k]), bv[k]};
      o.v[k] = from_f32<T>(f(x, i0 + k));
    }
    reinterpret_cast<Pack16<T>*>(out)[v] = o;
  }
}

template <typename T>
__global__ void sigmoid_gate_backward_kernel(int64_t n, const T* g, const T* x, const T* dout, T* dg, T* dx) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float s = sigmoidf(to_f32(g[i])), d = to_f32(dout[i]), xv = to_f32(x[i]);
    dg[i] = from_f32<T>(d * xv * s * (1.f - s));
    dx[i] = from_f32<T>(d * s);
  }
}

// The masked gated edge, channel-major: a block of 32 × 8 threads takes 32 rows (i, k) × 32
// channels through a shared tile, so the [rows, C] side and the [C, rows] side are each read or
// written 32 consecutive elements at a time. The expressions are SigmoidGate's, the mask
// multiply's (Affine2 with gamma = 1: the product rounded once) and sigmoid_gate_backward_kernel's,
// so the values are the composition's.
constexpr int kEdgeTile = 32, kEdgeRowsPerPass = 8;

template <typename T>
__global__ void masked_gate_cm_forward_kernel(const T* __restrict__ g, const T* __restrict__ p,
                                              const T* __restrict__ m, T* __restrict__ out, int64_t rows, int c) {
  FC_SHARED(float, tile, [kEdgeTile][kEdgeTile + 1]);
  const int64_t r0 = static_cast<int64_t>(blockIdx.x) * kEdgeTile;
  const int c0 = static_cast<int>(blockIdx.y) * kEdgeTile;
  const int tx = threadIdx.x, ty = threadIdx.y;
  for (int k = ty; k < kEdgeTile; k += kEdgeRowsPerPass) {  // read along the channels
    const int64_t r = r0 + k;
    const int q = c0 + tx;
    if (r < rows && q < c) {
      const int64_t i = r * c + q;
      const T ga = from_f32<T>(sigmoidf(to_f32(g[i])) * to_f32(p[i]));
      tile[k][tx] = to_f32(from_f32<T>(to_f32(ga) * to_f32(m[r])));
    }
  }
  __syncthreads();
  for (int k = ty; k < kEdgeTile; k += kEdgeRowsPerPass) {  // write along the rows
    const int q = c0 + k;
    const int64_t r = r0 + tx;
    if (r < rows && q < c) out[static_cast<int64_t>(q) * rows + r] = from_f32<T>(tile[tx][k]);
  }
}

template <typename T>
__global__ void masked_gate_cm_backward_kernel(const T* __restrict__ g, const T* __restrict__ p,
                                               const T* __restrict__ m, const T* __restrict__ dout, T* __restrict__ dg,
                                               T* __restrict__ dp, int64_t rows, int c) {
  FC_SHARED(float, tile, [kEdgeTile][kEdgeTile + 1]);
  const int64_t r0 = static_cast<int64_t>(blockIdx.x) * kEdgeTile;
  const int c0 = static_cast<int>(blockIdx.y) * kEdgeTile;
  const int tx = threadIdx.x, ty = threadIdx.y;
  for (int k = ty; k < kEdgeTile; k += kEdgeRowsPerPass) {  // read dout along the rows
    const int q = c0 + k;
    const int64_t r = r0 + tx;
    if (r < rows && q < c) tile[k][tx] = to_f32(dout[static_cast<int64_t>(q) * rows + r]);
  }
  __syncthreads();
  for (int k = ty; k < kEdgeTile; k += kEdgeRowsPerPass) {  // the gradients along the channels
    const int64_t r = r0 + k;
    const int q = c0 + tx;
    if (r < rows && q < c) {
      const int64_t i = r * c + q;
      const float d = to_f32(from_f32<T>(tile[tx][k] * to_f32(m[r])));  // the mask multiply's backward
      const float sg = sigmoidf(to_f32(g[i])), xv = to_f32(p[i]);
      dg[i] = from_f32<T>(d * xv * sg * (1.f - sg));
      dp[i] = from_f32<T>(d * sg);
    }
  }
}

// ---- dropout ----
struct DropoutParams {
  float p, keep_scale;
  uint64_t seed, offset;
  DropoutMaskDesc mask;
};

// Keep decisions for elements base..base+3 (base % 4 == 0), kernels/dropout_mask.h.
__device__ __forceinline__ void keep4(const DropoutParams& d, int64_t base, bool keep[4]) {
  dropout_keep4(d.mask, d.seed, d.offset, d.p, base, keep);
}

template <typename T> bool aligned_quad(const void* p) {
  return p == nullptr || reinterpret_cast<uintptr_t>(p) % (4 * sizeof(T)) == 0;
}

// Grid-stride loop over groups of 4 elements (one Philox block each where the mask allows,
// kernels/dropout_mask.h): calls f(g, keep) with keep[k] the dropout decision of element 4g + k
// (true everywhere when p = 0).
template <typename F> __device__ __forceinline__ void for_each_dropout_group(int64_t n, const DropoutParams& d, F f) {
  const int64_t groups = (n + 3) / 4;
  for (int64_t g = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; g < groups;
       g += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    bool keep[4] = {true, true, true, true};
    if (d.p > 0.f) keep4(d, g * 4, keep);
    f(g, keep);
  }
}

// out = residual + dropout(x + bias); bias/residual may be null; out may alias residual. x and
// bias in T, residual and out in O (T, or fp32 for a 16-bit update of an fp32 stream). quad: n and
// c multiples of 4 and every pointer aligned to 4 elements, so a group is one access per operand
// and its bias columns one run (one modulo per group instead of per element).
template <typename T, typename O>
__global__ void bias_dropout_residual_kernel(int64_t n, int64_t c, const T* x, const T* bias, const O* res, O* out,
                                             DropoutParams d, bool quad) {
  for_each_dropout_group(n, d, [&](int64_t g, const bool keep[4]) {
    const int64_t base = g * 4;
    if (quad) {
      const Quad<T> xv = reinterpret_cast<const Quad<T>*>(x)[g];
      Quad<T> bv{};
      if (bias) bv = *reinterpret_cast<const Quad<T>*>(bias + base % c);
      Quad<O> rv{};
      if (res) rv = reinterpret_cast<const Quad<O>*>(res)[g];
      Quad<O> ov;
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        float v = to_f32(xv.v[k]) + (bias ? to_f32(bv.v[k]) : 0.f);
        if (d.p > 0.f) v = keep[k] ? v * d.keep_scale : 0.f;
        ov.v[k] = from_f32<O>((res ? to_f32(rv.v[k]) : 0.f) + v);
      }
      reinterpret_cast<Quad<O>*>(out)[g] = ov;
      return;
    }
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const int64_t i = base + k;
      if (i >= n) break;
      float v = to_f32(x[i]) + (bias ? to_f32(bias[i % c]) : 0.f);
      if (d.p > 0.f) v = keep[k] ? v * d.keep_scale : 0.f;
      out[i] = from_f32<O>((res ? to_f32(res[i]) : 0.f) + v);
    }
  });
}

// dx (X: dout's T, or 16-bit from an fp32 dout) = mask ⊙ dout / (1 − p); quad as above.
template <typename T, typename X>
__global__ void dropout_backward_kernel(int64_t n, const T* dout, X* dx, DropoutParams d, bool quad) {
  for_each_dropout_group(n, d, [&](int64_t g, const bool keep[4]) {
    const auto value = [&](float v, int k) { return from_f32<X>(d.p > 0.f ? (keep[k] ? v * d.keep_scale : 0.f) : v); };
    if (quad) {
      const Quad<T> dv = reinterpret_cast<const Quad<T>*>(dout)[g];
      Quad<X> o;
#pragma unroll
      for (int k = 0; k < 4; ++k) o.v[k] = value(to_f32(dv.v[k]), k);
      reinterpret_cast<Quad<X>*>(dx)[g] = o;
      return;
    }
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const int64_t i = g * 4 + k;
      if (i >= n) break;
      dx[i] = value(to_f32(dout[i]), k);
    }
  });
}

template <typename T> const T* ptr_or_null(const Tensor& t) {
  return t.defined() ? static_cast<const T*>(t.data_ptr()) : nullptr;
}

// mul's mixed dtypes (kernels/elementwise.h): a of TA, b fp32 (any strides, merged into bd), out
// of TO, where TA or TO is 16-bit and the other fp32. Four consecutive elements per thread: one
// 4-element load of a and store of out (8 bytes of bf16, 16 of fp32) and one offset of b (its
// innermost merged dim a multiple of 4 long, so the four lie in one run of b) where `quads`; one
// element at a time otherwise. The values are the composition's: float(a) exact, the product in
// fp32, rounded once as stored.
template <typename TA, typename TO, typename I>
__global__ void mixed_binary_kernel(I n, const TA* __restrict__ a, const float* __restrict__ b, StridedDescT<I> bd,
                                    I inner_stride, bool quads, TO* __restrict__ out, Affine2 f) {
  const I tid = static_cast<I>(blockIdx.x) * static_cast<I>(blockDim.x) + static_cast<I>(threadIdx.x);
  const I stride = static_cast<I>(gridDim.x) * static_cast<I>(blockDim.x);
  if (quads) {
    for (I q = tid; q < n / 4; q += stride) {
      const I i0 = q * 4, off = bd.offset_of(i0);
      const Quad<TA> av = load_vec<TA, 4>(a + i0);
      Quad<TO> o;
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        const float x[2] = {to_f32(av.v[k]), b[off + static_cast<I>(k) * inner_stride]};
        o.v[k] = from_f32<TO>(f(x, i0 + k));
      }
      store_vec<TO, 4>(out + i0, o);
    }
    return;
  }
  for (I i = tid; i < n; i += stride) {
    const float x[2] = {to_f32(a[i]), b[bd.offset_of(i)]};
    out[i] = from_f32<TO>(f(x, i));
  }
}

template <typename TA, typename TO>
void launch_mixed_binary(const Tensor& a, const Tensor& b, const Tensor& out, Affine2 f) {
  const int64_t n = out.numel();
  const StridedDesc bd = strided_desc(b);
  bool small = false;
  const StridedDescT<int32_t> bd32 = strided_desc32(bd, n, small);
  const auto* ap = static_cast<const TA*>(a.data_ptr());
  const auto* bp = static_cast<const float*>(b.data_ptr());
  auto* op = static_cast<TO*>(out.data_ptr());
  const int64_t inner = bd.shape[bd.ndim - 1], inner_stride = bd.strides[bd.ndim - 1];
  const bool quads = n % 4 == 0 && inner % 4 == 0 && reinterpret_cast<uintptr_t>(ap) % (4 * sizeof(TA)) == 0 &&
                     reinterpret_cast<uintptr_t>(op) % (4 * sizeof(TO)) == 0;
  const int64_t work = quads ? n / 4 : n;
  const cudaStream_t stream = cuda_stream_of(out.device());
  if (small)
    launch_kernel<mixed_binary_kernel<TA, TO, int32_t>>(grid_for(work, kBlock), kBlock, 0, stream, static_cast<int32_t>(n), ap,
        bp, bd32, static_cast<int32_t>(inner_stride), quads, op, f);
  else
    launch_kernel<mixed_binary_kernel<TA, TO, int64_t>>(grid_for(work, kBlock), kBlock, 0, stream, n, ap, bp, bd,
        inner_stride, quads, op, f);
  FC_CUDA_CHECK_LAUNCH();
}

}  // namespace

void binary(float alpha, const Tensor& a, float beta, const Tensor& b, float gamma, const Tensor& out) {
  const Affine2 f{alpha, beta, gamma};
  if (a.dtype() != out.dtype() || b.dtype() != a.dtype()) {  // mul's mixed dtypes: b f32, and a or out
    cuda_dispatch_float(a.dtype(), [&](auto ta) {
      cuda_dispatch_float(out.dtype(), [&](auto to) {
        using TA = decltype(ta);
        using TO = decltype(to);
        if constexpr (std::is_same_v<TA, float> != std::is_same_v<TO, float>) launch_mixed_binary<TA, TO>(a, b, out, f);
        else FC_THROW("binary (cuda): a ", a.str(), ", out ", out.str(), " are not mul's mixed dtypes");
      });
    });
    return;
  }
  if (b.is_contiguous()) {
    binary_map(a, b, out, f);
    return;
  }
  cuda_dispatch_float(a.dtype(), [&](auto tag) {
    using T = decltype(tag);
    constexpr int kN = Pack16<T>::kN;
    const int64_t n = out.numel();
    const StridedDesc bd = strided_desc(b);
    bool small = false;
    const StridedDescT<int32_t> bd32 = strided_desc32(bd, n, small);
    const cudaStream_t stream = cuda_stream_of(out.device());
    const T* ap = static_cast<const T*>(a.data_ptr());
    const T* bp = static_cast<const T*>(b.data_ptr());
    T* op = static_cast<T*>(out.data_ptr());
    const int64_t inner = bd.shape[bd.ndim - 1], inner_stride = bd.strides[bd.ndim - 1];
    if (aligned16(ap) && aligned16(op) && inner % kN == 0) {
      // b's pack reads: one element, one aligned 16-byte pack (unit stride, every pack's start
      // a multiple of kN elements from an aligned base), or kN elements.
      bool contiguous = inner_stride == 1 && aligned16(bp);
      for (int d = 0; d + 1 < bd.ndim; ++d) contiguous = contiguous && bd.strides[d] % kN == 0;
      const int64_t nv = n / kN;
      const auto run = [&](auto read) {
        constexpr PackRead R = decltype(read)::value;
        if (small)
          launch_kernel<strided_binary_vec_kernel<T, int32_t, R>>(grid_for(nv, kBlock), kBlock, 0, stream,
              static_cast<int32_t>(nv), ap, bp, bd32, static_cast<int32_t>(inner_stride), op, f);
        else
          launch_kernel<strided_binary_vec_kernel<T, int64_t, R>>(grid_for(nv, kBlock), kBlock, 0, stream, nv, ap,
              bp, bd, inner_stride, op, f);
      };
      if (inner_stride == 0) run(std::integral_constant<PackRead, PackRead::kBroadcast>{});
      else if (contiguous) run(std::integral_constant<PackRead, PackRead::kContiguous>{});
      else run(std::integral_constant<PackRead, PackRead::kStrided>{});
    } else if (small) {
      launch_kernel<strided_binary_kernel<T, int32_t>>(grid_for(n, kBlock), kBlock, 0, stream,
          static_cast<int32_t>(n), ap, bp, bd32, op, f);
    } else {
      launch_kernel<strided_binary_kernel<T, int64_t>>(grid_for(n, kBlock), kBlock, 0, stream, n, ap, bp, bd, op, f);
    }
    FC_CUDA_CHECK_LAUNCH();
  });
}

// dst[i] = f(dst[i], float(src[i])) with add's Affine2 (1, 1, 0): the values of a conversion
// kernel followed by add, in one pass (engine.cpp adds bf16 gradient contributions to fp32 ones).
template <typename S>
__global__ void add_into_f32_kernel(int64_t n, float* dst, const S* src, Affine2 f) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float x[2] = {dst[i], to_f32(src[i])};
    dst[i] = f(x, i);
  }
}

void add_into_f32(const Tensor& dst, const Tensor& src) {
  const int64_t n = dst.numel();
  cuda_dispatch_float(src.dtype(), [&](auto tag) {
    using S = decltype(tag);
    launch_kernel<add_into_f32_kernel<S>>(grid_for(n, kBlock), kBlock, 0, cuda_stream_of(dst.device()), n,
                                          static_cast<float*>(dst.data_ptr()), static_cast<const S*>(src.data_ptr()),
                                          Affine2{1.f, 1.f, 0.f});
    FC_CUDA_CHECK_LAUNCH();
  });
}

void scale(const Tensor& x, float s, const Tensor& out) { unary(x, out, Scale{s}); }
void reciprocal_shift(const Tensor& x, float eps, const Tensor& out) { unary(x, out, ReciprocalShift{eps}); }
void relu_forward(const Tensor& x, const Tensor& y) { unary(x, y, ReluFwd{}); }
void relu_backward(const Tensor& x, const Tensor& dy, const Tensor& dx) { binary_map(x, dy, dx, ReluBwd{}); }
void gelu_forward(const Tensor& x, const Tensor& y) { unary(x, y, GeluFwd{}); }
void gelu_backward(const Tensor& x, const Tensor& dy, const Tensor& dx) { binary_map(x, dy, dx, GeluBwd{}); }
void sigmoid_forward(const Tensor& x, const Tensor& y) { unary(x, y, SigmoidFwd{}); }
void sigmoid_backward(const Tensor& y, const Tensor& dy, const Tensor& dx) { binary_map(y, dy, dx, SigmoidBwd{}); }
void sigmoid_gate_forward(const Tensor& g, const Tensor& x, const Tensor& out) {
  binary_map(g, x, out, SigmoidGate{});
}

void sigmoid_gate_backward(const Tensor& g, const Tensor& x, const Tensor& dout, const Tensor& dg,
                           const Tensor& dx) {
  cuda_dispatch_float(g.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const int64_t n = g.numel();
    launch_kernel<sigmoid_gate_backward_kernel<T>>(grid_for(n, kBlock), kBlock, 0, cuda_stream_of(g.device()),
        n, static_cast<const T*>(g.data_ptr()), static_cast<const T*>(x.data_ptr()),
        static_cast<const T*>(dout.data_ptr()), static_cast<T*>(dg.data_ptr()), static_cast<T*>(dx.data_ptr()));
    FC_CUDA_CHECK_LAUNCH();
  });
}

namespace {
dim3 edge_grid(int64_t rows, int64_t c) {
  return dim3(static_cast<unsigned>((rows + kEdgeTile - 1) / kEdgeTile), static_cast<unsigned>((c + kEdgeTile - 1) / kEdgeTile));
}
}  // namespace

void masked_gate_channel_major_forward(const Tensor& g, const Tensor& p, const Tensor& m, const Tensor& out) {
  const int64_t rows = g.size(0) * g.size(1), c = g.size(2);
  FC_CHECK(c <= 65535 * kEdgeTile, "masked_gate_channel_major_forward (cuda): ", c, " channels");
  cuda_dispatch_float(g.dtype(), [&](auto tag) {
    using T = decltype(tag);
    launch_kernel<masked_gate_cm_forward_kernel<T>>(edge_grid(rows, c), dim3(kEdgeTile, kEdgeRowsPerPass), 0,
        cuda_stream_of(g.device()), static_cast<const T*>(g.data_ptr()), static_cast<const T*>(p.data_ptr()),
        static_cast<const T*>(m.data_ptr()), static_cast<T*>(out.data_ptr()), rows, static_cast<int>(c));
    FC_CUDA_CHECK_LAUNCH();
  });
}

void masked_gate_channel_major_backward(const Tensor& g, const Tensor& p, const Tensor& m, const Tensor& dout,
                                        const Tensor& dg, const Tensor& dp) {
  const int64_t rows = g.size(0) * g.size(1), c = g.size(2);
  FC_CHECK(c <= 65535 * kEdgeTile, "masked_gate_channel_major_backward (cuda): ", c, " channels");
  cuda_dispatch_float(g.dtype(), [&](auto tag) {
    using T = decltype(tag);
    launch_kernel<masked_gate_cm_backward_kernel<T>>(edge_grid(rows, c), dim3(kEdgeTile, kEdgeRowsPerPass), 0,
        cuda_stream_of(g.device()), static_cast<const T*>(g.data_ptr()), static_cast<const T*>(p.data_ptr()),
        static_cast<const T*>(m.data_ptr()), static_cast<const T*>(dout.data_ptr()), static_cast<T*>(dg.data_ptr()),
        static_cast<T*>(dp.data_ptr()), rows, static_cast<int>(c));
    FC_CUDA_CHECK_LAUNCH();
  });
}

void bias_dropout_residual_forward(const Tensor& x, const Tensor& bias, const Tensor& residual, float p,
                                   uint64_t seed, uint64_t offset, const DropoutMaskDesc& mask,
                                   const Tensor& out) {
  const DropoutParams d{p, dropout_scale(p), seed, offset, mask};
  const int64_t n = x.numel();
  cuda_dispatch_float(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const auto run = [&](auto otag) {
      using O = decltype(otag);
      const int64_t c = x.size(-1);
      const T* bp = ptr_or_null<T>(bias);
      const O* rp = ptr_or_null<O>(residual);
      const bool quad = n % 4 == 0 && c % 4 == 0 && aligned_quad<T>(x.data_ptr()) && aligned_quad<T>(bp) &&
                        aligned_quad<O>(rp) && aligned_quad<O>(out.data_ptr());
      launch_kernel<bias_dropout_residual_kernel<T, O>>(grid_for((n + 3) / 4, kBlock), kBlock, 0,
          cuda_stream_of(x.device()), n, c, static_cast<const T*>(x.data_ptr()), bp, rp,
          static_cast<O*>(out.data_ptr()), d, quad);
    };
    if (out.dtype() == x.dtype()) {
      run(T{});
    } else if constexpr (std::is_same_v<T, float>) {
      cuda_dispatch_float(out.dtype(), run);  // an fp32 update into a 16-bit stream
    } else {
      run(float{});  // a 16-bit update into an fp32 stream (elementwise.cpp checked the mix)
    }
    FC_CUDA_CHECK_LAUNCH();
  });
}

void dropout_backward(const Tensor& dout, float p, uint64_t seed, uint64_t offset, const DropoutMaskDesc& mask,
                      const Tensor& dx) {
  const DropoutParams d{p, dropout_scale(p), seed, offset, mask};
  const int64_t n = dout.numel();
  cuda_dispatch_float(dx.dtype(), [&](auto tag) {
    using X = decltype(tag);
    const auto run = [&](auto dtag) {
      using T = decltype(dtag);
      const bool quad = n % 4 == 0 && aligned_quad<T>(dout.data_ptr()) && aligned_quad<X>(dx.data_ptr());
      launch_kernel<dropout_backward_kernel<T, X>>(grid_for((n + 3) / 4, kBlock), kBlock, 0,
          cuda_stream_of(dout.device()), n, static_cast<const T*>(dout.data_ptr()), static_cast<X*>(dx.data_ptr()), d,
          quad);
    };
    if (dout.dtype() == dx.dtype()) {
      run(X{});
    } else if constexpr (std::is_same_v<X, float>) {
      cuda_dispatch_float(dout.dtype(), run);  // a 16-bit dout into an fp32 dx
    } else {
      run(float{});  // the mixed forward's fp32 dout into a 16-bit dx
    }
    FC_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace foldcore::ops::cuda
