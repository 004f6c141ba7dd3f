// GEMM benchmarks at AlphaFold / BERT shapes. One JSON line per case.
//   bench_gemm [--device cpu|cuda] [--quick|--full]
// CPU: GFLOP/s and the ratio to a large square OpenBLAS sgemm measured first in the same run
// (the practical roofline of this machine). CUDA: TFLOP/s. Every case reports peak memory.
// --quick (default) shrinks the CPU shapes so the whole run stays well under a minute; CUDA
// always runs the real shapes.
#include <cstring>
#include <string>

#include "bench/bench_util.h"
#include "core/random.h"
#include "kernels/cpu/gemm_cpu.h"
#include "kernels/gemm.h"
#ifdef FOLDCORE_HAVE_BLAS
#include <cblas.h>
#endif

namespace foldcore {
namespace {

#ifdef FOLDCORE_HAVE_BLAS
constexpr bool kHaveBlas = true;
#else
constexpr bool kHaveBlas = false;
#endif

struct Shape4 {
  const char* name;
  int64_t batch, m, n, k;
  bool trans_b;     // Linear layers store W as [out, in]
  bool shared_b;    // weight shared over the batch (Linear over leading dims)
};

double gflop(const Shape4& s) { return 2.0 * s.batch * s.m * s.n * s.k * 1e-9; }

void run_case(const Shape4& s, DType dt, Device dev, double roofline_gflops, int iters) {
  Generator gen(1);
  bench::reset_peak(dev);
  Tensor a = randn({s.batch, s.m, s.k}, gen, 0, 1, dt, dev);
  Tensor b = s.shared_b ? randn(s.trans_b ? Shape{s.n, s.k} : Shape{s.k, s.n}, gen, 0, 1, dt, dev)
                        : randn(s.trans_b ? Shape{s.batch, s.n, s.k} : Shape{s.batch, s.k, s.n}, gen, 0, 1, dt, dev);
  Tensor out = Tensor::empty({s.batch, s.m, s.n}, dt, dev);
  ops::GemmArgs args;
  args.trans_b = s.trans_b;
  const double ms = bench::time_ms(dev, [&] { ops::gemm(a, b, out, args); }, 1, iters);
  const double rate = gflop(s) / (ms * 1e-3);  // GFLOP/s
  bench::JsonLine j;
  j.str("bench", "gemm").str("case", s.name).str("device", dev.str()).str("dtype", std::string(dtype_name(dt)));
  j.integer("batch", s.batch).integer("m", s.m).integer("n", s.n).integer("k", s.k).num("ms", ms);
  if (dev.is_cuda()) {
    j.num("tflops", rate * 1e-3);
  } else {
    j.num("gflops", rate).num("ratio_to_sgemm_roofline", rate / roofline_gflops);
  }
  j.integer("peak_bytes", static_cast<long long>(bench::peak_bytes(dev))).print();
}

// A large square sgemm, straight to OpenBLAS when available (else through ops::gemm and the
// blocked fallback): the best this machine's CPU GEMM does, as the baseline of the ratios.
double cpu_roofline(int64_t n) {
  Generator gen(2);
  Tensor a = randn({n, n}, gen), b = randn({n, n}, gen), c = Tensor::empty({n, n}, DType::f32);
  auto fn = [&] {
#ifdef FOLDCORE_HAVE_BLAS
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(n), static_cast<int>(n),
                static_cast<int>(n), 1.f, a.data<float>(), static_cast<int>(n), b.data<float>(), static_cast<int>(n),
                0.f, c.data<float>(), static_cast<int>(n));
#else
    ops::gemm(a, b, c);
#endif
  };
  const double ms = bench::time_ms(Device::cpu(), fn, 1, 3);
  const double gf = 2.0 * n * n * n * 1e-9 / (ms * 1e-3);
  bench::JsonLine()
      .str("bench", "gemm")
      .str("case", "sgemm_roofline_square")
      .str("device", "cpu")
      .str("dtype", "f32")
      .integer("m", n).integer("n", n).integer("k", n)
      .num("ms", ms)
      .num("gflops", gf)
      .boolean("openblas", kHaveBlas)
      .str("blas_core", ops::cpu::blas_core())
      .print();
  return gf;
}

}  // namespace
}  // namespace foldcore

int main(int argc, char** argv) {
  using namespace foldcore;
  try {
    const bench::BenchArgs args = bench::parse_bench_args(argc, argv, "bench_gemm");
    const Device dev = args.device;
    const bool full = args.full;
    const bool big = full || dev.is_cuda();
    // AlphaFold: MSA transition Linear [N_seq·N_res, 256]→[.., 1024] (N_seq 512, N_res 256), pair
    // projection [N_res², 128]→[.., 128], triangle multiplication contraction: 128 channels of
    // [N_res × N_res]·[N_res × N_res]. BERT-Large FFN: [B·512, 1024]→[.., 4096] (B = 8).
    const Shape4 cases_full[] = {
        {"af2_msa_transition_linear", 1, 512 * 256, 1024, 256, true, true},
        {"af2_pair_linear", 1, 256 * 256, 128, 128, true, true},
        {"af2_trimul_contraction", 128, 256, 256, 256, false, false},
        {"bert_ffn_in", 1, 8 * 512, 4096, 1024, true, true},
        {"bert_ffn_out", 1, 8 * 512, 1024, 4096, true, true},
        {"bert_attention_scores", 8 * 16, 512, 512, 64, true, false},
    };
    const Shape4 cases_quick[] = {
        {"af2_msa_transition_linear", 1, 32 * 128, 1024, 256, true, true},
        {"af2_pair_linear", 1, 128 * 128, 128, 128, true, true},
        {"af2_trimul_contraction", 128, 64, 64, 64, false, false},
        {"af2_trimul_contraction", 32, 128, 128, 128, false, false},
        {"bert_ffn_in", 1, 512, 4096, 1024, true, true},
        {"bert_attention_scores", 16, 512, 512, 64, true, false},
    };
    double roof = 0;
    if (dev.is_cpu()) roof = cpu_roofline(big ? 2048 : 1024);
    const int iters = dev.is_cuda() ? 20 : 3;
    for (DType dt : {DType::f32, DType::bf16}) {
      if (big) {
        for (const auto& s : cases_full) run_case(s, dt, dev, roof, iters);
      } else {
        for (const auto& s : cases_quick) run_case(s, dt, dev, roof, iters);
      }
    }
  } catch (const Error& e) {
    std::fprintf(stderr, "bench_gemm: %s\n", e.what());
    return 1;
  }
  return 0;
}
