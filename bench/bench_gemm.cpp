// GEMM benchmarks at AlphaFold / BERT shapes. One JSON line per case.
//   bench_gemm [--device cpu|cuda] [--quick|--full]
// CPU: GFLOP/s and the ratio to a large square OpenBLAS sgemm measured first in the same run
// (the practical roofline of this machine). CUDA: TFLOP/s. Every case reports peak memory. The
// af2_dx_* cases time ops::gemm_sum_nt's one kernel (bf16 out, bias column sums) against one product
// per pair and against the kernel followed by separate column sums, the af2_opm_outer_*
// cases the outer product mean's outer products as a strided batch against a product and a copy.
// --quick (default) shrinks the CPU shapes so the whole run stays well under a minute; CUDA
// always runs the real shapes.
#include <cstring>
#include <string>
#include <vector>

#include "bench/bench_util.h"
#include "core/random.h"
#include "kernels/cpu/gemm_cpu.h"
#include "kernels/gemm.h"
#include "kernels/reduce.h"
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

// ops::gemm_sum_nt at the training step's input-gradient shapes, in the step's form: dx [M, N] =
// Σ_i dy_i [M, K_i] · W_iᵀ, bf16 operands, written in bf16 (the lone consumer of a bf16 stream's
// LayerNorm), with the column sums of the biased projections' dy_i (their bias gradients) — plus,
// for the triangle attention, its [M, 4] pair-bias pair. Side by side in one run, on CUDA: the one
// kernel (`ms`); one cuBLASLt product per pair and one column sum per bias (`per_pair_ms`,
// `speedup_vs_per_pair`); and the one kernel without column sums followed by the column-sum kernels
// (`separate_sums_ms`, `speedup_vs_separate_sums`: whether making the sums inside the kernel beats
// reading the dy_i again). `gb_per_s`: the one kernel's bytes (a and b once, out written once) per
// second. On the CPU every form is the same per-pair work (the ratios are noise).
struct SumCase {
  const char* name;
  int64_t m, n, k, pairs;  // `pairs` pairs of K = k
  int64_t narrow_k;        // one more pair of this K (0: none)
  unsigned biased;         // bit i: pair i's column sums are taken
};

void run_sum_case(const SumCase& c, Device dev, int iters) {
  Generator gen(3);
  std::vector<Tensor> as, bs, sums;
  const int64_t total = c.pairs + (c.narrow_k > 0 ? 1 : 0);
  int64_t k_all = 0;
  for (int64_t i = 0; i < total; ++i) {
    const int64_t k = i < c.pairs ? c.k : c.narrow_k;
    k_all += k;
    as.push_back(randn({c.m, k}, gen, 0, 1, DType::bf16, dev));
    bs.push_back(randn({c.n, k}, gen, 0, 1, DType::bf16, dev));
    sums.push_back((c.biased >> i) & 1u ? Tensor::zeros({k}, DType::f32, dev) : Tensor());
  }
  Tensor out = Tensor::zeros({c.m, c.n}, DType::bf16, dev);
  auto time_form = [&](bool fused, bool inside) {
    ops::set_gemm_sum_fused(fused);
    return bench::time_ms(dev, [&] {
      if (inside) {
        ops::gemm_sum_nt(as, bs, out, 0.f, sums);
        return;
      }
      ops::gemm_sum_nt(as, bs, out, 0.f);
      for (size_t i = 0; i < sums.size(); ++i)
        if (sums[i].defined()) ops::sum_rows_accumulate(as[i], sums[i]);
    }, 1, iters);
  };
  const double per_pair = time_form(false, true), separate = time_form(true, false), ms = time_form(true, true);
  ops::set_gemm_sum_fused(true);
  const double flop = 2.0 * c.m * c.n * k_all;
  const double bytes = 2.0 * (c.m + c.n) * k_all + 2.0 * c.m * c.n;
  bench::JsonLine j;
  j.str("bench", "gemm").str("case", c.name).str("device", dev.str()).str("dtype", "bf16->bf16");
  j.integer("m", c.m).integer("n", c.n).integer("k", c.k).integer("pairs", c.pairs).integer("narrow_k", c.narrow_k);
  j.num("ms", ms).num("per_pair_ms", per_pair).num("speedup_vs_per_pair", per_pair / ms);
  j.num("separate_sums_ms", separate).num("speedup_vs_separate_sums", separate / ms);
  j.num("tflops", flop / (ms * 1e-3) * 1e-12).num("gb_per_s", bytes / (ms * 1e-3) * 1e-9);
  j.print();
}

// The outer product mean's outer products at the training step's shapes (S MSA rows, N residues,
// c = 32 channels, bf16): one [(i, c), (j, e)] product and its transposing copy to [i, j, c, e]
// (the form before 2026-12-01) against the strided batch over i that writes [i, (j, e), c]
// directly (autograd::outer_product_project's forward), side by side: `ms` (the batch),
// `product_and_copy_ms`, `speedup_vs_product_and_copy`, and the batch's output bytes per second.
// And the backward from the projection's output gradient dy [N, N, c_z = 128] to both operands'
// gradients: the form before 2026-12-02 (dx = dy·W_ecᵀ as [(i, j), (e, c)], its transposing copy to
// [(i, c), (j, e)], da and db) against the op's (per i W·dy_iᵀ as [(i, c), (e, j)], da and db with
// b and db turned to [S, E, J]): `backward_ms`, `backward_dx_and_copy_ms`,
// `backward_speedup_vs_dx_and_copy`.
struct OuterCase {
  const char* name;
  int64_t s, n, c;
};

void run_outer_case(const OuterCase& k, Device dev, int iters) {
  Generator gen(4);
  const Tensor a = randn({k.s, k.n, k.c}, gen, 0, 1, DType::bf16, dev), b = randn({k.s, k.n, k.c}, gen, 0, 1, DType::bf16, dev);
  Tensor prod = Tensor::empty({k.n * k.c, k.n * k.c}, DType::bf16, dev);
  Tensor moved = Tensor::empty({k.n, k.n, k.c, k.c}, DType::bf16, dev);
  Tensor rows = Tensor::empty({k.n, k.n * k.c, k.c}, DType::bf16, dev);
  const double copy_form = bench::time_ms(dev, [&] {
    ops::GemmArgs g;
    g.trans_a = true;
    ops::gemm(a.view({k.s, k.n * k.c}), b.view({k.s, k.n * k.c}), prod, g);
    moved.copy_(prod.view({k.n, k.c, k.n, k.c}).permute({0, 2, 1, 3}));
  }, 1, iters);
  const double ms = bench::time_ms(dev, [&] {
    ops::GemmArgs g;
    g.trans_a = true;
    ops::gemm(b.view({k.s, k.n * k.c}), a.permute({1, 0, 2}), rows, g);
  }, 1, iters);
  const int64_t z = 128, nc = k.n * k.c;
  const Tensor dy = randn({k.n, k.n, z}, gen, 0, 1, DType::bf16, dev);
  const Tensor w = randn({k.c * k.c, z}, gen, 0, 1, DType::bf16, dev);
  Tensor d_old = Tensor::empty({k.n * k.n, k.c * k.c}, DType::bf16, dev);
  Tensor d_moved = Tensor::empty({nc, nc}, DType::bf16, dev);
  Tensor d_new = Tensor::empty({k.n, k.c * k.c, k.n}, DType::bf16, dev);
  Tensor da = Tensor::empty({k.s, nc}, DType::bf16, dev), db = Tensor::empty({k.s, nc}, DType::bf16, dev);
  const double backward_copy_form = bench::time_ms(dev, [&] {
    ops::GemmArgs g;
    g.trans_b = true;
    ops::gemm(dy.view({k.n * k.n, z}), w, d_old, g);  // W's rows in (e, c) order: any [c·c, z] times the same
    d_moved.view({k.n, k.c, k.n, k.c}).copy_(d_old.view({k.n, k.n, k.c, k.c}).permute({0, 3, 1, 2}));
    ops::gemm(b.view({k.s, nc}), d_moved, da, g);
    ops::gemm(a.view({k.s, nc}), d_moved, db);
  }, 1, iters);
  const double backward_ms = bench::time_ms(dev, [&] {
    ops::GemmArgs g;
    g.trans_b = true;
    ops::gemm(w, dy, d_new, g);
    const Tensor d2 = d_new.view({nc, nc});
    ops::gemm(b.permute({0, 2, 1}).contiguous().view({k.s, nc}), d2, da, g);
    ops::gemm(a.view({k.s, nc}), d2, db);
    (void)db.view({k.s, k.c, k.n}).permute({0, 2, 1}).contiguous();
  }, 1, iters);
  const double flop = 2.0 * k.s * k.n * k.c * k.n * k.c, out_bytes = 2.0 * k.n * k.c * k.n * k.c;
  bench::JsonLine j;
  j.str("bench", "gemm").str("case", k.name).str("device", dev.str()).str("dtype", "bf16");
  j.integer("msa_rows", k.s).integer("n_res", k.n).integer("c", k.c).num("ms", ms);
  j.num("product_and_copy_ms", copy_form).num("speedup_vs_product_and_copy", copy_form / ms);
  j.num("backward_ms", backward_ms).num("backward_dx_and_copy_ms", backward_copy_form);
  j.num("backward_speedup_vs_dx_and_copy", backward_copy_form / backward_ms);
  j.num("tflops", flop / (ms * 1e-3) * 1e-12).num("output_gb_per_s", out_bytes / (ms * 1e-3) * 1e-9);
  j.print();
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
    // The input gradients of the crop-256 step's projection runs: the triangle multiplication's
    // five (all biased), the triangle attention's q, k, v, gate (biased) and pair bias ([c_z, 4]),
    // the MSA attention's four (the gate biased), the outer product mean's two (both biased).
    const SumCase sums_full[] = {
        {"af2_dx_trimul_5", 256 * 256, 128, 128, 5, 0, 0x1fu},
        {"af2_dx_triangle_attention_5", 256 * 256, 128, 128, 4, 4, 0x8u},
        {"af2_dx_msa_attention_4", 128 * 256, 256, 256, 4, 0, 0x8u},
        {"af2_dx_outer_product_mean_2", 128 * 256, 256, 32, 2, 0, 0x3u},
    };
    const SumCase sums_quick[] = {{"af2_dx_trimul_5", 64 * 64, 128, 128, 5, 0, 0x1fu}};
    if (big) {
      for (const auto& c : sums_full) run_sum_case(c, dev, iters);
    } else {
      for (const auto& c : sums_quick) run_sum_case(c, dev, iters);
    }
    // The outer products of the Evoformer's (128 rows) and the extra-MSA stack's (1,024) outer
    // product means at crop 256.
    const OuterCase outer_full[] = {{"af2_opm_outer_evoformer", 128, 256, 32}, {"af2_opm_outer_extra_msa", 1024, 256, 32}};
    const OuterCase outer_quick[] = {{"af2_opm_outer_evoformer", 32, 64, 32}};
    if (big) {
      for (const auto& c : outer_full) run_outer_case(c, dev, iters);
    } else {
      for (const auto& c : outer_quick) run_outer_case(c, dev, iters);
    }
  } catch (const Error& e) {
    std::fprintf(stderr, "bench_gemm: %s\n", e.what());
    return 1;
  }
  return 0;
}
