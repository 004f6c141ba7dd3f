// Evoformer block benchmark: one AlphaFold2 Evoformer block (model_1_ptm widths: c_m 256, c_z 128;
// Alg. 6) forward in inference mode (no grad, eval), N_seq 128 and N_res 64 / 128 / 256.
//   bench_evoformer [--device cpu|cuda] [--chunk N] [--n-res a,b,c] [--n-seq S] [--iters K]
// One JSON line per case: time (median), GFLOP/s from the analytic FLOP count below, peak memory of
// the device allocator during the forward (parameters excluded: allocated before the reset).
// With --chunk N, each size is also run chunked (attention/transitions/outer product mean in
// chunks of N rows or columns) and the line carries memory_ratio = unchunked ÷ chunked peak and
// slowdown = chunked ÷ unchunked time, both measured in the same run.
#include <cstdio>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "bench/bench_util.h"
#include "core/random.h"
#include "models/alphafold/evoformer.h"

using namespace foldcore;

namespace {

// FLOPs (2 per multiply-add) of one block's GEMMs and attention contractions; pointwise ops and
// layer norms are left out (< 2 %).
double block_flops(const af2::EvoformerBlockConfig& c, double s, double n) {
  const double cm = static_cast<double>(c.c_m), cz = static_cast<double>(c.c_z);
  const double hd_r = static_cast<double>(c.msa_row.num_head * c.msa_row.head_dim);
  const double hd_c = static_cast<double>(c.msa_column.num_head * c.msa_column.head_dim);
  const double hd_t = static_cast<double>(c.tri_att.num_head * c.tri_att.head_dim);
  const double co = static_cast<double>(c.opm_channels), ct = static_cast<double>(c.tri_mul_channels);
  const double fm = static_cast<double>(c.msa_transition_factor), fz = static_cast<double>(c.pair_transition_factor);
  double f = 0;
  f += 2 * s * n * cm * hd_r * 5 + 4 * s * n * n * hd_r + 2 * n * n * cz * c.msa_row.num_head;  // row attention
  f += 2 * s * n * cm * hd_c * 5 + 4 * n * s * s * hd_c;                                      // column attention
  f += 4 * s * n * cm * cm * fm;                                                             // MSA transition
  f += 4 * s * n * cm * co + 2 * n * n * co * co * s + 2 * n * n * co * co * cz;             // outer product mean
  f += 2 * (2 * n * n * cz * ct * 4 + 2 * n * n * cz * cz + 2 * n * n * ct * cz + 2 * n * n * n * ct);  // tri mul ×2
  f += 2 * (2 * n * n * cz * hd_t * 5 + 4 * n * n * n * hd_t + 2 * n * n * cz * c.tri_att.num_head);      // tri att ×2
  f += 4 * n * n * cz * cz * fz;                                                             // pair transition
  return f;
}

struct Result {
  double ms = 0;
  size_t peak = 0;
};

Result run(const af2::EvoformerBlock& block, Device dev, int64_t s, int64_t n, int64_t chunk, int iters) {
  Generator gen(5);
  const af2::EvoformerBlockConfig& c = block.config();
  const autograd::Variable m(randn({s, n, c.c_m}, gen).to(dev)), z(randn({n, n, c.c_z}, gen).to(dev));
  const Tensor msa_mask = Tensor::full({s, n}, 1.0, DType::f32, dev), pair_mask = Tensor::full({n, n}, 1.0, DType::f32, dev);
  autograd::NoGradGuard ng;
  auto step = [&] { (void)block.forward(m, z, msa_mask, pair_mask, chunk); };
  Result r;
  // Every step allocates and frees the same buffers, so the peak over the timed runs is one step's.
  synchronize(dev);
  bench::reset_peak(dev);
  const size_t base = default_allocator(dev).stats().current;
  r.ms = bench::time_ms(dev, step, 1, iters);
  r.peak = bench::peak_bytes(dev) - base;
  return r;
}

std::vector<int64_t> parse_list(const std::string& s) {
  std::vector<int64_t> v;
  std::stringstream ss(s);
  for (std::string t; std::getline(ss, t, ',');) v.push_back(std::stoll(t));
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  Device dev = Device::cpu();
  int64_t chunk = 0, n_seq = 128;
  int iters = 0;  // 0: 3 on the CPU, 10 on CUDA
  std::vector<int64_t> n_res{64, 128, 256};
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--device") && i + 1 < argc) dev = Device::parse(argv[++i]);
    else if (!std::strcmp(argv[i], "--chunk") && i + 1 < argc) chunk = std::stoll(argv[++i]);
    else if (!std::strcmp(argv[i], "--n-res") && i + 1 < argc) n_res = parse_list(argv[++i]);
    else if (!std::strcmp(argv[i], "--n-seq") && i + 1 < argc) n_seq = std::stoll(argv[++i]);
    else if (!std::strcmp(argv[i], "--iters") && i + 1 < argc) iters = std::stoi(argv[++i]);
    else {
      std::fprintf(stderr, "usage: %s [--device cpu|cuda] [--chunk N] [--n-res a,b,c] [--n-seq S] [--iters K]\n", argv[0]);
      return 2;
    }
  }
  if (iters <= 0) iters = dev.is_cuda() ? 10 : 3;
  try {
    autograd::ParamStore ps(dev);
    Generator init(1);
    const af2::Af2Config cfg;  // model_1_ptm
    af2::EvoformerBlock block(nn::Scope{&ps, &init, nullptr, "block"}, cfg.evoformer);
    block.train(false);
    ps.finalize();
    for (int64_t n : n_res) {
      const Result whole = run(block, dev, n_seq, n, 0, iters);
      const double gflop = block_flops(cfg.evoformer, static_cast<double>(n_seq), static_cast<double>(n)) * 1e-9;
      auto line = [&](const Result& r, int64_t ch) {
        bench::JsonLine j;
        j.str("bench", "evoformer")
            .str("case", "block_nres" + std::to_string(n) + "_nseq" + std::to_string(n_seq) +
                             (ch > 0 ? "_chunk" + std::to_string(ch) : ""))
            .str("device", dev.str())
            .str("dtype", "f32")
            .integer("n_res", n)
            .integer("n_seq", n_seq)
            .integer("chunk", ch)
            .num("ms", r.ms)
            .num("gflop", gflop)
            .num("gflops_per_s", gflop / (r.ms * 1e-3))
            .num("peak_mb", static_cast<double>(r.peak) / (1 << 20));
        if (ch > 0) {
          j.num("memory_ratio", static_cast<double>(whole.peak) / static_cast<double>(std::max<size_t>(r.peak, 1)));
          j.num("slowdown", r.ms / whole.ms);
        }
        j.print();
      };
      line(whole, 0);
      if (chunk > 0) line(run(block, dev, n_seq, n, chunk, iters), chunk);
    }
  } catch (const Error& e) {
    std::fprintf(stderr, "bench_evoformer: %s\n", e.what());
    return 1;
  }
  return 0;
}
