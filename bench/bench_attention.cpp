// Fused attention benchmark: forward and forward+backward at the AlphaFold MSA-row shape (pair
// bias + mask bias + gate, D = 32) and the BERT shape (padding mask, D = 64).
//   bench_attention [--device cpu|cuda] [--full]
// Default: small shapes on the CPU; --full: AF2 N_res 256 (B = 256 rows, H = 8, L = 256) and BERT
// (B = 8, H = 16, L = 512). FLOPs: 4·B·H·Lq·Lk·D forward, 2.5× that for the backward.
// TODO(attention): the naive materialising baseline (s = q·kᵀ batched GEMM, softmax, p·v) needs
// ops::gemm/ops::softmax_forward from the dense branch; it is not measured yet.
#include <cmath>
#include <cstring>
#include <string>

#include "bench/bench_util.h"
#include "core/device.h"
#include "core/random.h"
#include "core/tensor.h"
#include "kernels/attention.h"

using namespace foldcore;

namespace {

struct Shape5 {
  const char* name;
  int64_t B, H, L, D;
  bool alphafold;  // pair bias + mask + gate; else padding mask only
};

void run_case(const Shape5& s, Device dev, DType dt) {
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
  auto report = [&](const char* pass, double ms, double flops) {
    bench::JsonLine()
        .str("bench", "attention")
        .str("case", std::string(s.name) + "_" + pass)
        .str("device", dev.str())
        .str("dtype", std::string(dtype_name(dt)))
        .integer("B", s.B)
        .integer("H", s.H)
        .integer("L", s.L)
        .integer("D", s.D)
        .num("ms", ms)
        .num("tflops", flops / (ms * 1e-3) / 1e12)
        .integer("peak_bytes", static_cast<long long>(bench::peak_bytes(dev)))
        .print();
  };
  const int iters = dev.is_cuda() ? 20 : 3;
  bench::reset_peak(dev);
  report("fwd", bench::time_ms(dev, [&] { ops::attention_forward(in, o, lse, a); }, 2, iters), flops_fwd);
  bench::reset_peak(dev);
  report("fwd_bwd",
         bench::time_ms(dev, [&] {
           ops::attention_forward(in, o, lse, a);
           ops::attention_backward(in, s.alphafold ? a : o, lse, d_o, g);
         }, 2, iters),
         3.5 * flops_fwd);
}

}  // namespace

int main(int argc, char** argv) {
  Device dev = Device::cpu();
  bool full = false;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--device") && i + 1 < argc) dev = Device::parse(argv[++i]);
    else if (!std::strcmp(argv[i], "--full")) full = true;
    else {
      std::fprintf(stderr, "usage: %s [--device cpu|cuda] [--full]\n", argv[0]);
      return 2;
    }
  }
  try {
    const DType dt = dev.is_cuda() ? DType::bf16 : DType::f32;
    if (full) {
      run_case({"af2_msa_row", 256, 8, 256, 32, true}, dev, dt);
      run_case({"bert_large", 8, 16, 512, 64, false}, dev, dt);
    } else {
      run_case({"af2_msa_row_small", 8, 8, 64, 32, true}, dev, dt);
      run_case({"bert_small", 1, 16, 128, 64, false}, dev, dt);
    }
  } catch (const Error& e) {
    std::fprintf(stderr, "bench_attention: %s\n", e.what());
    return 1;
  }
  return 0;
}
