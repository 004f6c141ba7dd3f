// Layout copies of the AlphaFold2 step at crop 256 (Tensor::copy_ between views: what contiguous(),
// the permutes of the modules and their backward nodes run): GB/s (bytes read + written) and the
// ratio to a plain device-to-device copy of the same bytes measured in the same run (the bandwidth
// roofline). On CUDA the copies whose innermost dim has unit stride on both sides (runs) are timed
// twice, side by side: by vectors of a run (`ms`, the default path) and element by element as before
// that path (`element_ms`, cuda_set_copy_runs(false)), with `speedup` = element_ms / ms.
//   bench_copy [--device cpu|cuda] [--quick|--full]   (--quick: crop 128 shapes)
// One JSON line per case and dtype.
#include <string>
#include <vector>

#include "bench/bench_util.h"
#include "core/cuda_backend.h"
#include "core/random.h"

namespace foldcore {
namespace {

struct Case {
  std::string name;
  Shape shape;             // the source's contiguous shape
  std::vector<int> perm;   // the view copied into a contiguous tensor (gather) ...
  bool scatter = false;    // ... or a contiguous tensor copied into the permuted view (a permute's backward)
  bool run = false;        // the innermost dim keeps unit stride on both sides
};

void run_case(const Case& k, DType dt, Device dev, int iters) {
  Generator gen(5);
  const Tensor src = randn(k.shape, gen, 0, 1, dt, dev);
  const Tensor view = src.permute(k.perm);
  Tensor dst = Tensor::empty(view.shape(), dt, dev);
  Tensor base = Tensor::empty(k.shape, dt, dev);
  const Tensor plain_src = Tensor::empty(k.shape, dt, dev);
  Tensor plain_dst = Tensor::empty(k.shape, dt, dev);
  const auto copy = [&] {
    if (k.scatter)
      base.permute(k.perm).copy_(dst);
    else
      dst.copy_(view);
  };
  const double bytes = 2.0 * static_cast<double>(src.nbytes());
  const double plain_ms = bench::time_ms(dev, [&] { plain_dst.copy_(plain_src); }, 2, iters);
  const double ms = bench::time_ms(dev, copy, 2, iters);
  bench::JsonLine line;
  line.str("bench", "copy")
      .str("case", k.name)
      .str("device", dev.str())
      .str("dtype", std::string(dtype_name(dt)))
      .str("shape", k.shape.str())
      .num("ms", ms)
      .num("gbs", bytes / (ms * 1e6))
      .num("plain_copy_gbs", bytes / (plain_ms * 1e6))
      .num("ratio_to_plain_copy", plain_ms / ms);
  if (dev.is_cuda() && k.run) {
    detail::cuda_set_copy_runs(false);
    const double element_ms = bench::time_ms(dev, copy, 2, iters);
    detail::cuda_set_copy_runs(true);
    line.num("element_ms", element_ms).num("speedup", element_ms / ms);
  }
  line.print();
}

}  // namespace
}  // namespace foldcore

int main(int argc, char** argv) {
  using namespace foldcore;
  try {
    const bench::BenchArgs a = bench::parse_bench_args(argc, argv, "bench_copy");
    const int64_t n = a.full ? 256 : 128, c = 32, cz = 128;
    const std::vector<Case> cases = {
        // the outer product mean's products [i, c, j, e] → [i, j, c, e] (its forward), and back
        {"opm_outer_to_rows", Shape{n, c, n, c}, {0, 2, 1, 3}, false, true},
        {"opm_outer_scatter", Shape{n, c, n, c}, {0, 2, 1, 3}, true, true},
        // a pair's transpose in (i, j) with the channel kept innermost (the ending node, the
        // incoming triangle update), and its backward
        {"pair_transpose_c_last", Shape{n, n, cz}, {1, 0, 2}, false, true},
        {"pair_transpose_scatter", Shape{n, n, cz}, {1, 0, 2}, true, true},
        // to and from channel-major (tiled transposes: through shared memory on CUDA; no runs)
        {"pair_to_channel_major", Shape{n, n, cz}, {2, 0, 1}, false, false},
        {"pair_from_channel_major", Shape{cz, n, n}, {1, 2, 0}, false, false},
    };
    const int iters = a.device.is_cuda() ? 20 : 3;
    for (const Case& k : cases)
      for (DType dt : {DType::bf16, DType::f32}) run_case(k, dt, a.device, iters);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_copy: %s\n", e.what());
    return 1;
  }
  return 0;
}
