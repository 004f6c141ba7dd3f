// LayerNorm benchmarks at AlphaFold / BERT shapes: forward and backward GB/s (bytes that must
// move: x read + y written; dy, x read + dx written), with the ratio to a same-size device copy
// measured in the same run (the bandwidth roofline). Then the post-LN residual block at BERT
// shapes, fused (bias_dropout_residual_layernorm_*) vs unfused (bias_dropout_residual_* then
// layernorm_*) with dropout p = 0.1, timed side by side. On CUDA each backward line also times the
// backward's two-pass form (two_pass_ms, speedup_vs_two_pass: ops::set_layernorm_backward_one_pass).
// One JSON line per case.
//   bench_layernorm [--device cpu|cuda] [--quick|--full]
#include <cstring>
#include <functional>
#include <string>

#include "bench/bench_util.h"
#include "core/random.h"
#include "kernels/layernorm.h"

namespace foldcore {
namespace {

// The milliseconds of `backward` with the LayerNorm backward's one-pass form on or off
// (ops::set_layernorm_backward_one_pass), the choice restored afterwards.
double backward_form_ms(Device dev, bool one_pass, int iters, const std::function<void()>& backward) {
  const bool was = ops::layernorm_backward_one_pass();
  ops::set_layernorm_backward_one_pass(one_pass);
  const double ms = bench::time_ms(dev, backward, 1, iters);
  ops::set_layernorm_backward_one_pass(was);
  return ms;
}

struct Case {
  const char* name;
  int64_t rows, c;
};

void run_case(const Case& k, DType dt, Device dev, int iters) {
  Generator gen(3);
  bench::reset_peak(dev);
  Tensor x = randn({k.rows, k.c}, gen, 0, 1, dt, dev), dy = randn({k.rows, k.c}, gen, 0, 1, dt, dev);
  Tensor gamma = randn({k.c}, gen, 1, 0.1f, DType::f32, dev), beta = randn({k.c}, gen, 0, 0.1f, DType::f32, dev);
  Tensor y = Tensor::empty(x.shape(), dt, dev), dx = Tensor::empty(x.shape(), dt, dev);
  Tensor mean = Tensor::empty({k.rows}, DType::f32, dev), rstd = Tensor::empty({k.rows}, DType::f32, dev);
  Tensor dgamma = Tensor::zeros({k.c}, DType::f32, dev), dbeta = Tensor::zeros({k.c}, DType::f32, dev);
  const double tensor_bytes = static_cast<double>(x.nbytes());
  const double copy_ms = bench::time_ms(dev, [&] { y.copy_(x); }, 1, iters);
  const double copy_gbs = 2 * tensor_bytes / (copy_ms * 1e6);
  const double fwd_ms =
      bench::time_ms(dev, [&] { ops::layernorm_forward(x, gamma, beta, 1e-5f, y, mean, rstd); }, 1, iters);
  const auto backward = [&] { ops::layernorm_backward(dy, x, gamma, mean, rstd, dx, dgamma, dbeta); };
  const double bwd_ms = backward_form_ms(dev, true, iters, backward);
  const double two_pass_ms = backward_form_ms(dev, false, iters, backward);
  const size_t peak = bench::peak_bytes(dev);
  for (int pass = 0; pass < 2; ++pass) {
    const double ms = pass == 0 ? fwd_ms : bwd_ms;
    const double gbs = (pass == 0 ? 2 : 3) * tensor_bytes / (ms * 1e6);
    bench::JsonLine line;
    line.str("bench", "layernorm")
        .str("case", std::string(k.name) + (pass == 0 ? "_fwd" : "_bwd"))
        .str("device", dev.str())
        .str("dtype", std::string(dtype_name(dt)))
        .integer("rows", k.rows)
        .integer("c", k.c)
        .num("ms", ms)
        .num("gbs", gbs)
        .num("copy_gbs", copy_gbs)
        .num("ratio_to_copy", gbs / copy_gbs)
        .integer("peak_bytes", static_cast<long long>(peak));
    // The backward's two forms (ops::set_layernorm_backward_one_pass; the CPU has one).
    if (pass == 1 && dev.is_cuda()) line.num("two_pass_ms", two_pass_ms).num("speedup_vs_two_pass", two_pass_ms / ms);
    line.print();
  }
}

// Fused vs unfused LN(residual + dropout(x + bias)), training forward (h stored) and backward.
void run_fused_case(const Case& k, DType dt, Device dev, int iters) {
  Generator gen(4);
  const Shape s{k.rows, k.c};
  Tensor x = randn(s, gen, 0, 1, dt, dev), res = randn(s, gen, 0, 1, dt, dev), dy = randn(s, gen, 0, 1, dt, dev);
  Tensor bias = randn({k.c}, gen, 0, 0.1f, dt, dev);
  Tensor gamma = randn({k.c}, gen, 1, 0.1f, DType::f32, dev), beta = randn({k.c}, gen, 0, 0.1f, DType::f32, dev);
  Tensor h = Tensor::empty(s, dt, dev), y = Tensor::empty(s, dt, dev);
  Tensor dh = Tensor::empty(s, dt, dev), dx = Tensor::empty(s, dt, dev);
  Tensor mean = Tensor::empty({k.rows}, DType::f32, dev), rstd = Tensor::empty({k.rows}, DType::f32, dev);
  Tensor dgamma = Tensor::zeros({k.c}, DType::f32, dev), dbeta = Tensor::zeros({k.c}, DType::f32, dev);
  Tensor dbias = Tensor::zeros({k.c}, DType::f32, dev);
  ops::DropoutArgs d;
  d.p = 0.1f;
  d.seed = 11;
  const double unfused_fwd = bench::time_ms(dev, [&] {
    ops::bias_dropout_residual_forward(x, bias, res, d, h);
    ops::layernorm_forward(h, gamma, beta, 1e-12f, y, mean, rstd);
  }, 1, iters);
  const double fused_fwd = bench::time_ms(dev, [&] {
    ops::bias_dropout_residual_layernorm_forward(x, bias, res, d, gamma, beta, 1e-12f, h, y, mean, rstd);
  }, 1, iters);
  const double unfused_bwd = bench::time_ms(dev, [&] {
    ops::layernorm_backward(dy, h, gamma, mean, rstd, dh, dgamma, dbeta);
    ops::bias_dropout_residual_backward(dh, d, dx, dbias);
  }, 1, iters);
  const auto fused_backward = [&] {
    ops::bias_dropout_residual_layernorm_backward(dy, h, gamma, mean, rstd, d, dx, dbias, dh, dgamma, dbeta);
  };
  const double fused_bwd = backward_form_ms(dev, true, iters, fused_backward);
  const double fused_bwd_two_pass = backward_form_ms(dev, false, iters, fused_backward);
  for (int pass = 0; pass < 2; ++pass) {
    const double fused_ms = pass == 0 ? fused_fwd : fused_bwd, unfused_ms = pass == 0 ? unfused_fwd : unfused_bwd;
    bench::JsonLine line;
    line.str("bench", "layernorm")
        .str("case", std::string(k.name) + (pass == 0 ? "_bias_dropout_residual_ln_fwd" : "_bias_dropout_residual_ln_bwd"))
        .str("device", dev.str())
        .str("dtype", std::string(dtype_name(dt)))
        .integer("rows", k.rows)
        .integer("c", k.c)
        .num("fused_ms", fused_ms)
        .num("unfused_ms", unfused_ms)
        .num("speedup", unfused_ms / fused_ms);
    if (pass == 1 && dev.is_cuda())
      line.num("two_pass_ms", fused_bwd_two_pass).num("speedup_vs_two_pass", fused_bwd_two_pass / fused_ms);
    line.print();
  }
}

}  // namespace
}  // namespace foldcore

int main(int argc, char** argv) {
  using namespace foldcore;
  try {
    const bench::BenchArgs args = bench::parse_bench_args(argc, argv, "bench_layernorm");
    const Device dev = args.device;
    const bool full = args.full;
    const bool big = full || dev.is_cuda();
    // AlphaFold pair [N_res², c_z=128] and MSA [N_seq·N_res, c_m=256] (N_res 256, N_seq 512);
    // BERT-Large [B·512, 1024] with B = 8. --quick shrinks the row counts for the CPU.
    const Case cases[] = {
        {"af2_pair", big ? 256 * 256 : 64 * 64, 128},
        {"af2_msa", big ? 512 * 256 : 64 * 256, 256},
        {"bert", big ? 8 * 512 : 2 * 512, 1024},
    };
    const int iters = dev.is_cuda() ? 20 : 5;
    for (DType dt : {DType::f32, DType::bf16})
      for (const auto& k : cases) run_case(k, dt, dev, iters);
    for (DType dt : {DType::f32, DType::bf16}) run_fused_case(cases[2], dt, dev, iters);
  } catch (const Error& e) {
    std::fprintf(stderr, "bench_layernorm: %s\n", e.what());
    return 1;
  }
  return 0;
}
