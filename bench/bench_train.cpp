// AlphaFold2 training-step cost: seconds per step and peak memory of one training step
// (forward over the recycling iterations, every loss term, backward into the fp32 gradient buffer;
// models/alphafold/training/train_step.h) per crop size × precision × recomputation, with the model FLOPs
// per step ÷ time as a fraction of the machine's dense-GEMM peak measured in the same run.
//
//   bench_train [--crops 64,128,256] [--configs fp32:0,fp32:1,bf16:0,bf16:1]
//               [--evoformer_blocks 2] [--extra_msa_blocks 1] [--iterations 1]
//               [--model_config configs/model/model_1.yaml] [--device cpu|cuda:0] [--steps K] [--samples K]
// (a build without yaml-cpp runs the built-in model_1_ptm config: model_1's widths plus the TM head)
//
// --configs: precision:recompute_blocks[:keep[:keep_extra]] (precision fp32, bf16, or bf16_streams: bf16
// with the MSA and pair streams in bf16, Af2Config::bf16_training_streams; recompute_blocks 0 = no recomputation,
// k = k blocks per recomputation segment; keep: Af2Config::recompute_keep_blocks, the last `keep`
// Evoformer blocks not recomputed, 0 when left out; keep_extra: recompute_keep_extra_msa_blocks,
// the same for the extra-MSA stack; e.g. bf16:1:24 or bf16:1:48:4; `auto`: as many of both as the
// device holds, extra-MSA blocks first, measured by one or two untimed steps first,
// models/alphafold/training/keep_blocks.h; the line reports the counts chosen and kept_block_mib /
// kept_extra_msa_block_mib, what the measured blocks held). Model: the widths of --model_config (model_1: c_m 256, c_z 128,
// c_s 384, c_e 64, 8 structure-module layers, every head) with random parameters; depth reduced by
// default to 2 Evoformer blocks and 1 extra-MSA block (reported in every line; --evoformer_blocks
// 48 --extra_msa_blocks 4 is the real model), templates off (the sample has none), dropout on as in
// training, initial-stage loss weights. Sample: chain A of 2Q2K with its real alignments
// (../shared/data), through the training-sample transform (data_pipeline/training/training_sample.h) at
// AlphaFold's initial-training sizes — 128 MSA clusters, 1024 extra rows, the crop padded to the
// crop size when the chain is shorter (shapes and work as for a full-length crop); --iterations I
// runs I recycling iterations (I − 1 without gradients, as in training).
//
// Memory: the device allocator's peak during the step (every tensor byte) minus what was allocated
// before it (parameters, Adam-free: no optimizer here, features): step_peak_mib; peak_alloc_mib
// includes the parameters and features.
// FLOPs: bench/af2_flops.h counts the matrix products of one iteration's forward, F (elementwise
// work not counted: a lower bound). Model FLOPs per step = (I − 1)·F + 3·F (the backward of a
// matrix product costs two forward products); the extra forward of the recomputed segments is not
// model work and is not counted (so recomputation lowers the fraction). The dense-GEMM peak: the
// best of 3 n = 1024 GEMMs (8192 on CUDA, where 1024 leaves most of the chip idle: 123 against 783
// TFLOP/s bf16 on an H200) on the device (bert_trainer.h measure_gemm_peak_flops, bench_gemm's
// method; on the CPU fp32 sgemm for both precisions, the only dense GEMM peak there; the largest of
// 3 such measurements), measured before the cases.
// One step per case, after one warm-up step at crop 16 (code paths, thread pool, allocator); on
// CUDA two steps per case, the faster reported (--steps K: K steps of the same model, the fastest).
// --samples K: the average training step instead, the step the goal is about (AlphaFold2
// trains with num_recycles uniform in 0..3 and 0..4 templates): K samples drawn as the trainer's
// are (sample keys 0..K−1; training_sample.h), the model with its config's template stack and the
// chain given 4 templates made from its own structure; each sample timed once after one untimed
// step; one "af2_step_average" line per crop and config with the mean seconds, each sample's
// iterations, templates and seconds, and the mean model FLOPs ((I − 1)·F + 3·F with F counting the
// sample's templates). --iterations and --steps do not apply there.
// FOLDCORE_PROFILE=1 adds "train_profile" lines:
// seconds per stage of the case's last step (forward, loss, backward; core/profile.h). The step is
// the trainer's: no per-key gradient report on the host (af2_train_step report_grads = false).
// host_waits: where the step made the host wait for the device (copies to the host, synchronous
// copies to it, synchronizes; core/host_waits.h), copies_to_host of them, and the small copies to
// the device that were queued without a wait (staged_copies_to_device); 0 on the CPU.
// launches: the device work the step issued (kernels, GEMMs, device copies and memsets).
// gemm_plans_made / gemm_plans_reused: the step's cuBLASLt plans set up (descriptors and a heuristic
// query) and taken from the thread's plans of earlier GEMMs of the same shape (kernels/gemm.h).
// host_wait_seconds: the host's time blocked in those waits; host_issue_seconds: the rest of the
// host's time in the step (until its last call returned, before the bench's own synchronize), the
// time spent issuing work. On a GPU, host_issue_seconds close to seconds means the device waited
// for the host (launch-bound: fewer, larger kernels help, faster ones do not); a large
// host_wait_seconds means the host ran ahead and the device's work is the step's time.
// FOLDCORE_PROFILE_KERNELS=1 adds "train_kernels" lines (bench_util.h print_kernel_profile): the
// step's device time by kernel, and its idle time (the device waiting for the host inside the step);
// with --samples, the samples' kernels together under the case "<config>:average" (summed over the
// samples: divide by `samples` for the average step; scripts/gemm_floor.py does).
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "autograd/param_store.h"
#include "bench/af2_flops.h"
#include "bench/bench_util.h"
#include "kernels/attention.h"
#include "kernels/gemm.h"
#include "core/host_waits.h"
#include "core/log.h"
#include "core/philox.h"
#include "core/timer.h"
#include "data_pipeline/formats/mmcif_parser.h"
#include "data_pipeline/formats/msa.h"
#include "data_pipeline/training/training_chain.h"
#include "data_pipeline/training/training_sample.h"
#include "models/alphafold/params/af2_export.h"
#include "models/alphafold/model/alphafold.h"
#ifdef FOLDCORE_HAVE_YAML
#include "models/alphafold/model/config_yaml.h"
#endif
#include "models/alphafold/model/features.h"
#include "models/alphafold/training/step_sample.h"
#include "models/alphafold/training/keep_blocks.h"
#include "models/alphafold/training/train_step.h"
#include "models/bert/bert_trainer.h"

namespace {
using namespace foldcore;

struct Config {
  std::string precision;  // fp32, bf16, or bf16_streams (bf16 with Af2Config::bf16_training_streams)
  int64_t recompute = 0, keep = 0;  // keep: Af2Config::kKeepBlocksAuto for `auto` (both stacks)
  int64_t keep_extra = 0;            // the extra-MSA stack's (auto with keep)
  // The name in the profile lines: precision:recompute, with :keep when not 0 and :keep_extra when
  // not 0 (and not auto).
  std::string name() const {
    std::string s = precision;
    s += ':';
    s += std::to_string(recompute);
    if (keep != 0 || keep_extra != 0) {
      s += ':';
      s += keep == af2::Af2Config::kKeepBlocksAuto ? std::string("auto") : std::to_string(keep);
    }
    if (keep_extra != 0 && keep != af2::Af2Config::kKeepBlocksAuto) s += ':' + std::to_string(keep_extra);
    return s;
  }
  bool bf16_streams() const { return precision == "bf16_streams"; }
  // The autocast precision: fp32 or bf16.
  std::string compute() const { return bf16_streams() ? "bf16" : precision; }
};

struct Args {
  std::vector<int64_t> crops{64, 128, 256};
  std::vector<Config> configs{{"fp32", 0}, {"fp32", 1}, {"bf16", 0}, {"bf16", 1}};
  int64_t evoformer_blocks = 2, extra_msa_blocks = 1, iterations = 1;
  int64_t steps = 0;  // steps per case, the fastest reported; 0: 1 on the CPU, 2 on CUDA
  int64_t samples = 0;  // > 0: that many samples drawn as the trainer's, each timed once (the average step)
  std::string model_config = "configs/model/model_1.yaml";
  std::string data_dir;
  Device device = Device::cpu();
};

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> v;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) v.push_back(item);
  return v;
}

std::string shared_data_dir() {
  if (const char* d = std::getenv("FOLDCORE_SHARED_DIR")) return std::string(d) + "/data";
  return "../shared/data";
}

struct Sample : af2::StepSample {
  int64_t iterations = 1;  // recycling iterations (I − 1 without gradients)
  int64_t templates = 0;   // template slots holding a template
};

// One training sample of `chain` at `crop`. iterations > 0: that many recycling iterations, no
// templates; 0: drawn as the trainer's samples are (training_sample.h: the crop, the MSA rows,
// num_recycles uniform in 0..3 and 0..4 of the chain's templates, for sample `index`).
Sample make_sample(const data::TrainingChain& chain, int64_t crop, int64_t iterations, int64_t index = 0) {
  data::TrainingSampleConfig sc = data::TrainingSampleConfig::initial();
  sc.crop_size = crop;
  const bool drawn = iterations == 0;
  if (!drawn) {
    sc.use_templates = false;
    sc.max_templates = 0;
    sc.max_recycles = static_cast<int>(iterations - 1);
  }
  const data::FeatureDict d = data::make_training_sample(chain, sc, data::SampleKey{0, 0, index});
  Sample s;
  s.iterations = drawn ? d.at("num_recycles").to_tensor().to(DType::i64).to_vector_i64().at(0) + 1 : iterations;
  if (d.contains("template_mask")) {
    const Tensor mask = d.at("template_mask").to_tensor();  // [T, R]
    for (float m : mask.select(-1, 0).contiguous().to_vector()) s.templates += m > 0 ? 1 : 0;
  }
  std::map<std::string, Tensor> arrays;
  for (const auto& [name, a] : d.arrays())
    if (a.dtype.kind != 'S') arrays[name] = a.to_tensor();
  static_cast<af2::StepSample&>(s) =
      af2::split_step_sample(arrays, s.iterations, af2::recycled_keys(sc), "2q2k_A training sample");
  return s;
}

// `count` templates of the chain made from its own structure (the template stack's cost depends
// on the shapes only), best first, for the drawn samples.
void add_self_templates(data::TrainingChain& chain, int count) {
  const size_t n = chain.sequence.size();
  for (int t = 0; t < count; ++t) {
    data::TemplateFeatures tf;
    tf.domain_name = chain.name;
    tf.sequence = chain.sequence;
    tf.positions = chain.all_atom_positions;
    tf.masks = chain.all_atom_mask;
    tf.aatype.assign(n * 22, 0.0f);
    for (size_t i = 0; i < n; ++i) {
      const int id = data::hhblits_aa_to_id(chain.sequence[i]);
      tf.aatype[i * 22 + static_cast<size_t>(id < 0 ? data::kHhblitsUnknown : id)] = 1.0f;
    }
    tf.sum_probs = static_cast<float>(count - t);
    chain.templates.push_back(std::move(tf));
  }
  chain.validate();
}

struct Result {
  int64_t keep = 0;               // the kept blocks the reported step ran with (auto: as resolved)
  int64_t keep_extra = 0;         // the same for the extra-MSA stack
  int64_t kept_block_bytes = 0;   // auto: what the measuring step's kept block held
  int64_t kept_extra_block_bytes = 0;  // auto: the same for an extra-MSA block
  double seconds = 0, loss = 0;
  size_t step_peak = 0, peak = 0;
  HostWaits waits;  // inside the step (the bench's own synchronizes excluded)
  ops::GemmPlanStats plans;  // the step's cuBLASLt plans: made, reused
  double host_seconds = 0;  // until the step's last call returned (before the bench's synchronize)
  kernel_profile::Report kernels;  // FOLDCORE_PROFILE_KERNELS=1: the step's device time by kernel
};

// One configuration's model, run step by step (the gradients are not applied: the same weights
// every step).
struct Case {
  std::string precision;
  Device device;
  autograd::ParamStore params;
  Generator init_rng{7}, dropout_rng{11};
  std::unique_ptr<af2::AlphaFold> model;
  af2::Af2ParamTable table;
  std::map<std::string, std::vector<int64_t>> shapes;
  af2::Af2LossConfig loss_config;
  std::unique_ptr<af2::KeepBlocksAuto> keep_auto;

  Case(const af2::Af2Config& base, const Config& c, Device dev) : precision(c.compute()), device(dev), params(dev) {
    af2::Af2Config config = base;
    config.bf16_training_streams = c.bf16_streams();
    config.recompute_blocks = c.recompute;
    config.recompute_keep_blocks = c.keep;
    config.recompute_keep_extra_msa_blocks = c.keep_extra;
    config.chunk_size = 0;  // training runs unchunked, as `foldcore train` (af2_trainer.cpp)
    model = std::make_unique<af2::AlphaFold>(nn::Scope{&params, &init_rng, &dropout_rng, ""}, config);
    model->train(true);
    params.finalize();
    model->add_af2_params(table);
    shapes = af2::af2_official_shapes(table, config);
    loss_config.weights = af2::LossWeights::stage("initial", config.heads.ptm);
    keep_auto = std::make_unique<af2::KeepBlocksAuto>(*model, device);
  }

  af2::TrainStepResult run(const Sample& s) {
    return af2::af2_train_step(*model, params, table, shapes, s.features, s.last_slice, loss_config, device,
                               af2::train_precision(precision, "bench_train: --configs"), /*report_grads=*/false);
  }

  // keep `auto`: its measuring steps (one or two; keep_blocks.h), untimed.
  void settle_kept_blocks(const Sample& s) {
    while (!keep_auto->resolved()) {
      keep_auto->before_step();
      run(s);
      if (keep_auto->after_step()) log::info("bench_train: ", keep_auto->summary());
    }
  }

  Result timed_step(const Sample& s) {
    Allocator& alloc = default_allocator(device);
    profile::reset();
    synchronize(device);
    const size_t before = alloc.stats().current;
    alloc.reset_peak();
    reset_host_waits();
    kernel_profile::reset();
    const ops::GemmPlanStats plans_before = ops::gemm_plan_stats();
    WallTimer timer;
    const af2::TrainStepResult r = run(s);
    const HostWaits waits = host_waits();
    const double host_seconds = timer.seconds();
    const ops::GemmPlanStats plans_after = ops::gemm_plan_stats();
    synchronize(device);
    Result out;
    out.keep = model->config().recompute_keep_blocks;
    out.keep_extra = model->config().recompute_keep_extra_msa_blocks;
    out.kept_block_bytes = keep_auto->block_bytes();
    out.kept_extra_block_bytes = keep_auto->extra_msa_block_bytes();
    out.waits = waits;
    out.plans = {plans_after.made - plans_before.made, plans_after.reused - plans_before.reused};
    out.host_seconds = host_seconds;
    out.seconds = timer.seconds();
    out.peak = alloc.stats().peak;
    out.step_peak = out.peak - before;
    out.loss = r.loss.loss;
    if (kernel_profile::enabled()) out.kernels = kernel_profile::collect();
    return out;
  }
};

// The average training step (--samples): each sample, drawn as the trainer's are, timed once
// after an untimed step at this crop (allocator growth, GEMM plans); one "af2_step_average" line
// with the mean, the samples' iterations, templates and seconds, and the mean model FLOPs.
void run_average_case(const af2::Af2Config& config, const std::vector<Sample>& samples, const Config& cfg,
                      int64_t crop, Device device, const std::map<std::string, double>& peak_flops) {
  Case k(config, cfg, device);
  k.settle_kept_blocks(samples.front());
  k.run(samples.front());
  std::vector<double> seconds, iterations, templates;
  std::vector<kernel_profile::Report> kernels;
  double flops = 0, launches = 0;
  size_t step_peak = 0;
  for (const Sample& s : samples) {
    const Result r = k.timed_step(s);
    if (kernel_profile::enabled()) kernels.push_back(r.kernels);
    const af2::Af2Batch b0 = s.features.iteration(0);
    const double f = bench::af2_flops(config, static_cast<double>(b0.num_msa()), static_cast<double>(b0.num_extra_msa()),
                                      static_cast<double>(s.templates), static_cast<double>(crop));
    flops += (static_cast<double>(s.iterations) - 1 + 3) * f;
    seconds.push_back(r.seconds);
    iterations.push_back(static_cast<double>(s.iterations));
    templates.push_back(static_cast<double>(s.templates));
    launches += static_cast<double>(r.waits.launches);
    step_peak = std::max(step_peak, r.step_peak);
  }
  const double n = static_cast<double>(samples.size());
  double mean = 0;
  for (double x : seconds) mean += x / n;
  flops /= n;
  constexpr double kMiB = 1 << 20;
  bench::JsonLine()
      .str("bench", "train")
      .str("case", "af2_step_average")
      .str("device", device.str())
      .integer("crop", crop)
      .integer("evoformer_blocks", config.num_evoformer_blocks)
      .integer("extra_msa_blocks", config.num_extra_msa_blocks)
      .boolean("templates_enabled", config.templates.enabled)
      .str("precision", cfg.precision)
      .integer("recompute_blocks", cfg.recompute)
      .integer("recompute_keep_blocks", k.model->config().recompute_keep_blocks)
      .integer("recompute_keep_extra_msa_blocks", k.model->config().recompute_keep_extra_msa_blocks)
      .boolean("recompute_keep_blocks_auto", cfg.keep == af2::Af2Config::kKeepBlocksAuto)
      .integer("samples", static_cast<long long>(samples.size()))
      .nums("iterations", iterations)
      .nums("templates", templates)
      .nums("step_seconds", seconds)
      .num("seconds", mean)
      .num("seconds_min", *std::min_element(seconds.begin(), seconds.end()))
      .num("seconds_max", *std::max_element(seconds.begin(), seconds.end()))
      .num("step_peak_mib", static_cast<double>(step_peak) / kMiB)
      .num("model_gflop", flops / 1e9)
      .num("gflops", flops / mean / 1e9)
      .num("fraction_of_gemm_peak", flops / mean / peak_flops.at(cfg.compute()))
      .num("launches", launches / n)
      .print();
  // FOLDCORE_PROFILE_KERNELS=1: the samples' kernels together ("<config>:average", calls and times
  // summed over the `samples` steps; scripts/gemm_floor.py divides by it).
  if (!kernels.empty()) {
    double wall = 0;
    for (double x : seconds) wall += x;
    const kernel_profile::Report merged = bench::merge_kernel_reports(kernels);
    bench::print_kernel_profile("train_kernels", cfg.name() + ":average", crop, wall, &merged);
  }
}

// `steps` steps of the same sample, the fastest reported.
Result run_case(const af2::Af2Config& base, const Sample& s, const Config& c, Device device, int64_t steps = 1) {
  Case k(base, c, device);
  k.settle_kept_blocks(s);
  Result best;
  for (int64_t step = 0; step < steps; ++step) {
    Result out = k.timed_step(s);
    if (step == 0 || out.seconds < best.seconds) best = std::move(out);
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  Args args;
  args.data_dir = shared_data_dir();
  try {
    for (int i = 1; i < argc; ++i) {
      const std::string k = argv[i];
      FC_CHECK(i + 1 < argc, "bench_train: option ", k, " needs a value");
      const std::string v = argv[++i];
      if (k == "--crops") {
        args.crops.clear();
        for (const std::string& c : split(v)) args.crops.push_back(std::stoll(c));
      } else if (k == "--configs") {
        args.configs.clear();
        for (const std::string& c : split(v)) {
          std::vector<std::string> parts;
          for (size_t start = 0;;) {
            const size_t colon = c.find(':', start);
            parts.push_back(c.substr(start, colon - start));
            if (colon == std::string::npos) break;
            start = colon + 1;
          }
          FC_CHECK(parts.size() >= 2 && parts.size() <= 4, "bench_train: --configs entry '", c,
                   "' is not precision:recompute_blocks[:keep_blocks[:keep_extra_msa_blocks]] (e.g. bf16:1, "
                   "bf16:1:24, bf16:1:48:4 or bf16:1:auto)");
          const bool keep_auto = parts.size() >= 3 && parts[2] == "auto";
          FC_CHECK(!keep_auto || parts.size() == 3, "bench_train: --configs entry '", c,
                   "': auto decides the extra-MSA blocks too");
          Config cfg{parts[0], std::stoll(parts[1]),
                     keep_auto ? af2::Af2Config::kKeepBlocksAuto : parts.size() >= 3 ? std::stoll(parts[2]) : 0,
                     keep_auto ? af2::Af2Config::kKeepBlocksAuto : parts.size() == 4 ? std::stoll(parts[3]) : 0};
          FC_CHECK(cfg.recompute >= 0 && (keep_auto || (cfg.keep >= 0 && cfg.keep_extra >= 0)),
                   "bench_train: --configs entry '", c, "': negative count");
          args.configs.push_back(cfg);
        }
      } else if (k == "--evoformer_blocks") {
        args.evoformer_blocks = std::stoll(v);
      } else if (k == "--extra_msa_blocks") {
        args.extra_msa_blocks = std::stoll(v);
      } else if (k == "--iterations") {
        args.iterations = std::stoll(v);
      } else if (k == "--steps") {
        args.steps = std::stoll(v);
      } else if (k == "--samples") {
        args.samples = std::stoll(v);
      } else if (k == "--model_config") {
        args.model_config = v;
      } else if (k == "--data_dir") {
        args.data_dir = v;
      } else if (k == "--device") {
        args.device = Device::parse(v);
      } else {
        FC_THROW("bench_train: unknown option ", k);
      }
    }
    FC_CHECK(args.iterations >= 1, "bench_train: --iterations ", args.iterations, " (must be >= 1)");
    FC_CHECK(args.steps >= 0, "bench_train: --steps ", args.steps, " (must be >= 1; 0 or unset: the default)");
    if (args.device.is_cuda()) FC_CHECK(cuda_available(), "bench_train: --device cuda but no CUDA device is usable");

#ifdef FOLDCORE_HAVE_YAML
    af2::Af2Config config = af2::load_af2_config(args.model_config);
#else
    // A build without yaml-cpp (the portable GPU build): the built-in model_1_ptm config, the same
    // trunk and structure-module widths as model_1 plus the TM head.
    FC_CHECK(args.model_config == Args{}.model_config, "bench_train: --model_config ", args.model_config,
             " needs yaml-cpp, which this build lacks (without it: the built-in model_1_ptm widths)");
    af2::Af2Config config;
#endif
    FC_CHECK(args.samples >= 0, "bench_train: --samples ", args.samples, " (must be >= 0)");
    config.num_evoformer_blocks = args.evoformer_blocks;
    config.num_extra_msa_blocks = args.extra_msa_blocks;
    // Fixed samples have no templates; drawn ones (--samples) as many as training draws, with the
    // model config's template stack.
    config.templates.enabled = config.templates.enabled && args.samples > 0;
    af2::validate_af2_config(config);

    const data::Structure structure = data::read_mmcif(args.data_dir + "/mmcifs/2q2k.cif");
    data::TrainingChain chain = data::training_chain_from_mmcif(structure, "A", args.data_dir + "/2q2k_A/alignments");
    if (config.templates.enabled) add_self_templates(chain, 4);

    // The dense-GEMM peak per compute dtype; on the CPU one fp32 sgemm peak serves both (bf16
    // GEMMs run through fp32 there). Best of 3, repeated 3 times: the largest (a shared machine's
    // load only ever lowers it).
    std::map<std::string, double> peak_flops;
    for (const Config& cfg : args.configs) {
      const std::string precision = cfg.compute();
      const std::string key = args.device.is_cuda() ? precision : "fp32";
      if (!peak_flops.count(key)) {
        double best = 0;
        for (int rep = 0; rep < 3; ++rep)
          best = std::max(best, bert::measure_gemm_peak_flops(
                                    args.device, af2::train_precision(key, "bench_train: --configs")));
        peak_flops[key] = best;
        bench::JsonLine()
            .str("bench", "train")
            .str("case", "gemm_peak")
            .str("device", args.device.str())
            .str("precision", key)
            .num("tflops", best / 1e12)
            .print();
      }
      peak_flops[precision] = peak_flops[key];
    }
    {  // warm-up: one small step (code paths, thread pool, allocator)
      const Sample s = make_sample(chain, 16, 1);
      run_case(config, s, Config{args.configs.front().precision, 0, 0}, args.device);
    }
    constexpr double kMiB = 1 << 20;
    for (const int64_t crop : args.crops) {
      if (args.samples > 0) {
        std::vector<Sample> samples;
        for (int64_t i = 0; i < args.samples; ++i) samples.push_back(make_sample(chain, crop, 0, i));
        for (const Config& cfg : args.configs) run_average_case(config, samples, cfg, crop, args.device, peak_flops);
        continue;
      }
      const Sample s = make_sample(chain, crop, args.iterations);
      const af2::Af2Batch b0 = s.features.iteration(0);
      const double f = bench::af2_flops(config, static_cast<double>(b0.num_msa()),
                                        static_cast<double>(b0.num_extra_msa()), 0.0, static_cast<double>(crop));
      const double model_flops = (static_cast<double>(args.iterations) - 1 + 3) * f;
      for (const Config& cfg : args.configs) {
        const std::string precision = cfg.compute();
        // On CUDA the first step at a new crop also pays for allocator growth and cuBLASLt's choice
        // of algorithms for the new shapes: two steps, the faster one reported.
        const int64_t steps = args.steps > 0 ? args.steps : args.device.is_cuda() ? 2 : 1;
        const Result r = run_case(config, s, cfg, args.device, steps);
        const double peak = peak_flops.at(precision);
        bench::JsonLine()
            .str("bench", "train")
            .str("case", "af2_step")
            .str("device", args.device.str())
            .str("attention_kernel",
                 args.device.is_cuda() ? ops::attention_kernel_name(ops::attention_kernel()) : "cpu")
            .str("attention_bwd_form", !args.device.is_cuda() ? "cpu" : ops::attention_bwd_row_form() ? "rows" : "scores")
            .str("attention_bwd", !args.device.is_cuda() ? "cpu" : ops::attention_bwd_composed() ? "composed" : "fused")
            .integer("crop", crop)
            .integer("msa_rows", b0.num_msa())
            .integer("extra_msa_rows", b0.num_extra_msa())
            .integer("evoformer_blocks", config.num_evoformer_blocks)
            .integer("extra_msa_blocks", config.num_extra_msa_blocks)
            .integer("iterations", args.iterations)
            .str("precision", cfg.precision)
            .integer("recompute_blocks", cfg.recompute)
            .integer("recompute_keep_blocks", r.keep)
            .integer("recompute_keep_extra_msa_blocks", r.keep_extra)
            .boolean("recompute_keep_blocks_auto", cfg.keep == af2::Af2Config::kKeepBlocksAuto)
            .num("kept_block_mib", static_cast<double>(r.kept_block_bytes) / kMiB)
            .num("kept_extra_msa_block_mib", static_cast<double>(r.kept_extra_block_bytes) / kMiB)
            .num("seconds", r.seconds)
            .num("step_peak_mib", static_cast<double>(r.step_peak) / kMiB)
            .num("peak_alloc_mib", static_cast<double>(r.peak) / kMiB)
            .num("model_gflop", model_flops / 1e9)
            .num("gflops", model_flops / r.seconds / 1e9)
            .num("fraction_of_gemm_peak", model_flops / r.seconds / peak)
            .num("loss", r.loss)
            .integer("host_waits", r.waits.waits())
            .integer("copies_to_host", r.waits.copies_to_host)
            .integer("staged_copies_to_device", r.waits.staged_copies_to_device)
            .num("host_wait_seconds", static_cast<double>(r.waits.wait_ns) / 1e9)
            .num("host_issue_seconds", r.host_seconds - static_cast<double>(r.waits.wait_ns) / 1e9)
            .integer("launches", r.waits.launches)
            .integer("gemm_plans_made", r.plans.made)
            .integer("gemm_plans_reused", r.plans.reused)
            .print();
        bench::print_profile("train_profile", cfg.name(), crop);
        bench::print_kernel_profile("train_kernels", cfg.name(), crop, r.seconds,
                                    &r.kernels);
      }
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
  return 0;
}
