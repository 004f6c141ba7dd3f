// Fused attention benchmark: forward and forward+backward at the AlphaFold MSA-row shape (pair
// bias + mask bias + gate, D = 32) and the BERT shape (padding mask, D = 64).
//   bench_attention [--device cpu|cuda] [--full] [--forward] [--triangle N] [--dtype fp32|bf16]
// --triangle N: only the shape of one chunk of a long prediction's triangle attention (B = 16 rows,
// H = 4, L = N, D = 32, pair bias + mask + gate); --dtype: the operands' dtype (default bf16 on a
// GPU, fp32 on the CPU).
// Default: small shapes on the CPU; --full: AF2 N_res 256 (B = 256 rows, H = 8, L = 256) and BERT
// (B = 8, H = 16, L = 512), and the triangle attention's shape at crop 256 in the row-wise and the
// column-wise modules' layouts side by side ("af2_triangle_layout": run_layout_case). FLOPs: 4·B·H·Lq·Lk·D forward, 2.5× that for the backward.
// Each case also runs a naive baseline in the same process, the way an eager framework computes
// attention (PyTorch eager: matmul + softmax + matmul): s = scale·q·kᵀ materialised by a batched
// GEMM, biases added, softmax, a = p·v, gate; its backward materialises dp and ds. --forward:
// forward cases only. The
// "speedup" and "memory_ratio" fields are naive ÷ fused for time and peak memory. bf16 on a GPU
// times both CUDA kernel families of the fused op ("kernel": mma, the register-tiled default, and
// smem, the shared-memory WMMA kernels); the mma line's "speedup_vs_smem" is smem ms ÷ mma ms.
// The AlphaFold case also times forward + backward without the bias gradients
// ("fwd_bwd_no_dbias", "dbias_share": the part of fwd_bwd the bias gradients take), without dq
// ("fwd_bwd_no_dq", "dq_share") and without both ("fwd_bwd_no_dq_no_dbias"), and on a GPU
// the mma kernels with the batch-reduced bias-gradient pass ("fwd_bwd_dbias_pass",
// "speedup_vs_atomic"), and the mma forward without its pipelined form ("sync_ms",
// "speedup_vs_sync": ops::set_attention_pipeline; the backward is the same in both), and the mma
// backward in its per-score form ("scores_ms", "speedup_vs_scores": ops::set_attention_bwd_row_form),
// and the backward composed of cuBLASLt products against the fused one ("composed_ms", "fused_ms",
// "speedup_composed_vs_fused", "composed_peak_bytes": ops::set_attention_bwd_composed). With
// FOLDCORE_PROFILE=1 each fused case is followed by one
// "attention_profile" line per phase of the CUDA op (attention_fwd; attention_bwd and its
// pre / main / dbias_pass / dq_convert), each timed between device waits: where the backward's
// time goes (the waits add a little to every line's "ms", so profile in a separate run).
#include <algorithm>
#include <cmath>
#include <functional>
#include <cstring>
#include <string>
#include <vector>

#include "bench/bench_util.h"
#include "core/device.h"
#include "core/random.h"
#include "core/tensor.h"
#include "kernels/attention.h"
#include "kernels/elementwise.h"
#include "kernels/gemm.h"
#include "kernels/reduce.h"
#include "kernels/softmax.h"

using namespace foldcore;

namespace {

struct Shape5 {
  const char* name;
  int64_t B, H, L, D;
  bool alphafold;  // pair bias + mask + gate; else padding mask only
};

// The materialising baseline. Buffers are allocated inside each call, as an eager framework does.
struct Naive {
  const Shape5& s;
  const ops::AttentionInputs& in;
  Tensor p, a;  // saved for the backward

  Tensor forward() {
    const int64_t BH = s.B * s.H;
    Tensor sc = Tensor::empty({s.B, s.H, s.L, s.L}, in.q.dtype(), in.q.device());
    ops::GemmArgs ga;
    ga.trans_b = true;
    ga.alpha = in.scale;
    ops::gemm(in.q.view({BH, s.L, s.D}), in.k.view({BH, s.L, s.D}), sc.view({BH, s.L, s.L}), ga);
    for (const Tensor& b : in.biases) ops::add(sc, b.expand(sc.shape()), sc);
    p = Tensor::empty(sc.shape(), sc.dtype(), sc.device());
    ops::softmax_forward(sc, p);
    sc = Tensor();
    a = Tensor::empty(in.q.shape(), in.q.dtype(), in.q.device());
    ops::gemm(p.view({BH, s.L, s.L}), in.v.view({BH, s.L, s.D}), a.view({BH, s.L, s.D}));
    if (!in.gate.defined()) return a;
    Tensor o = Tensor::empty(a.shape(), a.dtype(), a.device());
    ops::sigmoid_gate_forward(in.gate, a, o);
    return o;
  }

  void backward(const Tensor& d_o, const ops::AttentionGrads& g) {
    const int64_t BH = s.B * s.H;
    const Device dev = d_o.device();
    const DType dt = d_o.dtype();
    Tensor dA = d_o;
    if (in.gate.defined()) {
      dA = Tensor::empty(d_o.shape(), dt, dev);
      ops::sigmoid_gate_backward(in.gate, a, d_o, g.dgate, dA);
    }
    Tensor dp = Tensor::empty(p.shape(), dt, dev);
    ops::GemmArgs nt;
    nt.trans_b = true;
    ops::gemm(dA.view({BH, s.L, s.D}), in.v.view({BH, s.L, s.D}), dp.view({BH, s.L, s.L}), nt);
    Tensor ds = Tensor::empty(p.shape(), dt, dev);
    ops::softmax_backward(p, dp, ds);
    dp = Tensor();
    ops::GemmArgs nn;
    nn.alpha = in.scale;
    ops::gemm(ds.view({BH, s.L, s.L}), in.k.view({BH, s.L, s.D}), g.dq.view({BH, s.L, s.D}), nn);
    ops::GemmArgs tn;
    tn.trans_a = true;
    tn.alpha = in.scale;
    ops::gemm(ds.view({BH, s.L, s.L}), in.q.view({BH, s.L, s.D}), g.dk.view({BH, s.L, s.D}), tn);
    ops::GemmArgs tv;
    tv.trans_a = true;
    ops::gemm(p.view({BH, s.L, s.L}), dA.view({BH, s.L, s.D}), g.dv.view({BH, s.L, s.D}), tv);
    // The trainable pair bias [1, H, L, L] gets Σ_b ds; the mask bias gets no gradient.
    if (s.alphafold) ops::sum(ds, {0}, g.dbias[0].view({s.H, s.L, s.L}), /*accumulate=*/true);
  }
};

void run_case(const Shape5& s, Device dev, DType dt, bool forward_only) {
  Generator gen(1);
  ops::AttentionInputs in;
  in.q = randn({s.B, s.H, s.L, s.D}, gen, 0, 1, dt, dev);
  in.k = randn({s.B, s.H, s.L, s.D}, gen, 0, 1, dt, dev);
  in.v = randn({s.B, s.H, s.L, s.D}, gen, 0, 1, dt, dev);
  if (s.alphafold) {
    in.gate = randn({s.B, s.H, s.L, s.D}, gen, 0, 1, dt, dev);
    in.biases.push_back(randn({1, s.H, s.L, s.L}, gen, 0, 1, dt, dev));
  }
  in.biases.push_back(Tensor::zeros({s.B, 1, 1, s.L}, dt, dev));  // mask bias (nothing masked)
  in.scale = 1.f / std::sqrt(static_cast<float>(s.D));
  Tensor o = Tensor::empty(in.q.shape(), dt, dev), a = Tensor::empty(in.q.shape(), dt, dev);
  Tensor lse = Tensor::empty({s.B, s.H, s.L}, DType::f32, dev), d_o = randn(in.q.shape(), gen, 0, 1, dt, dev);
  ops::AttentionGrads g;
  g.dq = Tensor::empty(in.q.shape(), dt, dev);
  g.dk = Tensor::empty(in.k.shape(), dt, dev);
  g.dv = Tensor::empty(in.v.shape(), dt, dev);
  if (s.alphafold) g.dgate = Tensor::empty(in.q.shape(), dt, dev);
  for (const Tensor& b : in.biases) g.dbias.push_back(Tensor::zeros(b.shape(), DType::f32, dev));

  const double flops_fwd = 4.0 * s.B * s.H * s.L * s.L * s.D;
  // The fused op's CUDA kernel families (ops::AttentionKernel): bf16 on a GPU measures both, the
  // register-tiled mma.sync kernels first, side by side in this run; elsewhere only the one that runs.
  std::vector<ops::AttentionKernel> kernels{ops::attention_kernel()};
  if (dev.is_cuda() && dt == DType::bf16) kernels = {ops::AttentionKernel::mma, ops::AttentionKernel::smem};
  const ops::AttentionKernel saved = ops::attention_kernel();
  // The fields every line starts with.
  auto line_for = [&](const std::string& pass, const char* kernel) {
    bench::JsonLine line;
    line.str("bench", "attention")
        .str("case", std::string(s.name) + "_" + pass)
        .str("device", dev.str())
        .str("dtype", std::string(dtype_name(dt)))
        .str("kernel", dev.is_cuda() ? kernel : "cpu");
    return line;
  };
  auto report = [&](const std::string& pass, ops::AttentionKernel kernel, double ms, double flops, double naive_ms,
                    size_t peak, size_t naive_peak, double other_ms, double sync_ms, double scores_ms,
                    double composed_ms = 0, double fused_ms = 0, size_t composed_peak = 0) {
    bench::JsonLine line = line_for(pass, ops::attention_kernel_name(kernel));
    line.integer("B", s.B)
        .integer("H", s.H)
        .integer("L", s.L)
        .integer("D", s.D)
        .num("ms", ms)
        .num("tflops", flops / (ms * 1e-3) / 1e12)
        .integer("peak_bytes", static_cast<long long>(peak))
        .num("naive_ms", naive_ms)
        .integer("naive_peak_bytes", static_cast<long long>(naive_peak))
        .num("speedup", naive_ms / ms)
        .num("memory_ratio", static_cast<double>(naive_peak) / static_cast<double>(std::max<size_t>(peak, 1)));
    if (other_ms > 0) line.num("speedup_vs_smem", other_ms / ms);  // the mma line: smem ms ÷ mma ms
    if (sync_ms > 0) line.num("sync_ms", sync_ms).num("speedup_vs_sync", sync_ms / ms);  // pipelined vs not
    if (scores_ms > 0) line.num("scores_ms", scores_ms).num("speedup_vs_scores", scores_ms / ms);  // backward by row vs per score
    if (composed_ms > 0) {  // the backward composed of cuBLASLt products vs the fused one
      line.num("composed_ms", composed_ms).num("fused_ms", fused_ms).num("speedup_composed_vs_fused", fused_ms / composed_ms);
      line.integer("composed_peak_bytes", static_cast<long long>(composed_peak));
    }
    line.print();
  };
  const int iters = dev.is_cuda() ? 20 : 3;
  Naive naive{s, in, {}, {}};
  auto measure = [&](const std::function<void()>& fn, double* ms, size_t* peak) {
    bench::reset_peak(dev);
    *ms = bench::time_ms(dev, fn, 2, iters);
    *peak = bench::peak_bytes(dev);
  };
  auto run_passes = [&](bool with_backward) -> std::vector<double> {
    double nms;
    size_t npeak;
    if (!with_backward) {
      measure([&] { naive.forward(); naive.p = Tensor(); naive.a = Tensor(); }, &nms, &npeak);
    } else {
      measure([&] {
        naive.forward();
        naive.backward(d_o, g);
        naive.p = Tensor();
        naive.a = Tensor();
      }, &nms, &npeak);
    }
    std::vector<double> ms(kernels.size());
    std::vector<size_t> peak(kernels.size());
    for (size_t kix = 0; kix < kernels.size(); ++kix) {
      ops::set_attention_kernel(kernels[kix]);
      profile::reset();
      measure([&] {
        ops::attention_forward(in, o, lse, a);
        if (with_backward) ops::attention_backward(in, s.alphafold ? a : o, lse, d_o, g);
      }, &ms[kix], &peak[kix]);
      // FOLDCORE_PROFILE=1 (CUDA): the fused op's forward and backward phases, over the warm-up and
      // timed calls (seconds ÷ count per call).
      bench::print_profile("attention_profile",
                           std::string(s.name) + "_" + (with_backward ? "fwd_bwd" : "fwd") + "_" +
                               ops::attention_kernel_name(kernels[kix]),
                           s.L);
    }
    // The mma kernels with one of their forms switched off (set(false); the choice restored after):
    // the fused op timed as above.
    const auto mma_ms_with = [&](void (*set)(bool), bool (*get)(), bool value = false, size_t* peak_out = nullptr) {
      const bool saved_choice = get();
      ops::set_attention_kernel(ops::AttentionKernel::mma);
      set(value);
      double t;
      size_t t_peak;
      measure([&] {
        ops::attention_forward(in, o, lse, a);
        if (with_backward) ops::attention_backward(in, s.alphafold ? a : o, lse, d_o, g);
      }, &t, &t_peak);
      set(saved_choice);
      if (peak_out) *peak_out = t_peak;
      return t;
    };
    const bool mma_run = dev.is_cuda() && dt == DType::bf16;
    // The forward without its pipelined form (ops::set_attention_pipeline): "sync_ms" and
    // "speedup_vs_sync" on the mma line.
    const double sync_ms = mma_run ? mma_ms_with(&ops::set_attention_pipeline, &ops::attention_pipeline) : 0;
    // The backward's per-score form (ops::set_attention_bwd_row_form(false)) against its row form:
    // "scores_ms" and "speedup_vs_scores" on the mma fwd_bwd line (the same forward in both; at
    // head dim 64 both run the per-score form).
    const double scores_ms = mma_run && with_backward ? mma_ms_with(&ops::set_attention_bwd_row_form, &ops::attention_bwd_row_form) : 0;
    // The backward composed of cuBLASLt products (ops::set_attention_bwd_composed) and the fused
    // one, each timed with the same forward: "composed_ms", "fused_ms",
    // "speedup_composed_vs_fused" (fused ÷ composed) and "composed_peak_bytes" on the mma fwd_bwd line.
    size_t composed_peak = 0;
    const double composed_ms = mma_run && with_backward
        ? mma_ms_with(&ops::set_attention_bwd_composed, &ops::attention_bwd_composed, true, &composed_peak) : 0;
    const double fused_ms = mma_run && with_backward
        ? mma_ms_with(&ops::set_attention_bwd_composed, &ops::attention_bwd_composed, false) : 0;
    ops::set_attention_kernel(saved);
    for (size_t kix = 0; kix < kernels.size(); ++kix)
      report(with_backward ? "fwd_bwd" : "fwd", kernels[kix], ms[kix], (with_backward ? 3.5 : 1.0) * flops_fwd, nms,
             peak[kix], npeak, kix == 0 && kernels.size() > 1 ? ms[1] : 0,
             kernels[kix] == ops::AttentionKernel::mma ? sync_ms : 0,
             kernels[kix] == ops::AttentionKernel::mma ? scores_ms : 0,
             kernels[kix] == ops::AttentionKernel::mma ? composed_ms : 0, fused_ms, composed_peak);
    return ms;
  };
  run_passes(false);
  if (forward_only) return;
  const std::vector<double> with_dbias = run_passes(true);
  if (!s.alphafold) return;
  // Diagnostics: the same forward + backward without the bias gradients, without dq, and without
  // both. The pair bias [1, H, L, L] is shared by the B batch rows, so its gradient is summed over
  // B with atomicAdd by B CTAs per element; dq takes the backward's second product per query tile
  // (dS·K), a barrier and an fp32 atomicAdd per element per key block, plus the scratch's zeroing
  // and conversion. "<x>_share" is the part of the fwd_bwd time that leaving <x> out saves: where
  // the backward's main kernel spends its time, without hardware counters.
  struct Ablation {
    const char* name;
    const char* share;
    bool dq, dbias;
  };
  for (const Ablation& ab : {Ablation{"fwd_bwd_no_dbias", "dbias_share", true, false},
                             Ablation{"fwd_bwd_no_dq", "dq_share", false, true},
                             Ablation{"fwd_bwd_no_dq_no_dbias", "dq_dbias_share", false, false}}) {
    ops::AttentionGrads fewer = g;
    if (!ab.dq) fewer.dq = Tensor();
    if (!ab.dbias) fewer.dbias.clear();
    for (size_t kix = 0; kix < kernels.size(); ++kix) {
      ops::set_attention_kernel(kernels[kix]);
      double ms;
      size_t peak;
      measure([&] {
        ops::attention_forward(in, o, lse, a);
        ops::attention_backward(in, a, lse, d_o, fewer);
      }, &ms, &peak);
      line_for(ab.name, ops::attention_kernel_name(kernels[kix]))
          .num("ms", ms)
          .num(ab.share, 1.0 - ms / with_dbias[kix])
          .print();
    }
  }
  ops::set_attention_kernel(saved);
  if (!dev.is_cuda() || dt != DType::bf16) return;
  // The mma kernels with the batch-reduced bias-gradient pass instead of the atomics
  // (ops::set_attention_dbias_pass): "speedup_vs_atomic" is the atomic fwd_bwd ms ÷ this one.
  const bool saved_pass = ops::attention_dbias_pass();
  ops::set_attention_kernel(ops::AttentionKernel::mma);
  ops::set_attention_dbias_pass(true);
  double ms;
  size_t peak;
  measure([&] {
    ops::attention_forward(in, o, lse, a);
    ops::attention_backward(in, a, lse, d_o, g);
  }, &ms, &peak);
  ops::set_attention_dbias_pass(saved_pass);
  ops::set_attention_kernel(saved);
  line_for("fwd_bwd_dbias_pass", "mma")
      .num("ms", ms)
      .num("tflops", 3.5 * flops_fwd / (ms * 1e-3) / 1e12)
      .num("speedup_vs_atomic", with_dbias[0] / ms)
      .print();
}

// The same op on the two layouts AlphaFold's attentions hand it (the triangle attention's shape
// at crop 256: B = 256 rows, H = 4, L = 256, D = 32, pair bias, key mask, gate): the row-wise
// modules' projection layout [B, L, H, D] and the column-wise ones' [L, B, H, D]
// (autograd::attention seq_major: sequence rows B·H·D elements apart), inputs, outputs and
// gradients alike. "columns_vs_rows" = rows ms ÷ columns ms (below 1: the column layout is slower).
void run_layout_case(Device dev, DType dt, bool forward_only, int64_t B, int64_t L) {
  const int64_t H = 4, D = 32;
  Generator gen(2);
  auto make = [&](bool columns) {
    struct Set {
      ops::AttentionInputs in;
      Tensor o, a, lse, d_o;
      ops::AttentionGrads g;
    } t;
    auto act = [&] {  // [B, H, L, D] views of a projection's memory
      return columns ? randn({L, B, H, D}, gen, 0, 1, dt, dev).permute({1, 2, 0, 3})
                     : randn({B, L, H, D}, gen, 0, 1, dt, dev).permute({0, 2, 1, 3});
    };
    auto empty = [&] {
      return columns ? Tensor::empty({L, B, H, D}, dt, dev).permute({1, 2, 0, 3})
                     : Tensor::empty({B, L, H, D}, dt, dev).permute({0, 2, 1, 3});
    };
    t.in.q = act();
    t.in.k = act();
    t.in.v = act();
    t.in.gate = act();
    t.in.biases = {randn({1, H, L, L}, gen, 0, 1, dt, dev), Tensor::zeros({B, 1, 1, L}, dt, dev)};
    t.in.scale = 1.f / std::sqrt(static_cast<float>(D));
    t.o = empty();
    t.a = empty();
    t.d_o = act();
    t.lse = Tensor::empty({B, H, L}, DType::f32, dev);
    t.g.dq = empty();
    t.g.dk = empty();
    t.g.dv = empty();
    t.g.dgate = empty();
    t.g.dbias = {Tensor::zeros({1, H, L, L}, DType::f32, dev), Tensor()};
    return t;
  };
  const int iters = dev.is_cuda() ? 20 : 3;
  for (bool with_backward : {false, true}) {
    if (with_backward && forward_only) break;
    double ms[2];
    for (int columns = 0; columns < 2; ++columns) {
      auto t = make(columns != 0);
      ms[columns] = bench::time_ms(dev, [&] {
        ops::attention_forward(t.in, t.o, t.lse, t.a);
        if (with_backward) ops::attention_backward(t.in, t.a, t.lse, t.d_o, t.g);
      }, 2, iters);
    }
    bench::JsonLine()
        .str("bench", "attention")
        .str("case", std::string("af2_triangle_layout_") + (with_backward ? "fwd_bwd" : "fwd"))
        .str("device", dev.str())
        .str("dtype", std::string(dtype_name(dt)))
        .str("kernel", dev.is_cuda() ? ops::attention_kernel_name(ops::attention_kernel()) : "cpu")
        .integer("B", B)
        .integer("H", H)
        .integer("L", L)
        .integer("D", D)
        .num("rows_ms", ms[0])
        .num("columns_ms", ms[1])
        .num("columns_vs_rows", ms[0] / ms[1])
        .print();
  }
}

}  // namespace

int main(int argc, char** argv) {
  Device dev = Device::cpu();
  bool full = false, forward_only = false;
  int64_t triangle = 0;
  const char* dtype = nullptr;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--device") && i + 1 < argc) dev = Device::parse(argv[++i]);
    else if (!std::strcmp(argv[i], "--full")) full = true;
    else if (!std::strcmp(argv[i], "--forward")) forward_only = true;
    else if (!std::strcmp(argv[i], "--triangle") && i + 1 < argc) triangle = std::atoll(argv[++i]);
    else if (!std::strcmp(argv[i], "--dtype") && i + 1 < argc &&
             (!std::strcmp(argv[i + 1], "fp32") || !std::strcmp(argv[i + 1], "bf16")))
      dtype = argv[++i];
    else {
      std::fprintf(stderr, "usage: %s [--device cpu|cuda] [--full] [--forward] [--triangle N] [--dtype fp32|bf16]\n",
                   argv[0]);
      return 2;
    }
  }
  try {
    const DType dt = dtype ? (std::strcmp(dtype, "bf16") == 0 ? DType::bf16 : DType::f32)  // checked above
                           : dev.is_cuda()                ? DType::bf16
                                                          : DType::f32;
    if (triangle > 0) {
      // One chunk of a long prediction's triangle attention (16 rows, 4 heads of 32, N keys).
      run_case({"af2_triangle_chunk", 16, 4, triangle, 32, true}, dev, dt, forward_only);
    } else if (full) {
      run_case({"af2_msa_row", 256, 8, 256, 32, true}, dev, dt, forward_only);
      run_case({"bert_large", 8, 16, 512, 64, false}, dev, dt, forward_only);
      run_layout_case(dev, dt, forward_only, 256, 256);
    } else {
      run_case({"af2_msa_row_small", 8, 8, 64, 32, true}, dev, dt, forward_only);
      run_case({"bert_small", 1, 16, 128, 64, false}, dev, dt, forward_only);
      run_layout_case(dev, dt, forward_only, 8, 64);
    }
  } catch (const Error& e) {
    std::fprintf(stderr, "bench_attention: %s\n", e.what());
    return 1;
  }
  return 0;
}
