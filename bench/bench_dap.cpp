// DAP training benchmark: an Evoformer stack (model_1 widths) forward + backward split over the
// ranks of the job by dynamic axial parallelism (models/alphafold/parallel/model_parallel.h), with its
// gathers and all-to-alls overlapped with the work that does not need them (FastFold's duality
// async operations) and completed where they are issued, the two modes interleaved in one run:
//   mpirun -np 2 build/bench/bench_dap [--device cpu|cuda] [--n-res 64] [--n-seq 64] [--blocks 2]
//                                      [--recompute 1] [--iters 5] [--templates T] [--precision fp32|bf16]
// --precision bf16: the forwards under bf16 autocast, as `foldcore train --precision bf16` runs them.
// A third line ("dap_train_traffic") gives what one rank received in the DAP collectives of one
// step (forward, recomputation and backward) by collective and element type (dist/dap.h's
// traffic()), to set beside scripts/scaling_model.py --dap-block.
// --templates T (> 0): the template embedding instead (model_1 widths: 2 pair blocks, T synthetic
// templates, all computed), forward + backward as a training step runs it, whole on every rank
// (what DAP training did before) against split by rows (TemplateEmbedder::forward_dap, with the
// template parameters' gradient sum over the ranks), interleaved; one JSON line per mode with the
// slowest rank's median seconds and the largest rank's allocator peak above what was allocated
// before (each mode's own, one extra step each), and on the split line both ratios.
// One JSON line per mode from rank 0: the median over the steps of the slowest rank's seconds,
// and on the overlap line the speed-up over no overlap measured in the same run; peak_mb is the
// largest rank's allocator peak during the steps above what was allocated before them (the
// parameters and inputs), the same for both modes (--recompute 0 shows what recomputation saves). Sizes must divide
// by the number of ranks. On the CPU, MPI moves data only inside MPI calls (no progress thread), so
// little of the communication can hide behind compute there; with NCCL the collectives run on
// their own stream.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <optional>
#include <tuple>
#include <random>
#include <string>
#include <vector>

#include "autograd/engine.h"
#include "autograd/grad_mode.h"
#include "autograd/param_store.h"
#include "bench/bench_util.h"
#include "core/error.h"
#include "core/random.h"
#include "core/timer.h"
#include "dist/dap.h"
#include "dist/runtime.h"
#include "models/alphafold/model/config.h"
#include "models/alphafold/evoformer/evoformer.h"
#include "models/alphafold/evoformer/template.h"
#include "models/alphafold/model/features.h"
#include "models/alphafold/model/synthetic_target.h"
#include "models/alphafold/parallel/model_parallel_dist.h"

using namespace foldcore;

namespace {

struct Args {
  std::string device = "cpu";
  int64_t n_res = 64, n_seq = 64, blocks = 2, recompute = 1, templates = 0;
  int iters = 5;
  std::string precision = "fp32";
};

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    auto value = [&]() -> std::string {
      FC_CHECK(i + 1 < argc, "bench_dap: ", k, " needs a value");
      return argv[++i];
    };
    if (k == "--device") a.device = value();
    else if (k == "--n-res") a.n_res = std::stoll(value());
    else if (k == "--n-seq") a.n_seq = std::stoll(value());
    else if (k == "--blocks") a.blocks = std::stoll(value());
    else if (k == "--recompute") a.recompute = std::stoll(value());
    else if (k == "--iters") a.iters = std::stoi(value());
    else if (k == "--templates") a.templates = std::stoll(value());
    else if (k == "--precision") a.precision = value();
    else FC_THROW("bench_dap: unknown argument ", k);
  }
  FC_CHECK(a.n_res > 0 && a.n_seq > 0 && a.blocks > 0 && a.recompute >= 0 && a.iters > 0 && a.templates >= 0,
           "bench_dap: sizes, blocks and iters must be positive");
  FC_CHECK(a.precision == "fp32" || a.precision == "bf16", "bench_dap: --precision fp32|bf16, got ", a.precision);
  return a;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// The slowest rank's value of x (seconds) or the largest (peaks): max over the ranks.
double max_over(dist::Communicator& world, double x, Device dev) {
  Tensor t = Tensor::full({1}, x, DType::f32, dev);
  world.all_reduce(t, dist::ReduceOp::max);
  return static_cast<double>(t.to(Device::cpu()).to_vector()[0]);
}

// --templates: the template embedding's training step, whole on every rank vs split by rows.
void run_templates(const Args& a, const Device dev, dist::Communicator& world) {
  const int p = world.size();
  autograd::ParamStore ps(dev);
  Generator init(1);
  const af2::Af2Config cfg;  // model_1 widths
  af2::TemplateEmbedder te(nn::Scope{&ps, &init, nullptr, "template_embedding"}, cfg.evoformer.c_z, cfg.templates);
  te.train(true);
  te.set_recompute_blocks(a.recompute);
  ps.finalize();
  af2::SyntheticTargetOptions o;
  o.num_res = a.n_res;
  o.msa_rows = 8;
  o.max_templates = a.templates;
  o.templates = a.templates;
  std::mt19937 rng(5);
  const af2::Af2Batch b = af2::synthetic_target(o, rng).iteration(0);
  const af2::TemplateInputs in{b.template_aatype.to(dev),         b.template_all_atom_positions.to(dev),
                               b.template_all_atom_mask.to(dev),  b.template_pseudo_beta.to(dev),
                               b.template_pseudo_beta_mask.to(dev), b.template_mask.to(dev)};
  Generator gen(5);
  const int64_t n = a.n_res, cz = cfg.evoformer.c_z;
  const autograd::Variable z(randn({n, n, cz}, gen).to(dev));
  const Tensor gz = randn({n, n, cz}, gen).to(dev);
  const Tensor pair_mask = Tensor::full({n, n}, 1.0, DType::f32, dev);
  const af2::ModelParallel mp = af2::make_model_parallel(&world, nullptr, true);
  auto step = [&](bool split) {
    synchronize(dev);
    world.barrier();
    const WallTimer t;
    const autograd::Variable out =
        split ? te.forward_dap(z, in, pair_mask, 0, *mp.dap)
              : autograd::bias_dropout_residual(te.forward(z, in, pair_mask, 0), autograd::Variable(), z, {}, false);
    autograd::backward({out}, {gz});
    if (split) mp.dap->all_reduce_sum(ps.grads());  // the template parameters' partial gradients
    synchronize(dev);
    return max_over(world, t.seconds(), dev);
  };
  step(false);  // warm-up of both modes
  step(true);
  std::vector<double> t_whole, t_split;
  for (int i = 0; i < a.iters; ++i) {  // interleaved: both modes see the same machine load
    t_whole.push_back(step(false));
    t_split.push_back(step(true));
  }
  double peak_mb[2];
  for (bool split : {false, true}) {
    synchronize(dev);
    bench::reset_peak(dev);
    const size_t base = default_allocator(dev).stats().current;
    step(split);
    peak_mb[split] = max_over(world, static_cast<double>(bench::peak_bytes(dev) - base) / (1 << 20), dev);
  }
  if (world.rank() == 0) {
    const double whole = median(t_whole), split = median(t_split);
    for (bool sp : {false, true}) {
      bench::JsonLine j;
      j.str("bench", "dap_train_templates")
          .str("device", dev.str())
          .str("backend", std::string(world.backend()))
          .integer("dap", p)
          .integer("n_res", n)
          .integer("templates", a.templates)
          .integer("pair_blocks", cfg.templates.num_pair_blocks)
          .integer("recompute_blocks", a.recompute)
          .str("mode", sp ? "split by rows" : "whole on every rank")
          .num("step_s", sp ? split : whole)
          .num("peak_mb", peak_mb[sp]);
      if (sp) j.num("speedup_vs_whole", whole / split).num("peak_ratio_vs_whole", peak_mb[1] / peak_mb[0]);
      j.print();
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  dist::Runtime rt(argc, argv);
  try {
    const Args a = parse(argc, argv);
    const Device dev = a.device == "cpu" ? Device::cpu() : rt.device(DeviceType::cuda);
    if (dev.is_cuda()) set_device(dev);
    auto world = rt.world(dev);
    const int p = world->size();
    if (a.templates > 0) {
      run_templates(a, dev, *world);
      return 0;
    }
    FC_CHECK(a.n_res % p == 0 && a.n_seq % p == 0, "bench_dap: --n-res ", a.n_res, " and --n-seq ", a.n_seq,
             " must divide by the ", p, " ranks");
    autograd::ParamStore ps(dev);
    Generator init(1);
    const af2::Af2Config cfg;  // model_1 widths
    af2::EvoformerStack stack(nn::Scope{&ps, &init, nullptr, "evoformer"}, cfg.evoformer, a.blocks);
    stack.train(true);
    stack.set_recompute_blocks(a.recompute);
    ps.finalize();
    Generator gen(5);
    const int64_t s = a.n_seq, n = a.n_res, cm = cfg.evoformer.c_m, cz = cfg.evoformer.c_z;
    const autograd::Variable m(randn({s, n, cm}, gen).to(dev)), z(randn({n, n, cz}, gen).to(dev));
    const Tensor gm = randn({s, n, cm}, gen).to(dev), gz = randn({n, n, cz}, gen).to(dev);
    const Tensor msa_mask = Tensor::full({s, n}, 1.0, DType::f32, dev);
    const Tensor pair_mask = Tensor::full({n, n}, 1.0, DType::f32, dev);
    const af2::ModelParallel overlapped = af2::make_model_parallel(world.get(), nullptr, true);
    const af2::ModelParallel plain = af2::make_model_parallel(world.get(), nullptr, false);

    // One step: forward + backward, the slowest rank's seconds.
    auto step = [&](const af2::ModelParallel& mp) {
      stack.set_model_parallel(mp);
      synchronize(dev);
      world->barrier();
      const WallTimer t;
      autograd::Variable mo, zo;
      {
        std::optional<autograd::AutocastGuard> autocast;
        if (a.precision == "bf16") autocast.emplace(DType::bf16);
        std::tie(mo, zo) = stack.forward(m, z, msa_mask, pair_mask, 0);
      }
      autograd::backward({mo, zo}, {gm, gz});
      synchronize(dev);
      Tensor secs = Tensor::full({1}, t.seconds(), DType::f32, dev);
      world->all_reduce(secs, dist::ReduceOp::max);
      return static_cast<double>(secs.to(Device::cpu()).to_vector()[0]);
    };
    step(overlapped);  // warm-up of both modes
    step(plain);
    synchronize(dev);
    bench::reset_peak(dev);
    const size_t base = default_allocator(dev).stats().current;
    std::vector<double> t_on, t_off;
    for (int i = 0; i < a.iters; ++i) {  // interleaved: both modes see the same machine load
      t_on.push_back(step(overlapped));
      t_off.push_back(step(plain));
    }
    Tensor peak = Tensor::full({1}, static_cast<double>(bench::peak_bytes(dev) - base) / (1 << 20), DType::f32, dev);
    dist::dap::reset_traffic();
    step(overlapped);
    const std::vector<dist::dap::TrafficEntry> traffic = dist::dap::traffic();
    world->all_reduce(peak, dist::ReduceOp::max);
    const double peak_mb = static_cast<double>(peak.to(Device::cpu()).to_vector()[0]);
    if (world->rank() == 0) {
      const double on = median(t_on), off = median(t_off);
      for (bool ov : {false, true}) {
        bench::JsonLine j;
        j.str("bench", "dap_train")
            .str("device", dev.str())
            .str("backend", std::string(world->backend()))
            .integer("dap", p)
            .integer("n_res", n)
            .integer("n_seq", s)
            .integer("blocks", a.blocks)
            .integer("recompute_blocks", a.recompute)
            .str("precision", a.precision)
            .str("comm", ov ? "overlapped" : "in place")
            .num("step_s", ov ? on : off)
            .num("peak_mb", peak_mb);
        if (ov) j.num("speedup_vs_in_place", off / on);
        j.print();
      }
      // One step's traffic of rank 0 (every rank's is the same): MB per collective and dtype.
      bench::JsonLine j;
      j.str("bench", "dap_train_traffic")
          .integer("dap", p)
          .integer("n_res", n)
          .integer("n_seq", s)
          .integer("blocks", a.blocks)
          .integer("recompute_blocks", a.recompute)
          .str("precision", a.precision);
      double total = 0;
      for (const dist::dap::TrafficEntry& e : traffic) {
        j.num(e.collective + "_" + e.dtype + "_mb", e.bytes / 1e6).integer(e.collective + "_" + e.dtype + "_calls", e.calls);
        total += e.bytes;
      }
      j.num("total_mb_per_step", total / 1e6).num("mb_per_block_per_step", total / 1e6 / static_cast<double>(a.blocks));
      j.print();
    }
  } catch (const Error& e) {
    std::fprintf(stderr, "bench_dap: %s\n", e.what());
    return 1;
  }
  return 0;
}
