// cuBLASLt stand-in for the host emulation: the subset of the API FoldCore's GEMM uses, computed
// on the CPU with the library's semantics — column-major layouts, op(A)/op(B), strided batches,
// D = alpha·op(A)·op(B) + beta·C, then the BIAS (per row of D) and RELU epilogues — with fp32
// accumulation and the output rounded to its dtype once, as cuBLASLt does with
// CUBLAS_COMPUTE_32F. Validation mirrors the library's: a leading dimension shorter than the
// rows, mismatched batch counts or shapes give CUBLAS_STATUS_INVALID_VALUE.
#include <cstdint>
#include <cstring>
#include <vector>

#include "core/cuda/emu/cuda_emu.h"
#include "core/cuda/emu/emu_internal.h"

#if defined(FOLDCORE_HAVE_BLAS)
#include <cblas.h>
#endif

struct fc_emu_lt_handle {
  int unused = 0;
};
struct fc_emu_lt_desc {
  cublasOperation_t trans_a = CUBLAS_OP_N, trans_b = CUBLAS_OP_N;
  cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  const void* bias = nullptr;
  cudaDataType_t bias_type = CUDA_R_32F;
  int64_t bias_batch_stride = 0;
};
struct fc_emu_lt_layout {
  cudaDataType_t type = CUDA_R_32F;
  uint64_t rows = 0, cols = 0;
  int64_t ld = 0;
  int32_t batch = 1;
  int64_t stride = 0;
};
struct fc_emu_lt_pref {
  uint64_t max_workspace = 0;
};

namespace {

template <typename V> cublasStatus_t read_attr(V& out, const void* v, size_t bytes) {
  if (!v || bytes != sizeof(V)) return CUBLAS_STATUS_INVALID_VALUE;
  std::memcpy(&out, v, sizeof(V));
  return CUBLAS_STATUS_SUCCESS;
}

float load(cudaDataType_t t, const void* base, int64_t idx) {
  switch (t) {
    case CUDA_R_16BF: return static_cast<float>(static_cast<const __nv_bfloat16*>(base)[idx]);
    case CUDA_R_16F: return static_cast<float>(static_cast<const __half*>(base)[idx]);
    default: return static_cast<const float*>(base)[idx];
  }
}

void store(cudaDataType_t t, void* base, int64_t idx, float v) {
  switch (t) {
    case CUDA_R_16BF: static_cast<__nv_bfloat16*>(base)[idx] = __nv_bfloat16(v); break;
    case CUDA_R_16F: static_cast<__half*>(base)[idx] = __half(v); break;
    default: static_cast<float*>(base)[idx] = v;
  }
}

bool valid_type(cudaDataType_t t) { return t == CUDA_R_32F || t == CUDA_R_16BF || t == CUDA_R_16F; }

constexpr uint64_t kHeuristicWorkspace = 4096;

// c[m×n] = a[m×k] · btᵀ (bt is n×k), all row-major and contiguous, fp32 accumulation.
void product(const float* a, const float* bt, float* c, int64_t m, int64_t n, int64_t k) {
  if (m == 0 || n == 0) return;
#if defined(FOLDCORE_HAVE_BLAS)
  if (k > 0) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(m), static_cast<int>(n), static_cast<int>(k),
                1.f, a, static_cast<int>(k), bt, static_cast<int>(k), 0.f, c, static_cast<int>(n));
    return;
  }
#endif
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      float s = 0.f;
      for (int64_t p = 0; p < k; ++p) s += a[i * k + p] * bt[j * k + p];
      c[i * n + j] = s;
    }
}  // asks for scratch so callers' workspace path runs

}  // namespace

cublasStatus_t cublasLtCreate(cublasLtHandle_t* h) {
  *h = new fc_emu_lt_handle;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtDestroy(cublasLtHandle_t h) {
  delete h;
  return CUBLAS_STATUS_SUCCESS;
}
const char* cublasLtGetStatusString(cublasStatus_t s) {
  switch (s) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
  }
  return "CUBLAS_STATUS_UNKNOWN";
}

cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* d, cublasComputeType_t compute, cudaDataType_t scale) {
  if (compute != CUBLAS_COMPUTE_32F || scale != CUDA_R_32F) return CUBLAS_STATUS_NOT_SUPPORTED;
  *d = new fc_emu_lt_desc;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t d) {
  delete d;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t a, const void* v,
                                              size_t bytes) {
  switch (a) {
    case CUBLASLT_MATMUL_DESC_TRANSA: return read_attr(d->trans_a, v, bytes);
    case CUBLASLT_MATMUL_DESC_TRANSB: return read_attr(d->trans_b, v, bytes);
    case CUBLASLT_MATMUL_DESC_EPILOGUE: return read_attr(d->epilogue, v, bytes);
    case CUBLASLT_MATMUL_DESC_BIAS_POINTER: return read_attr(d->bias, v, bytes);
    case CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE: return read_attr(d->bias_type, v, bytes);
    case CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE: return read_attr(d->bias_batch_stride, v, bytes);
  }
  return CUBLAS_STATUS_INVALID_VALUE;
}

cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* l, cudaDataType_t t, uint64_t rows, uint64_t cols,
                                          int64_t ld) {
  if (!valid_type(t) || ld < static_cast<int64_t>(rows) || ld < 1) return CUBLAS_STATUS_INVALID_VALUE;
  *l = new fc_emu_lt_layout{t, rows, cols, ld, 1, 0};
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t l) {
  delete l;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t l, cublasLtMatrixLayoutAttribute_t a,
                                                const void* v, size_t bytes) {
  switch (a) {
    case CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT: return read_attr(l->batch, v, bytes);
    case CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET: return read_attr(l->stride, v, bytes);
  }
  return CUBLAS_STATUS_INVALID_VALUE;
}

cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* p) {
  *p = new fc_emu_lt_pref;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t p) {
  delete p;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t p, cublasLtMatmulPreferenceAttributes_t a,
                                                    const void* v, size_t bytes) {
  if (a == CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES) return read_attr(p->max_workspace, v, bytes);
  uint32_t align = 0;
  const cublasStatus_t s = read_attr(align, v, bytes);
  if (s != CUBLAS_STATUS_SUCCESS) return s;
  return (align != 0 && (align & (align - 1)) == 0) ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_INVALID_VALUE;
}

cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t h, cublasLtMatmulDesc_t d, cublasLtMatrixLayout_t,
                                              cublasLtMatrixLayout_t, cublasLtMatrixLayout_t, cublasLtMatrixLayout_t,
                                              cublasLtMatmulPreference_t p, int requested,
                                              cublasLtMatmulHeuristicResult_t* results, int* found) {
  if (!h || !d || !p || requested < 1 || !results || !found) return CUBLAS_STATUS_INVALID_VALUE;
  results[0] = cublasLtMatmulHeuristicResult_t{};
  results[0].workspaceSize = std::min<uint64_t>(p->max_workspace, kHeuristicWorkspace);
  results[0].state = CUBLAS_STATUS_SUCCESS;
  results[0].wavesCount = 1.f;
  *found = 1;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmul(cublasLtHandle_t h, cublasLtMatmulDesc_t d, const void* alpha_p, const void* A,
                              cublasLtMatrixLayout_t la, const void* B, cublasLtMatrixLayout_t lb, const void* beta_p,
                              const void* C, cublasLtMatrixLayout_t lc, void* D, cublasLtMatrixLayout_t ld,
                              const cublasLtMatmulAlgo_t* algo, void* workspace, size_t workspace_bytes,
                              cudaStream_t) {
  if (!h || !d || !la || !lb || !lc || !ld || !alpha_p || !beta_p || !A || !B || !D || !algo)
    return CUBLAS_STATUS_INVALID_VALUE;
  if (workspace_bytes > 0 && !workspace) return CUBLAS_STATUS_INVALID_VALUE;
  const bool ta = d->trans_a == CUBLAS_OP_T, tb = d->trans_b == CUBLAS_OP_T;
  const int64_t m = static_cast<int64_t>(ld->rows), n = static_cast<int64_t>(ld->cols);
  const int64_t k = static_cast<int64_t>(ta ? la->rows : la->cols);
  // Shapes: op(A) m×k, op(B) k×n, C and D m×n; one batch count for all four.
  if (static_cast<int64_t>(ta ? la->cols : la->rows) != m || static_cast<int64_t>(tb ? lb->cols : lb->rows) != k ||
      static_cast<int64_t>(tb ? lb->rows : lb->cols) != n || lc->rows != ld->rows || lc->cols != ld->cols)
    return CUBLAS_STATUS_INVALID_VALUE;
  const int32_t batch = ld->batch;
  if (la->batch != batch || lb->batch != batch || lc->batch != batch || batch < 1) return CUBLAS_STATUS_INVALID_VALUE;
  const bool bias = d->epilogue == CUBLASLT_EPILOGUE_BIAS || d->epilogue == CUBLASLT_EPILOGUE_RELU_BIAS;
  const bool relu = d->epilogue == CUBLASLT_EPILOGUE_RELU || d->epilogue == CUBLASLT_EPILOGUE_RELU_BIAS;
  if (bias && !d->bias) return CUBLAS_STATUS_INVALID_VALUE;
  float alpha, beta;
  std::memcpy(&alpha, alpha_p, 4);
  std::memcpy(&beta, beta_p, 4);
  if (beta != 0.f && !C) return CUBLAS_STATUS_INVALID_VALUE;
  if (fc_emu::skip_device_work()) return CUBLAS_STATUS_SUCCESS;

  // op(A) as m rows of k and op(B)ᵀ as n rows of k, contiguous; their product in fp32 by the
  // project's CPU GEMM (OpenBLAS sgemm when built with it), then the epilogue per element.
  std::vector<float> a(static_cast<size_t>(m * k)), bt(static_cast<size_t>(n * k)), acc(static_cast<size_t>(m * n));
  for (int32_t bi = 0; bi < batch; ++bi) {
    const int64_t oa = bi * la->stride, ob = bi * lb->stride, oc = bi * lc->stride, od = bi * ld->stride;
    for (int64_t i = 0; i < m; ++i)
      for (int64_t p = 0; p < k; ++p)
        a[i * k + p] = load(la->type, A, oa + (ta ? p + i * la->ld : i + p * la->ld));
    for (int64_t j = 0; j < n; ++j)
      for (int64_t p = 0; p < k; ++p)
        bt[j * k + p] = load(lb->type, B, ob + (tb ? j + p * lb->ld : p + j * lb->ld));
    product(a.data(), bt.data(), acc.data(), m, n, k);
    for (int64_t j = 0; j < n; ++j)
      for (int64_t i = 0; i < m; ++i) {
        float v = alpha * acc[static_cast<size_t>(i * n + j)];
        if (beta != 0.f) v += beta * load(lc->type, C, oc + i + j * lc->ld);
        if (bias) v += load(d->bias_type, d->bias, bi * d->bias_batch_stride + i);
        if (relu) v = v > 0.f ? v : 0.f;
        store(ld->type, D, od + i + j * ld->ld, v);
      }
  }
  return CUBLAS_STATUS_SUCCESS;
}
