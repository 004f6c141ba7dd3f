// Collective bandwidth and latency of the dist layer, in nccl-tests' terms, one JSON line per
// (collective, size) from rank 0:
//   mpirun -np 2 build/bench/bench_comm [--device cpu|cuda] [--min_bytes 8] [--max_bytes 64M]
//                                       [--ops all_reduce,all_gather,…] [--dtype f32|bf16] [--quick]
//
// size (bytes) follows nccl-tests: all_reduce/broadcast: the buffer; all_gather: the gathered
// output (each rank sends size/n); reduce_scatter: the input (each rank keeps size/n);
// all_to_all: each rank's send buffer; send_recv: the message (ring: every rank sends to the next).
//   time   mean per operation over `iters` back-to-back synchronous calls, max over the ranks
//   algbw  size / time
//   busbw  algbw × factor: all_reduce 2(n−1)/n; reduce_scatter, all_gather, all_to_all (n−1)/n;
//          broadcast, send_recv 1 — the bandwidth each link must carry, comparable to the hardware's.
// Results are checked once per case (an all_reduce of ones must give n), so a wrong collective
// cannot report a speed.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/timer.h"
#include "dist/runtime.h"

using namespace foldcore;

namespace {

struct Args {
  std::string device = "cpu";
  int64_t min_bytes = 8, max_bytes = int64_t{64} << 20;
  std::vector<std::string> ops = {"all_reduce", "reduce_scatter", "all_gather", "all_to_all", "broadcast", "send_recv"};
  DType dtype = DType::f32;
  bool quick = false;
};

int64_t parse_bytes(const std::string& s) {
  char* end = nullptr;
  double v = std::strtod(s.c_str(), &end);
  const std::string unit = end ? end : "";
  if (unit == "K") v *= 1024;
  else if (unit == "M") v *= 1 << 20;
  else if (unit == "G") v *= 1 << 30;
  else FC_CHECK(unit.empty(), "bench_comm: bad size '", s, "' (use e.g. 8, 64K, 64M)");
  return static_cast<int64_t>(v);
}

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    auto value = [&]() -> std::string {
      FC_CHECK(i + 1 < argc, "bench_comm: ", k, " needs a value");
      return argv[++i];
    };
    if (k == "--device") a.device = value();
    else if (k == "--min_bytes") a.min_bytes = parse_bytes(value());
    else if (k == "--max_bytes") a.max_bytes = parse_bytes(value());
    else if (k == "--dtype") a.dtype = value() == "bf16" ? DType::bf16 : DType::f32;
    else if (k == "--quick") a.quick = true;
    else if (k == "--ops") {
      a.ops.clear();
      std::stringstream ss(value());
      for (std::string op; std::getline(ss, op, ',');) a.ops.push_back(op);
    } else FC_THROW("bench_comm: unknown argument ", k);
  }
  return a;
}

double bus_factor(const std::string& op, int n) {
  if (op == "all_reduce") return 2.0 * (n - 1) / n;
  if (op == "reduce_scatter" || op == "all_gather" || op == "all_to_all") return static_cast<double>(n - 1) / n;
  return 1.0;
}

}  // namespace

int main(int argc, char** argv) {
  dist::Runtime rt(argc, argv);
  try {
    const Args args = parse(argc, argv);
    const Device dev = rt.device(args.device == "cpu" ? DeviceType::cpu : DeviceType::cuda);
    auto world = rt.world(dev);
    const int n = world->size(), me = world->rank();
    const int64_t esize = static_cast<int64_t>(dtype_size(args.dtype));
    // Sizes must split into n equal blocks of whole elements for the block collectives.
    const int64_t quantum = esize * n;
    for (const std::string& op : args.ops) {
      for (int64_t bytes = args.min_bytes; bytes <= args.max_bytes; bytes *= 2) {
        const int64_t size = std::max(quantum, bytes / quantum * quantum);
        const int64_t count = size / esize;
        Tensor full = Tensor::full({count}, 1.0, args.dtype, dev);
        Tensor block = Tensor::full({count / n}, 1.0, args.dtype, dev);
        Tensor out = Tensor::empty({count}, args.dtype, dev);
        std::function<void()> run;
        if (op == "all_reduce") run = [&] { world->all_reduce(full); };
        else if (op == "reduce_scatter") run = [&] { world->reduce_scatter(full, block); };
        else if (op == "all_gather") run = [&] { world->all_gather(block, out); };
        else if (op == "all_to_all") run = [&] { world->all_to_all(full, out); };
        else if (op == "broadcast") run = [&] { world->broadcast(full, 0); };
        else if (op == "send_recv")
          run = [&] {
            dist::CommHandle r = world->recv_async(out, (me + n - 1) % n);
            world->send(full, (me + 1) % n);
            r.wait();
          };
        else FC_THROW("bench_comm: unknown collective '", op, "'");
        // Check once: all_reduce of ones is n everywhere; the other ops move ones around.
        run();
        synchronize(dev);
        if (op == "all_reduce") {
          const float v = full.narrow(0, count - 1, 1).to(Device::cpu()).to(DType::f32).item();
          FC_CHECK(v == static_cast<float>(n), "bench_comm: all_reduce gave ", v, ", expected ", n);
          full.fill_(0.0);  // keep values bounded over the timed repetitions (0 + 0 = 0)
        } else if (op == "all_gather" || op == "all_to_all" || op == "send_recv") {
          const float v = out.narrow(0, op == "send_recv" ? count - 1 : 0, 1).to(Device::cpu()).to(DType::f32).item();
          FC_CHECK(v == 1.f, "bench_comm: ", op, " moved ", v, " instead of 1");
        }
        // About 0.2 s per case (0.05 s with --quick), 5 … 1000 repetitions.
        world->barrier();
        WallTimer probe;
        run();
        synchronize(dev);
        const double probe_s = std::max(probe.millis() / 1000.0, 1e-6);
        Tensor probe_t = Tensor::full({1}, probe_s, DType::f32, dev);  // every rank: the same count
        world->all_reduce(probe_t, dist::ReduceOp::max);
        const double slowest = probe_t.to(Device::cpu()).item();
        const int iters = static_cast<int>(std::clamp((args.quick ? 0.05 : 0.2) / slowest, 5.0, 1000.0));
        world->barrier();
        WallTimer timer;
        for (int i = 0; i < iters; ++i) run();
        synchronize(dev);
        Tensor t = Tensor::full({1}, timer.millis() / 1000.0 / iters, DType::f32, dev);
        world->all_reduce(t, dist::ReduceOp::max);
        const double sec = t.to(Device::cpu()).item();
        const double algbw = static_cast<double>(size) / sec / 1e9;
        if (me == 0)
          std::printf("{\"bench\":\"comm\",\"case\":\"%s\",\"backend\":\"%s\",\"device\":\"%s\",\"ranks\":%d,"
                      "\"dtype\":\"%s\",\"size_bytes\":%lld,\"count\":%lld,\"iters\":%d,\"time_us\":%.2f,"
                      "\"algbw_gbs\":%.4f,\"busbw_gbs\":%.4f}\n",
                      op.c_str(), std::string(world->backend()).c_str(), dev.str().c_str(), n,
                      std::string(dtype_name(args.dtype)).c_str(), static_cast<long long>(size),
                      static_cast<long long>(count), iters, sec * 1e6, algbw, algbw * bus_factor(op, n));
        std::fflush(stdout);
      }
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_comm (rank %d): %s\n", rt.rank(), e.what());
    return 1;  // the others end through the watchdog or mpirun's non-zero-exit abort
  }
  return 0;
}
