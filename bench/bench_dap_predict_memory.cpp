// Memory of one rank of `predict --dap P` against the preflight's estimate for it
// (apps/memory_estimate.h, its `dap` argument), and against one process:
//   mpirun -np P build/bench/bench_dap_predict_memory [--n-res 192] [--chunk 16] [--precision fp32|bf16]
//                                                     [--templates 0] [--clusters 16] [--extra 16]
//                                                     [--one-process]
// model_1_ptm widths with 1 Evoformer + 1 extra-MSA block (a block's activations die before the
// next one starts), no recycling, a synthetic target with 16 MSA clusters (--clusters S), 16 extra rows (--extra E)
// and 4 template slots (--templates T of them computed), the pair logits kept (on the CPU they are on the allocator),
// CPU tensors. --one-process: the same prediction without DAP on every rank (run it with -np 1).
// One JSON line from rank 0: every rank's allocator peak above parameters and features, in fp32
// pair units N²·c_z·4 and MiB, and the estimate in the same units. With FOLDCORE_PROFILE=1, rank 0
// also prints one line per stage (bench_util.h's print_profile): a stage with peak_raised_mib > 0
// holds a new peak, the innermost one among nested stages.
// The measurement is apps/memory_probe.h's, which tests/dist/test_dap_memory_estimate_mpi checks.
#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "apps/memory_probe.h"
#include "bench/bench_util.h"
#include "core/error.h"
#include "core/profile.h"
#include "dist/runtime.h"
#include "models/alphafold/parallel/model_parallel_dist.h"

using namespace foldcore;

namespace {

struct Args {
  int64_t n_res = 192, chunk = 16, templates = 0, clusters = 16, extra = 16;
  std::string precision = "fp32";
  bool one_process = false;
};

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    auto value = [&]() -> std::string {
      FC_CHECK(i + 1 < argc, "bench_dap_predict_memory: ", k, " needs a value");
      return argv[++i];
    };
    if (k == "--n-res") a.n_res = std::stoll(value());
    else if (k == "--chunk") a.chunk = std::stoll(value());
    else if (k == "--templates") a.templates = std::stoll(value());
    else if (k == "--extra") a.extra = std::stoll(value());
    else if (k == "--clusters") a.clusters = std::stoll(value());
    else if (k == "--precision") a.precision = value();
    else if (k == "--one-process") a.one_process = true;
    else FC_THROW("bench_dap_predict_memory: unknown argument ", k);
  }
  FC_CHECK(a.n_res > 0 && a.chunk >= 0 && a.templates >= 0 && a.templates <= 4 && a.extra >= 1 &&
               a.clusters >= 1,
           "bench_dap_predict_memory: --n-res > 0, --chunk >= 0, --templates 0..4, --clusters >= 1, --extra >= 1");
  FC_CHECK(a.precision == "fp32" || a.precision == "bf16", "bench_dap_predict_memory: --precision fp32|bf16");
  return a;
}

}  // namespace

int main(int argc, char** argv) {
  dist::Runtime rt(argc, argv);
  try {
    const Args a = parse(argc, argv);
    const std::unique_ptr<dist::Communicator> world = rt.world(Device::cpu());
    const int p = a.one_process ? 1 : world->size();
    profile::reset();
    const apps::MemoryProbeResult m = apps::measure_predict_memory(
        {.n_res = a.n_res, .chunk = a.chunk, .clusters = a.clusters, .extra = a.extra, .templates = a.templates, .precision = a.precision},
        p > 1 ? af2::make_model_parallel(world.get(), nullptr) : af2::ModelParallel{});
    const double pair = m.pair_unit_bytes;
    // Every rank's peak in MiB (f32 holds them to well under 0.1 MiB at these sizes).
    const Tensor mine = Tensor::from_vector(
        {static_cast<float>(m.activation_bytes / (1024.0 * 1024.0))}, {1}, DType::f32);
    const Tensor all = Tensor::empty({world->size()}, DType::f32);
    world->all_gather(mine, all);
    std::vector<double> peaks;
    for (float v : all.to_vector()) peaks.push_back(static_cast<double>(v) * 1024.0 * 1024.0);
    if (world->rank() == 0) {
      double worst = 0;
      std::vector<double> units, mib;
      for (double b : peaks) {
        worst = std::max(worst, b);
        units.push_back(b / pair);
        mib.push_back(b / (1024.0 * 1024.0));
      }
      const double est = static_cast<double>(m.estimate.activation_bytes);
      bench::JsonLine()
          .str("bench", "dap_predict_memory")
          .integer("n_res", a.n_res)
          .integer("dap", p)
          .integer("chunk", a.chunk)
          .integer("templates", a.templates)
          .integer("clusters", a.clusters)
          .integer("extra", a.extra)
          .str("precision", a.precision)
          .nums("rank_peak_pair_units", units)
          .nums("rank_peak_mib", mib)
          .num("estimate_pair_units", est / pair)
          .num("estimate_over_peak", est / worst)
          .print();
      const std::string case_name = "dap" + std::to_string(p) + "_chunk" + std::to_string(a.chunk);
      bench::print_profile("dap_predict_memory_profile", case_name, a.n_res);
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_dap_predict_memory: rank %d: error: %s\n", rt.rank(), e.what());
    return 1;
  }
}
