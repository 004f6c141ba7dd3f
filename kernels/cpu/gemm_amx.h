// bf16 GEMM on the CPU's matrix tiles (Intel AMX-BF16: Sapphire Rapids and later): bf16 operands,
// fp32 products and sums, fp32 result. The CPU path of the GEMM family uses it for bf16 operands
// where the CPU and the OS allow it, instead of converting both operands to fp32 for sgemm.
//
// Numerics: every product of two bf16 values is exact in fp32, and TDPBF16PS adds the products
// of each pair of k into the fp32 accumulator with round-to-nearest-even, so the result is an fp32
// dot product in another summation order than sgemm's (the bound: K·2⁻²⁴·Σ|a·b| either way). The
// tiles treat subnormal bf16 inputs and results as zero (DAZ/FTZ), which sgemm does not.
#pragma once

#include <cstdint>

#include "core/half.h"

namespace foldcore::ops::cpu {

// True when the CPU has AMX-BF16, the OS granted this process the tile state (Linux's
// ARCH_REQ_XCOMP_PERM, requested on the first call) and FOLDCORE_CPU_AMX is not "0".
bool amx_bf16_available();

// C = op(A)·op(B) (accumulate: C += op(A)·op(B)) for bf16 A and B and row-major fp32 C, op(A)
// m×k, op(B) k×n, leading dimensions in elements. parallel: OpenMP over column or row blocks;
// false: this thread only (callable inside a parallel region). Requires amx_bf16_available().
void gemm_bf16_amx(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const bf16* a, int64_t lda,
                   const bf16* b, int64_t ldb, float* c, int64_t ldc, bool accumulate, bool parallel);

// op(B) (k×n, bf16) packed once into tile order for many products with different A: the
// attention's K and V, shared by every query tile of a (batch, head).
class AmxPackedB {
 public:
  AmxPackedB();
  ~AmxPackedB();
  AmxPackedB(const AmxPackedB&) = delete;
  AmxPackedB& operator=(const AmxPackedB&) = delete;
  void pack(bool trans_b, int64_t k, int64_t n, const bf16* b, int64_t ldb);
  // C (+= when accumulate) = A·B for row-major bf16 A (m×k, leading dimension lda) on this thread.
  void multiply(int64_t m, const bf16* a, int64_t lda, float* c, int64_t ldc, bool accumulate) const;
  int64_t k() const { return k_; }
  int64_t n() const { return n_; }

 private:
  int64_t k_ = 0, n_ = 0, capacity_ = 0;
  uint16_t* data_ = nullptr;
};

}  // namespace foldcore::ops::cpu
