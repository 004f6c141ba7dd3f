// Evoformer block benchmark: one AlphaFold2 Evoformer block (model_1_ptm widths: c_m 256, c_z 128;
// Alg. 6) forward in inference mode (no grad, eval), N_seq 128 and N_res 64 / 128 / 256.
//   bench_evoformer [--device cpu|cuda] [--chunk N] [--n-res a,b,c] [--n-seq S] [--iters K]
//                   [--profile | --profile-only NAME]
// One JSON line per case: time (median), GFLOP/s from the analytic FLOP count below, peak memory of
// the device allocator during the forward (parameters excluded: allocated before the reset).
// With --chunk N, each size is also run chunked (attention/transitions/outer product mean in
// chunks of N rows or columns) and the line carries memory_ratio = unchunked ÷ chunked peak and
// slowdown = chunked ÷ unchunked time, both measured in the same run. On the CPU each rate is also
// given as a fraction of the sgemm peak measured at the start (sgemm_peak_before/after lines), per
// wall second and per CPU second of the process (cpu_fraction_of_sgemm; with OMP_NUM_THREADS=1
// it is insensitive to other users' load).
// --profile adds one line per submodule (each timed alone, with its share of the FLOP count);
// --profile-only NAME (e.g. msa_column_attention) just that one, to run under a profiler.
#include <cstdio>
#include <cstring>
#include <ctime>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "bench/bench_util.h"
#include "core/random.h"
#include "kernels/gemm.h"
#include "models/alphafold/evoformer/evoformer.h"

using namespace foldcore;

namespace {

// FLOPs (2 per multiply-add) of one block's GEMMs and attention contractions, per submodule in the
// block's order; pointwise ops and layer norms are left out (< 2 %).
struct Part {
  const char* name;
  double flops;
};
std::vector<Part> block_flops(const af2::EvoformerBlockConfig& c, double s, double n) {
  const double cm = static_cast<double>(c.c_m), cz = static_cast<double>(c.c_z);
  const double hd_r = static_cast<double>(c.msa_row.num_head * c.msa_row.head_dim);
  const double hd_c = static_cast<double>(c.msa_column.num_head * c.msa_column.head_dim);
  const double hd_t = static_cast<double>(c.tri_att.num_head * c.tri_att.head_dim);
  const double co = static_cast<double>(c.opm_channels), ct = static_cast<double>(c.tri_mul_channels);
  const double fm = static_cast<double>(c.msa_transition_factor), fz = static_cast<double>(c.pair_transition_factor);
  // q, k, v, gate, output projections (5 GEMMs) + q·kᵀ and p·v (+ the pair-bias projection).
  const double tri_att = 2 * n * n * cz * hd_t * 5 + 4 * n * n * n * hd_t + 2 * n * n * cz * c.tri_att.num_head;
  // 4 projections c_z → c (a, b and their gates), the output gate and projection, the triangle product.
  const double tri_mul = 2 * n * n * cz * ct * 4 + 2 * n * n * cz * cz + 2 * n * n * ct * cz + 2 * n * n * n * ct;
  return {
      {"msa_row_attention", 2 * s * n * cm * hd_r * 5 + 4 * s * n * n * hd_r + 2 * n * n * cz * c.msa_row.num_head},
      {"msa_column_attention", 2 * s * n * cm * hd_c * 5 + 4 * n * s * s * hd_c},
      {"msa_transition", 4 * s * n * cm * cm * fm},
      {"outer_product_mean", 4 * s * n * cm * co + 2 * n * n * co * co * s + 2 * n * n * co * co * cz},
      {"triangle_mult_outgoing", tri_mul},
      {"triangle_mult_incoming", tri_mul},
      {"triangle_attention_start", tri_att},
      {"triangle_attention_end", tri_att},
      {"pair_transition", 4 * n * n * cz * cz * fz},
  };
}

double total_flops(const std::vector<Part>& parts) {
  double f = 0;
  for (const Part& p : parts) f += p.flops;
  return f;
}

// CPU seconds used by the whole process (all threads). On a shared machine wall time depends on the
// other users' load; the CPU time of a single-threaded run (OMP_NUM_THREADS=1) barely does, so
// rates per CPU-second, compared with the sgemm's own, are the load-robust figures.
double process_cpu_s() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

// Median wall ms (bench::time_ms) and mean CPU ms per call of fn over the same calls.
struct Timing {
  double ms = 0, cpu_ms = 0;
};
Timing time_both(Device dev, const std::function<void()>& fn, int warmup, int iters) {
  double cpu = 0;
  int calls = 0;
  Timing t;
  t.ms = bench::time_ms(dev, [&] {
    const double c0 = process_cpu_s();
    fn();
    cpu += process_cpu_s() - c0;
    ++calls;
  }, warmup, iters);
  t.cpu_ms = 1e3 * cpu / calls;
  return t;
}

struct Result {
  double ms = 0, cpu_ms = 0;
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
  const Timing t = time_both(dev, step, 1, iters);
  r.ms = t.ms;
  r.cpu_ms = t.cpu_ms;
  r.peak = bench::peak_bytes(dev) - base;
  return r;
}

// OpenBLAS-backed fp32 GEMM rate (1024³) per wall second and per CPU second: the yardstick for the
// fractions below (the machine is shared, so rates are only comparable as fractions of a peak
// measured in the same run).
struct Peak {
  double gflops = 0, gflops_per_cpu_s = 0;
};
Peak sgemm_peak() {
  constexpr int64_t n = 1024;
  Generator g(1);
  const Tensor a = randn({n, n}, g), b = randn({n, n}, g), c = Tensor::empty({n, n}, DType::f32);
  const Timing t = time_both(Device::cpu(), [&] { ops::gemm(a, b, c); }, 1, 5);
  const double gflop = 2.0 * n * n * n * 1e-9;
  return {gflop / (t.ms * 1e-3), gflop / (t.cpu_ms * 1e-3)};
}

// Adds the rates of `gflop` done in `t` and, on the CPU, their fractions of the sgemm's.
void add_rates(bench::JsonLine& j, double gflop, const Timing& t, const Peak& peak) {
  j.num("ms", t.ms).num("cpu_ms", t.cpu_ms).num("gflop", gflop).num("gflops_per_s", gflop / (t.ms * 1e-3));
  if (peak.gflops <= 0) return;
  j.num("fraction_of_sgemm_peak", gflop / (t.ms * 1e-3) / peak.gflops)
      .num("cpu_fraction_of_sgemm", gflop / (t.cpu_ms * 1e-3) / peak.gflops_per_cpu_s);
}

// --profile: each submodule of the block timed alone on the same (m, z), one JSON line each with
// its analytic GFLOP and rate (and, on the CPU, the fraction of the sgemm peak).
void profile_submodules(const af2::EvoformerBlock& block, Device dev, int64_t s, int64_t n, int64_t chunk, int iters,
             const Peak& peak, const std::string& only) {
  Generator gen(5);
  const af2::EvoformerBlockConfig& c = block.config();
  const autograd::Variable m(randn({s, n, c.c_m}, gen).to(dev)), z(randn({n, n, c.c_z}, gen).to(dev));
  const Tensor msa_mask = Tensor::full({s, n}, 1.0, DType::f32, dev), pair_mask = Tensor::full({n, n}, 1.0, DType::f32, dev);
  autograd::NoGradGuard ng;
  const std::vector<std::function<void()>> steps{
      [&] { (void)block.msa_row_attention().forward(m, z, msa_mask, chunk); },
      [&] { (void)block.msa_column_update(m, msa_mask, chunk); },
      [&] { (void)af2::transition_forward(block.msa_transition(), m, chunk); },
      [&] { (void)block.outer_product_mean().forward(m, msa_mask, chunk); },
      [&] { (void)block.triangle_multiplication_outgoing().forward(z, pair_mask); },
      [&] { (void)block.triangle_multiplication_incoming().forward(z, pair_mask); },
      [&] { (void)block.triangle_attention_starting_node().forward(z, pair_mask, chunk); },
      [&] { (void)block.triangle_attention_ending_node().forward(z, pair_mask, chunk); },
      [&] { (void)af2::transition_forward(block.pair_transition(), z, chunk); },
  };
  const std::vector<Part> parts = block_flops(c, static_cast<double>(s), static_cast<double>(n));
  for (size_t i = 0; i < parts.size(); ++i) {
    if (!only.empty() && only != parts[i].name) continue;
    const Timing t = time_both(dev, steps[i], 1, iters);
    bench::JsonLine j;
    j.str("bench", "evoformer_profile")
        .str("case", std::string(parts[i].name) + "_nres" + std::to_string(n) + "_nseq" + std::to_string(s))
        .str("device", dev.str())
        .integer("n_res", n)
        .integer("n_seq", s);
    add_rates(j, parts[i].flops * 1e-9, t, peak);
    j.print();
  }
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
  bool prof = false;
  std::string only;  // --profile-only NAME: one submodule (for a profiler)
  int iters = 0;  // 0: 3 on the CPU, 10 on CUDA
  std::vector<int64_t> n_res{64, 128, 256};
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--device") && i + 1 < argc) dev = Device::parse(argv[++i]);
    else if (!std::strcmp(argv[i], "--chunk") && i + 1 < argc) chunk = std::stoll(argv[++i]);
    else if (!std::strcmp(argv[i], "--n-res") && i + 1 < argc) n_res = parse_list(argv[++i]);
    else if (!std::strcmp(argv[i], "--n-seq") && i + 1 < argc) n_seq = std::stoll(argv[++i]);
    else if (!std::strcmp(argv[i], "--iters") && i + 1 < argc) iters = std::stoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--profile")) prof = true;
    else if (!std::strcmp(argv[i], "--profile-only") && i + 1 < argc) prof = true, only = argv[++i];
    else {
      std::fprintf(stderr, "usage: %s [--device cpu|cuda] [--chunk N] [--n-res a,b,c] [--n-seq S] [--iters K] [--profile | --profile-only NAME]\n",
                   argv[0]);
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
    // The CPU's sgemm peak before and after the cases: the spread shows how much the shared
    // machine's load moved during the run.
    auto print_peak = [&](const char* when) {
      if (dev.is_cuda()) return Peak{};
      const Peak p = sgemm_peak();
      bench::JsonLine()
          .str("bench", "evoformer")
          .str("case", std::string("sgemm_peak_") + when)
          .num("gflops", p.gflops)
          .num("gflops_per_cpu_s", p.gflops_per_cpu_s)
          .print();
      return p;
    };
    const Peak peak = print_peak("before");
    for (int64_t n : n_res) {
      const Result whole = run(block, dev, n_seq, n, 0, iters);
      const double gflop = total_flops(block_flops(cfg.evoformer, static_cast<double>(n_seq), static_cast<double>(n))) * 1e-9;
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
            .num("peak_mb", static_cast<double>(r.peak) / (1 << 20));
        add_rates(j, gflop, Timing{r.ms, r.cpu_ms}, peak);
        if (ch > 0) {
          j.num("memory_ratio", static_cast<double>(whole.peak) / static_cast<double>(std::max<size_t>(r.peak, 1)));
          j.num("slowdown", r.ms / whole.ms);
        }
        j.print();
      };
      line(whole, 0);
      if (chunk > 0) line(run(block, dev, n_seq, n, chunk, iters), chunk);
      if (prof) profile_submodules(block, dev, n_seq, n, chunk, iters, peak, only);
    }
    print_peak("after");
  } catch (const Error& e) {
    std::fprintf(stderr, "bench_evoformer: %s\n", e.what());
    return 1;
  }
  return 0;
}
