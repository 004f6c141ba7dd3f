// CUDA GEMM through cuBLASLt.
//
// Row-major trick: a row-major [M,N] matrix is the column-major [N,M] matrix, so
//   out = op_a(A)·op_b(B)  (row-major)   ⇔   outᵀ = op_b(B)ᵀ·op_a(A)ᵀ  (column-major)
// and cuBLASLt is called with its "A" = our b, its "B" = our a, m = N, n = M. Our bias[N] then
// runs along cuBLASLt's rows, which is exactly what its BIAS epilogue adds.
//
// Precision: every dtype accumulates with CUBLAS_COMPUTE_32F. f32 inputs are NOT allowed TF32
// (plain fp32 FMA), so CUDA and the CPU reference agree to fp32 rounding; this costs speed on f32
// and is the reason the fast path for training is bf16.
//
// Epilogues: BIAS and RELU_BIAS are fused. cuBLASLt's GELU epilogue is the tanh approximation,
// while our contract (elementwise.h) is the exact erf GELU, so GELU is NOT fused: the GEMM runs
// with the BIAS epilogue writing pre_act (or out), then post_kernel applies the exact GELU. The
// same path serves relu when pre_act is requested (cuBLASLt's RELU_AUX emits a bitmask, not the
// pre-activation values our backward contract asks for).
#include "kernels/cuda/gemm_cuda.h"
#include "kernels/gemm.h"

#include <cublasLt.h>

#include <array>
#include <memory>
#include <mutex>
#include <unordered_map>

#include "core/cuda/cuda_utils.cuh"
#include "core/cuda/launch.cuh"

#define FC_CUBLAS_CHECK(expr)                                                                     \
  do {                                                                                            \
    const cublasStatus_t fc_st_ = (expr);                                                         \
    if (fc_st_ != CUBLAS_STATUS_SUCCESS)                                                          \
      ::foldcore::detail::throw_check_failure(                                                    \
          __FILE__, __LINE__, #expr, ::foldcore::detail::concat("cuBLASLt error: ", cublasLtGetStatusString(fc_st_))); \
  } while (0)

namespace foldcore::ops::cuda {
namespace {

constexpr size_t kWorkspaceBytes = 32u << 20;  // NVIDIA's recommendation for Hopper
constexpr int kMaxDevices = 64;

// One cuBLASLt handle per device, created on first use and kept for the process (part of the
// device context). A cuBLASLt handle holds no stream, so one handle serves every stream.
cublasLtHandle_t lt_handle(int device) {
  FC_CHECK(device >= 0 && device < kMaxDevices, "gemm: device index ", device, " out of range");
  static std::once_flag once[kMaxDevices];
  static cublasLtHandle_t handles[kMaxDevices];
  std::call_once(once[device], [&] { FC_CUBLAS_CHECK(cublasLtCreate(&handles[device])); });
  return handles[device];
}

cudaDataType_t cuda_dtype(DType t) {
  switch (t) {
    case DType::bf16: return CUDA_R_16BF;
    case DType::f16: return CUDA_R_16F;
    default: return CUDA_R_32F;
  }
}

// RAII wrappers for the cuBLASLt descriptors.
struct MatmulDesc {
  cublasLtMatmulDesc_t d = nullptr;
  MatmulDesc() { FC_CUBLAS_CHECK(cublasLtMatmulDescCreate(&d, CUBLAS_COMPUTE_32F, CUDA_R_32F)); }
  ~MatmulDesc() { cublasLtMatmulDescDestroy(d); }
  template <typename V> void set(cublasLtMatmulDescAttributes_t a, const V& v) {
    FC_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(d, a, &v, sizeof(v)));
  }
};

struct Layout {
  cublasLtMatrixLayout_t l = nullptr;
  // A column-major rows×cols matrix with leading dim ld, batch `count` at `stride` apart.
  Layout(cudaDataType_t t, int64_t rows, int64_t cols, int64_t ld, int64_t count, int64_t stride) {
    FC_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&l, t, static_cast<uint64_t>(rows), static_cast<uint64_t>(cols), ld));
    if (count > 1) {
      const int32_t c = static_cast<int32_t>(count);
      FC_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &c, sizeof(c)));
      FC_CUBLAS_CHECK(
          cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof(stride)));
    }
  }
  ~Layout() { cublasLtMatrixLayoutDestroy(l); }
  Layout(const Layout&) = delete;
  Layout& operator=(const Layout&) = delete;
};

struct Preference {
  cublasLtMatmulPreference_t p = nullptr;
  Preference() { FC_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&p)); }
  ~Preference() { cublasLtMatmulPreferenceDestroy(p); }
  template <typename V> void set(cublasLtMatmulPreferenceAttributes_t a, const V& v) {
    FC_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(p, a, &v, sizeof(v)));
  }
};

uint32_t alignment_of(const void* p) {
  const auto v = reinterpret_cast<uintptr_t>(p);
  uint32_t a = 256;
  while (a > 1 && v % a != 0) a >>= 1;
  return a;
}

// Everything the descriptors and the heuristic's choice depend on, except the pointers themselves
// (their alignments are in; the bias pointer is set on the plan's descriptor per call).
struct PlanKey {
  std::array<int64_t, 25> v{};
  bool operator==(const PlanKey& o) const { return v == o.v; }
};
struct PlanKeyHash {
  size_t operator()(const PlanKey& k) const {
    uint64_t h = 1469598103934665603ull;
    for (const int64_t x : k.v) h = (h ^ static_cast<uint64_t>(x)) * 1099511628211ull;
    return static_cast<size_t>(h);
  }
};

// One GEMM shape's cuBLASLt set-up: descriptor, layouts (cuBLASLt's A = our b, B = our a, C = out,
// D = pre_act or out) and the heuristic's result.
struct Plan {
  MatmulDesc desc;
  std::unique_ptr<Layout> la, lb, lc, ld;
  cublasLtMatmulHeuristicResult_t heur{};
  int found = 0;
};

// Per thread: no lock, and a plan's descriptor (whose bias pointer each call sets) is never shared
// between threads. Bounded: a process that keeps meeting new shapes drops its plans and starts over.
constexpr size_t kMaxPlans = 4096;
thread_local std::unordered_map<PlanKey, std::unique_ptr<Plan>, PlanKeyHash> t_plans;
thread_local GemmPlanStats t_plan_stats;

// t = src_scale·src + bias;  pre = t (when given);  out = act(t).  Over [batch, m, n] with each
// matrix's own ld/batch stride; src may alias out (in place).
template <typename T>
__global__ void post_kernel(const T* src, int64_t ld_s, int64_t bs_s, float src_scale, const T* bias, int64_t bs_bias, T* pre,
                            int64_t ld_p, int64_t bs_p, T* out, int64_t ld_o, int64_t bs_o, Activation act,
                            int64_t batch, int64_t m, int64_t n) {
  const int64_t total = batch * m * n;
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < total;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t j = idx % n, i = (idx / n) % m, b = idx / (m * n);
    float t = src_scale == 0.f ? 0.f : src_scale * to_f32(src[b * bs_s + i * ld_s + j]);
    if (bias) t += to_f32(bias[b * bs_bias + j]);
    if (pre) pre[b * bs_p + i * ld_p + j] = from_f32<T>(t);
    if (act == Activation::relu) t = t > 0.f ? t : 0.f;
    if (act == Activation::gelu) t = 0.5f * t * (1.f + erff(t * 0.70710678118654752f));
    out[b * bs_o + i * ld_o + j] = from_f32<T>(t);
  }
}

template <typename T>
void launch_post(const GemmProblem& p, const MatrixRef& src, float src_scale, const void* bias, const MatrixRef* pre,
                 cudaStream_t stream) {
  const int64_t total = p.batch * p.m * p.n;
  constexpr int kThreads = 256;
  launch_kernel<post_kernel<T>>(grid_for(total, kThreads), kThreads, 0, stream,
      static_cast<const T*>(src.ptr), src.ld, src.batch_stride, src_scale, static_cast<const T*>(bias), p.bias_batch_stride,
      pre ? static_cast<T*>(pre->ptr) : nullptr, pre ? pre->ld : 0, pre ? pre->batch_stride : 0,
      static_cast<T*>(p.out.ptr), p.out.ld, p.out.batch_stride, p.act, p.batch, p.m, p.n);
  FC_CUDA_CHECK_LAUNCH();
}

void post(const GemmProblem& p, const MatrixRef& src, float src_scale, const void* bias, const MatrixRef* pre,
          cudaStream_t stream) {
  cuda_dispatch_float(p.dtype, [&](auto tag) { launch_post<decltype(tag)>(p, src, src_scale, bias, pre, stream); });
}

// out (fp32) = beta·out + src (T), over [batch, m, n] with each matrix's own ld and batch stride:
// the mixed product's fallback (16-bit product, then accumulated in fp32).
template <typename T>
__global__ void accumulate_f32_kernel(const T* src, int64_t ld_s, int64_t bs_s, float* out, int64_t ld_o, int64_t bs_o,
                                      float beta, int64_t batch, int64_t m, int64_t n) {
  const int64_t total = batch * m * n;
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < total;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t j = idx % n, i = (idx / n) % m, b = idx / (m * n);
    float* o = out + b * bs_o + i * ld_o + j;
    *o = (beta == 0.f ? 0.f : beta * *o) + to_f32(src[b * bs_s + i * ld_s + j]);
  }
}

// The GEMM's name in the kernel profile (core/kernel_profile.h): operand and output dtypes,
// m×n×k, the batch and the transposes, e.g. "gemm bf16->f32 8192x128x1024 NT batch 4".
const char* profile_name(const GemmProblem& p) {
  // Appends only (GCC 12's -Wrestrict misfires on `"literal" + std::string` here).
  std::string name = "gemm ";
  name.append(dtype_name(p.dtype));
  if (p.out_dtype != p.dtype) name.append("->").append(dtype_name(p.out_dtype));
  name.append(" ").append(std::to_string(p.m)).append("x").append(std::to_string(p.n)).append("x");
  name.append(std::to_string(p.k));
  if (p.trans_a || p.trans_b) name.append(" ").append(p.trans_a ? "T" : "N").append(p.trans_b ? "T" : "N");
  if (p.batch > 1) name.append(" batch ").append(std::to_string(p.batch));
  return kernel_profile::detail::intern(name);
}

}  // namespace

void gemm(const GemmProblem& p0, Device dev) {
  GemmProblem p = p0;
  set_device(dev);
  const cudaStream_t stream = cuda_stream_of(dev);

  const bool mixed = p.out_dtype != p.dtype;  // 16-bit a, b; fp32 out; no bias, act or pre_act (gemm.cpp)
  // K = 0: the product is empty, only beta·out + bias and the activation remain.
  if (p.k == 0) {
    GemmProblem q = p;
    q.dtype = p.out_dtype;
    post(q, q.out, q.beta, q.bias, q.pre_act.ptr ? &q.pre_act : nullptr, stream);
    return;
  }
  // Linear over leading dims (shared b, batched row-major a, dense batches): fold the batch into
  // M, one large GEMM instead of a strided batch.
  const bool pre = p.pre_act.ptr != nullptr;
  if (p.batch > 1 && p.b.batch_stride == 0 && p.bias_batch_stride == 0 && !p.trans_a && p.a.batch_stride == p.m * p.a.ld &&
      p.out.batch_stride == p.m * p.out.ld && (!pre || p.pre_act.batch_stride == p.m * p.pre_act.ld)) {
    p.m *= p.batch;
    p.batch = 1;
  }

  // Where the GEMM writes D and which epilogue it fuses.
  const bool separate_act = p.act == Activation::gelu || pre;
  const MatrixRef d = pre ? p.pre_act : p.out;
  cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_DEFAULT;
  if (separate_act) {
    epi = p.bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
  } else if (p.act == Activation::relu) {
    epi = p.bias ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_RELU;
  } else if (p.bias) {
    epi = CUBLASLT_EPILOGUE_BIAS;
  }

  const cudaDataType_t dt = cuda_dtype(p.dtype);
  const cudaDataType_t dt_out = cuda_dtype(p.out_dtype);
  const PlanKey key{{static_cast<int64_t>(p.dtype), static_cast<int64_t>(p.out_dtype), p.batch, p.m, p.n, p.k,
                     p.trans_a, p.trans_b, static_cast<int64_t>(epi), p.a.ld, p.b.ld, p.out.ld, d.ld,
                     p.a.batch_stride, p.b.batch_stride, p.out.batch_stride, d.batch_stride, p.bias != nullptr,
                     p.bias_batch_stride, alignment_of(p.b.ptr), alignment_of(p.a.ptr), alignment_of(p.out.ptr),
                     alignment_of(d.ptr), p.bias ? alignment_of(p.bias) : 0, dev.index}};
  const cublasLtHandle_t handle = lt_handle(dev.index);
  auto it = t_plans.try_emplace(key).first;
  const bool fresh = it->second == nullptr;  // (also after a heuristic query that threw)
  if (!fresh) {
    ++t_plan_stats.reused;
  } else {
    if (t_plans.size() > kMaxPlans) {  // start over, keeping this shape's slot
      t_plans.clear();
      it = t_plans.try_emplace(key).first;
    }
    ++t_plan_stats.made;
    auto plan = std::make_unique<Plan>();
    MatmulDesc& desc = plan->desc;
    const cublasOperation_t op_lt_a = p.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;  // cuBLASLt A = our b
    const cublasOperation_t op_lt_b = p.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;  // cuBLASLt B = our a
    desc.set(CUBLASLT_MATMUL_DESC_TRANSA, op_lt_a);
    desc.set(CUBLASLT_MATMUL_DESC_TRANSB, op_lt_b);
    desc.set(CUBLASLT_MATMUL_DESC_EPILOGUE, epi);
    if (p.bias) {
      desc.set(CUBLASLT_MATMUL_DESC_BIAS_POINTER, p.bias);
      desc.set(CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, dt);
      if (p.bias_batch_stride != 0) desc.set(CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE, p.bias_batch_stride);
    }
    // Column-major views (rows = row-major cols, cols = row-major rows).
    const int64_t b_rows = p.trans_b ? p.n : p.k, b_cols = p.trans_b ? p.k : p.n;
    const int64_t a_rows = p.trans_a ? p.k : p.m, a_cols = p.trans_a ? p.m : p.k;
    plan->la = std::make_unique<Layout>(dt, b_cols, b_rows, p.b.ld, p.batch, p.b.batch_stride);
    plan->lb = std::make_unique<Layout>(dt, a_cols, a_rows, p.a.ld, p.batch, p.a.batch_stride);
    plan->lc = std::make_unique<Layout>(dt_out, p.n, p.m, p.out.ld, p.batch, p.out.batch_stride);
    plan->ld = std::make_unique<Layout>(dt_out, p.n, p.m, d.ld, p.batch, d.batch_stride);

    Preference pref;
    pref.set(CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, static_cast<uint64_t>(kWorkspaceBytes));
    pref.set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, alignment_of(p.b.ptr));
    pref.set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, alignment_of(p.a.ptr));
    pref.set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, alignment_of(p.out.ptr));
    pref.set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, alignment_of(d.ptr));
    FC_CUBLAS_CHECK(cublasLtMatmulAlgoGetHeuristic(handle, desc.d, plan->la->l, plan->lb->l, plan->lc->l,
                                                   plan->ld->l, pref.p, 1, &plan->heur, &plan->found));
    it->second = std::move(plan);
  }
  Plan& plan = *it->second;
  if (!fresh && p.bias) plan.desc.set(CUBLASLT_MATMUL_DESC_BIAS_POINTER, p.bias);
  const cublasLtMatmulHeuristicResult_t& heur = plan.heur;
  const int found = plan.found;
  if (p.bias && p.bias_batch_stride != 0 && p.batch > 1 && (found == 0 || gemm_bias_batch_fallback())) {
    // No algorithm for one bias per batch entry: one product per entry, each with its own bias.
    const auto at = [](const void* base, int64_t elems, DType t) {
      return static_cast<void*>(static_cast<char*>(const_cast<void*>(base)) + elems * static_cast<int64_t>(dtype_size(t)));
    };
    for (int64_t bi = 0; bi < p.batch; ++bi) {
      GemmProblem q = p;
      q.batch = 1;
      q.a.ptr = at(p.a.ptr, bi * p.a.batch_stride, p.dtype);
      q.b.ptr = at(p.b.ptr, bi * p.b.batch_stride, p.dtype);
      q.out.ptr = at(p.out.ptr, bi * p.out.batch_stride, p.out_dtype);
      if (p.pre_act.ptr) q.pre_act.ptr = at(p.pre_act.ptr, bi * p.pre_act.batch_stride, p.dtype);
      q.bias = at(p.bias, bi * p.bias_batch_stride, p.dtype);
      q.bias_batch_stride = 0;
      gemm(q, dev);
    }
    return;
  }
  if (mixed && (found == 0 || gemm_mixed_fallback())) {
    // No algorithm for 16-bit operands into fp32: the product in the operands' dtype, then added
    // in fp32 (one rounding of the product more).
    Tensor tmp = Tensor::empty({p.batch, p.m, p.n}, p.dtype, dev);
    GemmProblem q = p;
    q.out_dtype = p.dtype;
    q.out = MatrixRef{tmp.data_ptr(), p.n, p.m * p.n};
    q.beta = 0.f;
    gemm(q, dev);
    const int64_t total = p.batch * p.m * p.n;
    cuda_dispatch_float(p.dtype, [&](auto tag) {
      using D = decltype(tag);
      launch_kernel<accumulate_f32_kernel<D>>(grid_for(total, 256), 256, 0, stream, static_cast<const D*>(tmp.data_ptr()), p.n,
                                              p.m * p.n, static_cast<float*>(p.out.ptr), p.out.ld, p.out.batch_stride,
                                              p.beta, p.batch, p.m, p.n);
      FC_CUDA_CHECK_LAUNCH();
    });
    return;
  }
  FC_CHECK(found > 0, "gemm (cuda): cuBLASLt found no algorithm for batch=", p.batch, " m=", p.m, " n=", p.n,
           " k=", p.k, " dtype ", dtype_name(p.dtype), " trans_a=", p.trans_a, " trans_b=", p.trans_b);

  // Workspace from the caching allocator: stream-ordered, so freeing it right after the launch is
  // safe and steady state does no cudaMalloc.
  Tensor workspace;
  if (heur.workspaceSize > 0)
    workspace = Tensor::empty({static_cast<int64_t>(heur.workspaceSize)}, DType::u8, dev);
  const float alpha = p.alpha, beta = p.beta;
  ::foldcore::detail::count_launch();
  const kernel_profile::detail::Scope timed(kernel_profile::enabled() ? profile_name(p) : nullptr, stream);
  FC_CUBLAS_CHECK(cublasLtMatmul(handle, plan.desc.d, &alpha, p.b.ptr, plan.la->l, p.a.ptr, plan.lb->l, &beta,
                                 p.out.ptr, plan.lc->l, d.ptr, plan.ld->l, &heur.algo,
                                 workspace.defined() ? workspace.data_ptr() : nullptr, heur.workspaceSize, stream));
  if (separate_act) post(p, d, 1.f, nullptr, nullptr, stream);  // out = act(pre_act or out)
}

GemmPlanStats plan_stats() { return t_plan_stats; }

}  // namespace foldcore::ops::cuda
