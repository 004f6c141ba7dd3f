// AlphaFold2 inference cost per target: seconds and peak memory for N_res 64/128/256 with one
// model (model_1_ptm widths, random parameters) and 3 recycles, plus the model's FLOP rate as a
// fraction of the dense-GEMM peak measured in the same run (OpenBLAS sgemm on the CPU; on CUDA the
// best of 3 8192³ GEMMs in the run's precision, after one warm-up prediction at N = 32).
//
//   bench_predict [--lengths 64,128,256] [--evoformer_blocks B] [--extra_msa_blocks E]
//                 [--msa_rows S] [--recycles R] [--chunk C] [--precision fp32|bf16]
//                 [--device cpu|cuda:0]
//   bench_predict --memory [--lengths 256,512,768,1024] [--chunk 16] [--precision fp32|bf16]
//                 [--device cpu|cuda:0] [--budget_gib 22] [--verify N|max] [--evoformer_blocks B]
//                 [--extra_msa_blocks E] [--no_templates] [--templates T]
//   either mode: [--template_passes 0|1|2] (the template embedding's passes, Af2Config::template_passes;
//                 default 0, the model's auto: two when chunking)
//                [--result_arrays full|summary] (as `foldcore predict`'s: full, the default, keeps the
//                 [N, N, 64] distogram and PAE logits and the PAE probabilities on the host; summary
//                 streams the PAE head into PAE and pTM and skips the distogram head)
//
// Full width (c_m 256, c_z 128, c_s 384, c_e 64); depth is reduced by default (2 Evoformer
// blocks, 1 extra-MSA block: the full 48 take hours on 2 CPU cores) and reported in every line;
// --evoformer_blocks 48 --extra_msa_blocks 4 is the real model. Inputs: a random sequence with a
// synthetic MSA of S rows (15% substitutions, 10% gaps), processed by AlphaFold's inference
// pipeline (data_pipeline/features/feature_processing.h), no templates (one masked slot) unless
// --templates T gives T synthetic ones (the query on a random chain: models/alphafold/model/synthetic_target.h).
//
// FLOPs are counted analytically (bench/af2_flops.h): 2·m·n·k for every matrix product of the
// model — linear layers, attention logits and weighted sums, the triangle-multiplication
// contractions, the outer-product mean — per module from the config's widths and the actual
// S, E, T, N. Elementwise work (LayerNorm, softmax, gating, activations) is not counted, so the
// rate is a lower bound on the work done. Peak memory: the process's peak resident set (VmHWM),
// reset per target through /proc/self/clear_refs, and the peak of the device allocator (every
// tensor byte: parameters, features, activations, outputs).
//
// --memory: the long-sequence memory curve. Same widths, depth 1 + 1 (blocks run one after the
// other and each block's activations die before the next starts, so the peak does not depend on
// depth), 16 MSA clusters + 16 extra rows, 4 templates (the model's max_templates, every one
// present: the template stack's memory counts), 0 recycles, chunked inference (default chunk 16: the
// attention logits of one chunk, chunk·H·N² values, stay below half a pair for H = 4 heads).
// Prints peak allocator bytes and peak RSS per N_res, the allocator peak also in units of one fp32
// pair representation (N²·c_z·4 bytes: peak_fp32_pairs, and above_inputs_fp32_pairs without the
// parameters and features allocated before predict), then fits peak(N) = a·N² + b·N + c to the
// allocator peaks (least squares over the lengths) and solves it for the largest N under
// --budget_gib less the measured RSS overhead (an extrapolation; --verify N runs that length after
// the fit to check it; --verify max runs n_max itself: the largest prediction this machine holds);
// n_max_80gb solves the fit for an 80 GB GPU.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "autograd/param_store.h"
#include "bench/af2_flops.h"
#include "bench/bench_util.h"
#include "kernels/attention.h"
#include "core/random.h"
#include "core/tensor.h"
#include "kernels/gemm.h"
#include "models/alphafold/model/config.h"

#include "models/alphafold/model/alphafold.h"
#include "models/alphafold/model/features.h"
#include "models/alphafold/model/synthetic_target.h"
#include "models/bert/bert_trainer.h"

namespace {
using namespace foldcore;

// --verify max: run the fit's n_max (the largest N for --budget_gib on this machine).
constexpr int64_t kVerifyMax = -2;

// --memory: a small MSA (the pair track dominates memory at long N).
constexpr int64_t kMemoryMsaClusters = 16, kMemoryExtraMsa = 16;

struct Args {
  std::vector<int64_t> lengths{64, 128, 256};
  int64_t evoformer_blocks = 2, extra_msa_blocks = 1, msa_rows = 128, recycles = 3, chunk = 0;
  std::string precision = "fp32";
  bool memory = false;
  bool templates = true;  // --no_templates: the model without its template stack (as model_3..5)
  int64_t template_passes = 0;  // --template_passes: Af2Config::template_passes (0: auto)
  int64_t num_templates = -1;  // --templates: synthetic templates (-1: 0, or max_templates with --memory)
  Device device = Device::cpu();
  double budget_gib = 22;  // of the 24 GiB machine: 2 GiB for the OS and other processes
  int64_t verify = 0;
  bool pair_logits = true;  // --result_arrays full (true) | summary
};

// What the bench's predictions keep: as `foldcore predict`, no recycled states or representations,
// the pair-sized logits per --result_arrays.
af2::Af2PredictKeep predict_keep(const Args& args) {
  return {.recycle_states = false, .representations = false, .pair_logits = args.pair_logits};
}

// Peak resident set (bytes) since the last reset.
size_t peak_rss() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("VmHWM:", 0) == 0) return std::stoull(line.substr(6)) * 1024;
  return 0;
}
void reset_peak_rss() { std::ofstream("/proc/self/clear_refs") << "5"; }

double sgemm_peak_gflops() {
  constexpr int64_t n = 1024;
  Generator g(1);
  const Tensor a = randn({n, n}, g), b = randn({n, n}, g), c = Tensor::empty({n, n}, DType::f32);
  const double ms = bench::time_ms(Device::cpu(), [&] { ops::gemm(a, b, c); }, 1, 5);
  return 2.0 * n * n * n / (ms * 1e-3) / 1e9;
}

std::vector<int64_t> parse_list(const std::string& s) {
  std::vector<int64_t> v;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) v.push_back(std::stoll(item));
  return v;
}

// A synthetic target (models/alphafold/model/synthetic_target.h). max_msa_clusters / max_extra_msa <= 0:
// the pipeline defaults.
af2::Af2Features synthetic_features(int64_t n, int64_t msa_rows, int64_t recycles, int64_t max_templates,
                                    int64_t max_msa_clusters, int64_t max_extra_msa, std::mt19937& g,
                                    int64_t templates = 0) {
  return af2::synthetic_target({n, msa_rows, recycles, max_templates, max_msa_clusters, max_extra_msa, templates},
                               g);
}

// Templates with a non-zero template_mask (the ones the model computes).
int64_t present_templates(const af2::Af2Batch& b) {
  int64_t k = 0;
  for (float m : b.template_mask.to_vector()) k += m > 0.f ? 1 : 0;
  return k;
}

// The fields every result line starts with: what ran, on what, at which size and settings.
bench::JsonLine case_line(const std::string& bench_name, const std::string& kind, Device device, int64_t n,
                          const af2::Af2Batch& b0, const af2::Af2Config& config) {
  bench::JsonLine line;
  line.str("bench", bench_name)
      .str("case", kind)
      .str("device", device.str())
      .integer("n_res", n)
      .integer("msa_rows", b0.num_msa())
      .integer("extra_msa_rows", b0.num_extra_msa())
      .integer("evoformer_blocks", config.num_evoformer_blocks)
      .integer("extra_msa_blocks", config.num_extra_msa_blocks)
      .str("templates", config.templates.enabled ? "on" : "off")
      .integer("templates_present", b0.has_templates() ? present_templates(b0) : 0)
      .integer("recycles", config.num_recycles)
      .str("attention_kernel", device.is_cuda() ? ops::attention_kernel_name(ops::attention_kernel()) : "cpu")
      .integer("chunk", config.chunk_size)
      // What add_into runs: two passes only with two or more present templates (and no gate).
      .integer("template_passes", af2::template_two_passes_requested(config) && b0.has_templates() &&
                                          present_templates(b0) >= 2 && !config.templates.pointwise_att.gating
                                      ? 2
                                      : 1)
      .str("precision", config.precision);
  return line;
}

// Least-squares fit of y = a·x² + b·x + c (normal equations, solved by Cramer's rule in double).
struct Quadratic {
  double a = 0, b = 0, c = 0;
  double operator()(double x) const { return (a * x + b) * x + c; }
  // The largest integer x >= 0 with (*this)(x) <= y (the fit grows for x beyond its vertex).
  int64_t solve_max(double y) const {
    int64_t lo = 0, hi = 1;
    while ((*this)(static_cast<double>(hi)) <= y && hi < (int64_t{1} << 30)) hi *= 2;
    while (hi - lo > 1) {
      const int64_t mid = (lo + hi) / 2;
      ((*this)(static_cast<double>(mid)) <= y ? lo : hi) = mid;
    }
    return lo;
  }
};
Quadratic fit_quadratic(const std::vector<double>& x, const std::vector<double>& y) {
  double s[5] = {0, 0, 0, 0, 0}, t[3] = {0, 0, 0};  // s[k] = Σ x^k, t[k] = Σ x^k·y
  for (size_t i = 0; i < x.size(); ++i) {
    double p = 1;
    for (int k = 0; k < 5; ++k, p *= x[i]) {
      s[k] += p;
      if (k < 3) t[k] += p * y[i];
    }
  }
  // [s4 s3 s2; s3 s2 s1; s2 s1 s0] · [a b c]ᵀ = [t2 t1 t0]ᵀ
  auto det = [](double m00, double m01, double m02, double m10, double m11, double m12, double m20, double m21,
                double m22) {
    return m00 * (m11 * m22 - m12 * m21) - m01 * (m10 * m22 - m12 * m20) + m02 * (m10 * m21 - m11 * m20);
  };
  const double d = det(s[4], s[3], s[2], s[3], s[2], s[1], s[2], s[1], s[0]);
  if (x.size() < 3 || d == 0) return {};
  return {det(t[2], s[3], s[2], t[1], s[2], s[1], t[0], s[1], s[0]) / d,
          det(s[4], t[2], s[2], s[3], t[1], s[1], s[2], t[0], s[0]) / d,
          det(s[4], s[3], t[2], s[3], s[2], t[1], s[2], s[1], t[0]) / d};
}

// model_1_ptm widths with the depth, recycles, chunk and precision of the command line.
af2::Af2Config make_config(const Args& args) {
  af2::Af2Config config;
  config.num_evoformer_blocks = args.evoformer_blocks;
  config.num_extra_msa_blocks = args.extra_msa_blocks;
  config.num_recycles = args.recycles;
  config.chunk_size = args.chunk;
  config.precision = args.precision;
  config.templates.enabled = args.templates;
  config.template_passes = args.template_passes;
  af2::validate_af2_config(config);
  return config;
}

// The model of a run: random parameters (seed 7) on the run's device, in eval mode.
struct RandomModel {
  autograd::ParamStore params;
  Generator init{7};
  af2::AlphaFold model;
  RandomModel(const af2::Af2Config& config, Device device)
      : params(device), model(nn::Scope{&params, &init, nullptr, ""}, config) {
    model.train(false);
    params.finalize();
  }
};

// The --memory mode (see the header).
int run_memory(const Args& args) {
  const af2::Af2Config config = make_config(args);
  const RandomModel rm(config, args.device);
  const af2::AlphaFold& model = rm.model;
  Allocator& alloc = default_allocator(args.device);
  std::mt19937 g(42);
  constexpr double kMiB = 1 << 20;
  // One length: its JSON line; returns {peak allocator MiB, peak RSS MiB}.
  auto measure = [&](int64_t n, const std::string& kind) {
    const af2::Af2Features features =
        synthetic_features(n, 2 * kMemoryMsaClusters, args.recycles, config.templates.max_templates,
                           kMemoryMsaClusters, kMemoryExtraMsa, g, args.num_templates);
    const af2::Af2Batch b0 = features.iteration(0);
    reset_peak_rss();
    alloc.reset_peak();
    const size_t base = alloc.stats().current;
    WallTimer timer;
    double peak_alloc = 0;
    {
      const af2::Af2Outputs out = model.predict(features, args.recycles, args.device, {}, predict_keep(args));
      peak_alloc = static_cast<double>(alloc.stats().peak) / kMiB;
    }
    const double seconds = timer.seconds(), rss = static_cast<double>(peak_rss()) / kMiB;
    // The unit of the issue: one fp32 pair representation, N²·c_z·4 bytes, whatever the precision.
    const double pair_mib = static_cast<double>(n * n * config.c_z * 4) / kMiB;
    const double above = peak_alloc - static_cast<double>(base) / kMiB;  // less parameters and features
    case_line("predict_memory", kind, args.device, n, b0, config)
        .str("result_arrays", args.pair_logits ? "full" : "summary")
        .num("seconds", seconds)
        .num("pair_mib", pair_mib)
        .num("peak_alloc_mib", peak_alloc)
        .num("peak_above_inputs_mib", above)
        .num("peak_fp32_pairs", peak_alloc / pair_mib)
        .num("above_inputs_fp32_pairs", above / pair_mib)
        .num("peak_rss_mib", rss)
        .print();
    bench::print_profile("predict_memory_profile", kind, n);
    return std::pair{peak_alloc, rss};
  };
  std::vector<double> ns, alloc_mib, rss_mib;
  for (const int64_t n : args.lengths) {
    const auto [a, r] = measure(n, "long_sequence");
    ns.push_back(static_cast<double>(n));
    alloc_mib.push_back(a);
    rss_mib.push_back(r);
  }
  // The fit is on allocator bytes (deterministic); peak RSS adds what the allocator does not see
  // (code, OpenBLAS/OpenMP buffers, malloc slack), taken as the largest measured RSS − allocator
  // difference and subtracted from the budget (on a GPU the allocator is the whole story).
  const Quadratic fit = fit_quadratic(ns, alloc_mib);
  double overhead = 0;
  if (args.device.is_cpu())
    for (size_t i = 0; i < ns.size(); ++i) overhead = std::max(overhead, rss_mib[i] - alloc_mib[i]);
  const double budget = args.budget_gib * 1024 - overhead;
  bench::JsonLine()
      .str("bench", "predict_memory")
      .str("case", "fit")
      .str("quantity", "peak_alloc_mib")
      .num("a_mib_per_n2", fit.a)
      .num("b_mib_per_n", fit.b)
      .num("c_mib", fit.c)
      .num("a_in_pairs", fit.a * kMiB / (static_cast<double>(config.c_z) * 4))
      .num("rss_overhead_mib", overhead)
      .num("budget_gib", args.budget_gib)
      // A fit that does not grow with N² (a <= 0: too few or too close lengths, or a peak still in
      // its O(N) regime) says nothing about larger N: -1 instead of an extrapolation.
      .integer("n_max", fit.a > 0 ? fit.solve_max(budget) : -1)
      // An 80 GB GPU, where the allocator is the whole story (c still holds this depth's parameters).
      .integer("n_max_80gb", fit.a > 0 ? fit.solve_max(80e9 / kMiB) : -1)
      .print();
  if (args.verify > 0) measure(args.verify, "verify");
  if (args.verify == kVerifyMax) {
    FC_CHECK(fit.a > 0 && fit.solve_max(budget) > 0, "bench_predict: --verify max needs a fit that grows with N²");
    measure(fit.solve_max(budget), "verify");
  }
  return 0;
}

int run(int argc, char** argv) {
  Args args;
  bool lengths_given = false, blocks_given = false, recycles_given = false, chunk_given = false;
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    if (k == "--memory") {
      args.memory = true;
      continue;
    }
    if (k == "--no_templates") {
      args.templates = false;
      continue;
    }
    if (i + 1 >= argc) {
      std::fprintf(stderr, "bench_predict: option %s needs a value\n", k.c_str());
      return 2;
    }
    const std::string v = argv[++i];
    if (k == "--lengths") args.lengths = parse_list(v), lengths_given = true;
    else if (k == "--templates") args.num_templates = std::stoll(v);
    else if (k == "--template_passes") args.template_passes = std::stoll(v);
    else if (k == "--evoformer_blocks") args.evoformer_blocks = std::stoll(v), blocks_given = true;
    else if (k == "--extra_msa_blocks") args.extra_msa_blocks = std::stoll(v), blocks_given = true;
    else if (k == "--msa_rows") args.msa_rows = std::stoll(v);
    else if (k == "--recycles") args.recycles = std::stoll(v), recycles_given = true;
    else if (k == "--chunk") args.chunk = std::stoll(v), chunk_given = true;
    else if (k == "--precision") args.precision = v;
    else if (k == "--result_arrays") {
      FC_CHECK(v == "full" || v == "summary", "bench_predict: --result_arrays full or summary, got '", v, "'");
      args.pair_logits = v == "full";
    }
    else if (k == "--device") args.device = Device::parse(v);
    else if (k == "--budget_gib") args.budget_gib = std::stod(v);
    else if (k == "--verify") args.verify = v == "max" ? kVerifyMax : std::stoll(v);
    else {
      std::fprintf(stderr, "bench_predict: unknown option %s\n", k.c_str());
      return 2;
    }
  }
  const int64_t slots = make_config(args).templates.max_templates;
  if (args.num_templates < -1 || args.num_templates > slots || (!args.templates && args.num_templates > 0)) {
    std::fprintf(stderr, "bench_predict: --templates %lld: between 0 and the model's %lld template slots%s\n",
                 static_cast<long long>(args.num_templates), static_cast<long long>(slots),
                 args.templates ? "" : " (0 with --no_templates)");
    return 2;
  }
  if (args.memory) {
    if (!lengths_given) args.lengths = {256, 512, 768, 1024};
    if (!blocks_given) args.evoformer_blocks = args.extra_msa_blocks = 1;
    if (!recycles_given) args.recycles = 0;
    if (!chunk_given) args.chunk = 16;
    if (args.num_templates < 0) args.num_templates = args.templates ? make_config(args).templates.max_templates : 0;
    return run_memory(args);
  }
  // The dense-GEMM peak of the device the model runs on: OpenBLAS sgemm on the CPU; on CUDA the
  // best of 3 8192³ GEMMs in the run's precision (bf16 or f32), large enough to fill the chip.
  const bool cuda = args.device.is_cuda();
  if (cuda) FC_CHECK(cuda_available(), "bench_predict: --device ", args.device.str(), " but no CUDA device is usable");
  const DType gemm_dt = args.precision == "bf16" ? DType::bf16 : DType::f32;
  const double peak = cuda ? bert::measure_gemm_peak_flops(args.device, gemm_dt) / 1e9 : sgemm_peak_gflops();
  bench::JsonLine()
      .str("bench", "predict")
      .str("case", cuda ? "gemm_peak" : "sgemm_peak")
      .str("device", args.device.str())
      .str("dtype", cuda ? std::string(dtype_name(gemm_dt)) : std::string("f32"))
      .num("gflops", peak)
      .print();
  const af2::Af2Config config = make_config(args);
  std::mt19937 g(42);
  const RandomModel rm(config, args.device);
  const af2::AlphaFold& model = rm.model;
  if (cuda) {  // warm-up: module load, cuBLASLt handles and heuristics, the caching allocator
    const af2::Af2Features warm = synthetic_features(32, 16, 0, config.templates.max_templates, 0, 0, g);
    (void)model.predict(warm, 0, args.device);
    synchronize(args.device);
  }
  profile::reset();
  for (const int64_t n : args.lengths) {
    const af2::Af2Features features =
        synthetic_features(n, args.msa_rows, args.recycles, config.templates.max_templates, 0, 0, g,
                           std::max<int64_t>(0, args.num_templates));
    const af2::Af2Batch b0 = features.iteration(0);

    reset_peak_rss();
    bench::reset_peak(args.device);
    kernel_profile::reset();
    WallTimer timer;
    const af2::Af2Outputs out = model.predict(features, args.recycles, args.device, {}, predict_keep(args));
    synchronize(args.device);
    const double seconds = timer.seconds();
    const double flops = (args.recycles + 1) * bench::af2_flops(config, static_cast<double>(b0.num_msa()),
                                                         static_cast<double>(b0.num_extra_msa()),
                                                         static_cast<double>(std::max<int64_t>(1, b0.num_templates())),
                                                         static_cast<double>(n));
    case_line("predict", "model_1_ptm_random", args.device, n, b0, config)
        .str("result_arrays", args.pair_logits ? "full" : "summary")
        .num("seconds", seconds)
        .num("peak_rss_mib", static_cast<double>(peak_rss()) / (1 << 20))
        .num("peak_alloc_mib", static_cast<double>(bench::peak_bytes(args.device)) / (1 << 20))
        .num("model_gflop", flops / 1e9)
        .num("gflops", flops / seconds / 1e9)
        .num(cuda ? "fraction_of_gemm_peak" : "fraction_of_sgemm_peak", flops / seconds / 1e9 / peak)
        .integer("outputs", static_cast<long long>(out.size()))
        .print();
    bench::print_profile("predict_profile", "model_1_ptm_random", n);
    bench::print_kernel_profile("predict_kernels", "model_1_ptm_random", n, seconds);
  }
  return 0;
}

}  // namespace

// Bad options or inputs (foldcore::Error, std::stoll's exceptions): the message and exit 1, no abort.
int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_predict: %s\n", e.what());
    return 1;
  }
}
