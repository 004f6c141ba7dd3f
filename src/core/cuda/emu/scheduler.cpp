// Kernel execution for the CUDA host emulation: blocks, fibers, barriers, warp operations.
//
// A launch runs its blocks one after another in a seeded random order. Inside a block every
// thread is a fiber (fiber.h). The scheduler makes passes: in each pass it resumes, in a freshly
// shuffled order, every thread that can run, and each runs until it reaches __syncthreads, a warp
// operation, or its end. Between passes it completes what can complete — a warp operation whose
// named lanes have all arrived, or the barrier once every thread waits at it — and when nothing
// can, it reports the deadlock CUDA would have (or its undefined behaviour), naming the kernel,
// the block and the thread. Seed: FOLDCORE_EMU_SEED (default 1), mixed with a launch counter.
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <new>
#include <sstream>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/cuda/emu/cuda_emu.h"
#include "core/cuda/emu/emu_internal.h"
#include "core/cuda/emu/fiber.h"

namespace fc_emu {

thread_local Builtins* tls_builtins = nullptr;

namespace {

constexpr int kMaxThreadsPerBlock = 1024;
constexpr size_t kDefaultDynamicSmem = 48 * 1024;   // without cudaFuncSetAttribute
constexpr size_t kMaxDynamicSmem = 227 * 1024;      // sm_90 opt-in limit per block
constexpr size_t kFiberStackBytes = 256 * 1024;
constexpr uint64_t kPoison = ~uint64_t{0};          // NaN in every float format, -1 in integers

enum class State : uint8_t { runnable, barrier, warp, exited };

struct EmuThread {
  Builtins b;
  Fiber fiber;
  State state = State::runnable;
  int linear = 0, warp = 0, lane = 0;
  // The warp operation this thread waits at.
  WarpOp op = WarpOp::sync;
  unsigned mask = 0;
  uint64_t value = 0, result = 0;
  int arg = 0, width = 32;
  void (*collective)(void* const*) = nullptr;
  void* collective_arg = nullptr;
};

struct Run {
  const char* name = "";
  dim3 grid, block;
  void (*body)(void*) = nullptr;
  void* args = nullptr;
  std::vector<EmuThread> threads;
  EmuThread* current = nullptr;
  unsigned char* dynamic_smem = nullptr;
  size_t dynamic_bytes = 0;
  bool failed = false;
  std::string error;
  uint64_t rng = 0;
};

std::mutex g_launch_mutex;  // one kernel at a time in the process
Run* g_run = nullptr;       // the launch in progress (under g_launch_mutex)
uint64_t g_launch_count = 0;

std::mutex g_attr_mutex;
// Immortal, like the rest of the emulator's state: kernels may run while statics are destroyed.
std::unordered_map<const void*, size_t>& smem_limits() {
  static auto* m = new std::unordered_map<const void*, size_t>;
  return *m;
}

uint64_t splitmix(uint64_t& s) {
  uint64_t z = (s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

template <typename V> void shuffle(V& v, uint64_t& s) {
  for (size_t i = v.size(); i > 1; --i) std::swap(v[i - 1], v[splitmix(s) % i]);
}

uint64_t base_seed() {
  static const uint64_t seed = [] {
    const char* e = std::getenv("FOLDCORE_EMU_SEED");
    return e ? std::strtoull(e, nullptr, 10) : uint64_t{1};
  }();
  return seed;
}

}  // namespace

bool skip_device_work() {
  static const bool skip = [] {
    const char* e = std::getenv("FOLDCORE_EMU_SKIP_DEVICE_WORK");
    return e && *e && std::string(e) != "0";
  }();
  return skip;
}

namespace {

std::string where(const Run& r, const EmuThread& t) {
  std::ostringstream o;
  o << "kernel " << r.name << ", block (" << t.b.block_idx.x << "," << t.b.block_idx.y << "," << t.b.block_idx.z
    << "), thread (" << t.b.thread_idx.x << "," << t.b.thread_idx.y << "," << t.b.thread_idx.z << ") [warp " << t.warp
    << " lane " << t.lane << "]";
  return o.str();
}

void thread_entry(void* p) {
  auto* t = static_cast<EmuThread*>(p);
  g_run->body(g_run->args);
  t->state = State::exited;
}

// Runs on the fiber: records the error and leaves for good.
[[noreturn]] void fail_here(const std::string& what) {
  Run& r = *g_run;
  EmuThread& t = *r.current;
  if (!r.failed) {
    r.failed = true;
    r.error = what + " (" + where(r, t) + ")";
  }
  t.state = State::exited;
  t.fiber.yield_to_scheduler(/*final=*/true);
  std::abort();  // never resumed
}

void wait_here(State s) {
  Run& r = *g_run;
  EmuThread& t = *r.current;
  t.state = s;
  t.fiber.yield_to_scheduler();
}

// ---------------------------------------------------------------- warp groups
int lanes_in_warp(const Run& r, int warp) {
  const int n = static_cast<int>(r.threads.size());
  return std::min(32, n - warp * 32);
}

EmuThread& lane_thread(Run& r, int warp, int lane) { return r.threads[static_cast<size_t>(warp * 32 + lane)]; }

int source_lane(const EmuThread& t) {
  const int w = t.width, seg = (t.lane / w) * w, in = t.lane % w;
  switch (t.op) {
    case WarpOp::shfl: return seg + ((t.arg % w) + w) % w;
    case WarpOp::shfl_up: return in >= t.arg ? t.lane - t.arg : t.lane;
    case WarpOp::shfl_down: return in + t.arg < w ? t.lane + t.arg : t.lane;
    case WarpOp::shfl_xor: {
      const int s = t.lane ^ t.arg;
      return (s / w == t.lane / w && s < 32) ? s : t.lane;
    }
    default: return t.lane;
  }
}

void complete_group(Run& r, int warp, unsigned mask) {
  EmuThread* lanes[32] = {};
  for (int l = 0; l < 32; ++l)
    if (mask >> l & 1u) lanes[l] = &lane_thread(r, warp, l);
  const WarpOp op = [&] {
    for (int l = 0; l < 32; ++l)
      if (lanes[l]) return lanes[l]->op;
    return WarpOp::sync;
  }();
  uint64_t vote = 0;
  bool any = false, all = true;
  for (int l = 0; l < 32; ++l)
    if (lanes[l]) {
      const bool p = lanes[l]->value != 0;
      vote |= uint64_t{p} << l;
      any = any || p;
      all = all && p;
    }
  if (op == WarpOp::wmma_mma || op == WarpOp::mma_sync) {
    void* args[32] = {};
    for (int l = 0; l < 32; ++l)
      if (lanes[l]) args[l] = lanes[l]->collective_arg;
    for (int l = 0; l < 32; ++l)
      if (lanes[l]) {
        lanes[l]->collective(args);
        break;
      }
  }
  for (int l = 0; l < 32; ++l) {
    EmuThread* t = lanes[l];
    if (!t) continue;
    switch (op) {
      case WarpOp::shfl:
      case WarpOp::shfl_up:
      case WarpOp::shfl_down:
      case WarpOp::shfl_xor: {
        const int s = source_lane(*t);
        // A source lane outside the mask is undefined in CUDA: hand out the poison pattern.
        t->result = (mask >> s & 1u) ? lanes[s]->value : kPoison;
        break;
      }
      case WarpOp::ballot: t->result = vote; break;
      case WarpOp::any: t->result = any; break;
      case WarpOp::all: t->result = all; break;
      default: t->result = 0;
    }
    t->state = State::runnable;
  }
}

// Completes every warp group whose lanes have all arrived; returns whether any did.
bool complete_warp_groups(Run& r) {
  bool progress = false;
  const int warps = (static_cast<int>(r.threads.size()) + 31) / 32;
  for (int w = 0; w < warps; ++w) {
    const int n = lanes_in_warp(r, w);
    unsigned not_ready_mask = 0;  // a mask already found incomplete in this warp: skip its lanes
    for (int l = 0; l < n; ++l) {
      EmuThread& t = lane_thread(r, w, l);
      if (t.state != State::warp || (not_ready_mask != 0 && t.mask == not_ready_mask)) continue;
      bool ready = true;
      for (int m = 0; m < 32 && ready; ++m) {
        if (!(t.mask >> m & 1u)) continue;
        if (m >= n) {  // diagnosed by report_deadlock
          ready = false;
          break;
        }
        const EmuThread& u = lane_thread(r, w, m);
        ready = u.state == State::warp && u.mask == t.mask && u.op == t.op;
      }
      if (ready && (t.mask >> l & 1u)) {
        complete_group(r, w, t.mask);
        progress = true;
      } else if (!ready) {
        not_ready_mask = t.mask;
      }
    }
  }
  return progress;
}

const char* state_name(const EmuThread& t) {
  switch (t.state) {
    case State::exited: return "has exited";
    case State::barrier: return "waits at __syncthreads";
    default: return "waits at another warp operation";
  }
}

// Nothing can complete: say why, for the first waiting thread.
std::string report_deadlock(Run& r) {
  std::ostringstream o;
  for (EmuThread& t : r.threads) {
    if (t.state != State::warp) continue;
    const int n = lanes_in_warp(r, t.warp);
    if (!(t.mask >> t.lane & 1u)) {
      o << warp_op_name(t.op) << " with mask 0x" << std::hex << t.mask << " that does not name the calling lane ("
        << where(r, t) << ")";
      return o.str();
    }
    for (int m = 0; m < 32; ++m) {
      if (!(t.mask >> m & 1u)) continue;
      if (m >= n) {
        o << warp_op_name(t.op) << " with mask 0x" << std::hex << t.mask << std::dec << " names lane " << m
          << ", which this block's last warp does not have (" << where(r, t) << ")";
        return o.str();
      }
      const EmuThread& u = lane_thread(r, t.warp, m);
      if (u.state == State::warp && u.mask == t.mask && u.op == t.op) continue;
      o << warp_op_name(t.op) << " not reached by every lane of its mask 0x" << std::hex << t.mask << std::dec
        << ": lane " << m << " " << (u.state == State::warp ? std::string("waits at ") + warp_op_name(u.op) : state_name(u))
        << " (" << where(r, t) << ")";
      return o.str();
    }
  }
  for (EmuThread& t : r.threads)
    if (t.state == State::barrier)
      for (EmuThread& u : r.threads)
        if (u.state != State::barrier) {
          o << "__syncthreads not reached by every thread of the block: thread (" << u.b.thread_idx.x << ","
            << u.b.thread_idx.y << "," << u.b.thread_idx.z << ") " << state_name(u) << " (" << where(r, t) << ")";
          return o.str();
        }
  return "deadlock in kernel " + std::string(r.name);
}

// Block serial number (process-wide) of the last NaN fill of each static shared variable.
std::unordered_map<void*, uint64_t>& shared_fills() {
  static auto* m = new std::unordered_map<void*, uint64_t>;
  return *m;
}
uint64_t g_block_serial = 0;

StackPool& stack_pool() {
  static auto* pool = new StackPool(kFiberStackBytes);
  return *pool;
}

// Runs one block; false (with r.error) when a check failed.
bool run_block(Run& r, uint3 block_idx) {
  ++g_block_serial;
  if (r.dynamic_smem) std::memset(r.dynamic_smem, 0xff, r.dynamic_bytes);
  const unsigned bx = r.block.x, by = r.block.y;
  std::vector<EmuThread*> order;
  order.reserve(r.threads.size());
  for (size_t i = 0; i < r.threads.size(); ++i) {
    EmuThread& t = r.threads[i];
    t = EmuThread{};
    t.linear = static_cast<int>(i);
    t.warp = t.linear / 32;
    t.lane = t.linear % 32;
    t.b.thread_idx = uint3{static_cast<unsigned>(i % bx), static_cast<unsigned>((i / bx) % by),
                           static_cast<unsigned>(i / (static_cast<size_t>(bx) * by))};
    t.b.block_idx = block_idx;
    t.b.block_dim = r.block;
    t.b.grid_dim = r.grid;
    t.fiber.start(stack_pool().get(i), &thread_entry, &t);
  }
  for (;;) {
    order.clear();
    for (EmuThread& t : r.threads)
      if (t.state == State::runnable) order.push_back(&t);
    shuffle(order, r.rng);
    for (EmuThread* t : order) {
      r.current = t;
      tls_builtins = &t->b;
      t->fiber.resume();
      if (r.failed) return false;
    }
    r.current = nullptr;
    tls_builtins = nullptr;
    if (complete_warp_groups(r)) continue;
    size_t exited = 0, at_barrier = 0;
    for (const EmuThread& t : r.threads) {
      exited += t.state == State::exited;
      at_barrier += t.state == State::barrier;
    }
    if (exited == r.threads.size()) return true;
    if (at_barrier == r.threads.size()) {
      for (EmuThread& t : r.threads) t.state = State::runnable;
      continue;
    }
    r.failed = true;
    r.error = report_deadlock(r);
    return false;
  }
}

}  // namespace

const char* warp_op_name(WarpOp op) {
  switch (op) {
    case WarpOp::sync: return "__syncwarp";
    case WarpOp::shfl: return "__shfl_sync";
    case WarpOp::shfl_xor: return "__shfl_xor_sync";
    case WarpOp::shfl_up: return "__shfl_up_sync";
    case WarpOp::shfl_down: return "__shfl_down_sync";
    case WarpOp::ballot: return "__ballot_sync";
    case WarpOp::any: return "__any_sync";
    case WarpOp::all: return "__all_sync";
    case WarpOp::wmma_load: return "wmma::load_matrix_sync";
    case WarpOp::wmma_store: return "wmma::store_matrix_sync";
    case WarpOp::wmma_mma: return "wmma::mma_sync";
    case WarpOp::mma_sync: return "mma.sync";
  }
  return "warp operation";
}

void syncthreads() {
  if (!g_run || !g_run->current) {
    std::fprintf(stderr, "cuda emulation: __syncthreads outside a kernel\n");
    std::abort();
  }
  wait_here(State::barrier);
}

uint64_t warp_exchange(WarpOp op, unsigned mask, uint64_t value, int arg, int width) {
  EmuThread& t = *g_run->current;
  if (width < 1 || width > 32 || (width & (width - 1)) != 0)
    fail_here(std::string(warp_op_name(op)) + ": width " + std::to_string(width) + " is not a power of two up to 32");
  t.op = op;
  t.mask = mask;
  t.value = value;
  t.arg = arg;
  t.width = width;
  wait_here(State::warp);
  return t.result;
}

void warp_collective(WarpOp op, unsigned mask, void (*fn)(void* const*), void* arg) {
  EmuThread& t = *g_run->current;
  t.collective = fn;
  t.collective_arg = arg;
  warp_exchange(op, mask, 0, 0, 32);
}

void device_fail(const char* what) { fail_here(what); }

void fresh_shared(void* p, size_t bytes) {
  uint64_t& last = shared_fills()[p];
  if (last != g_block_serial) {
    last = g_block_serial;
    std::memset(p, 0xff, bytes);
  }
}

int lane_id() { return g_run->current->lane; }

void* dynamic_shared() { return g_run->dynamic_smem; }

cudaError_t func_set_attribute(const void* fn, cudaFuncAttribute attr, int value) {
  if (attr != cudaFuncAttributeMaxDynamicSharedMemorySize) return cudaErrorInvalidValue;
  if (value < 0 || static_cast<size_t>(value) > kMaxDynamicSmem) {
    set_error(cudaErrorInvalidValue, "cudaFuncSetAttribute: " + std::to_string(value) +
                                         " bytes of dynamic shared memory exceed the device's " +
                                         std::to_string(kMaxDynamicSmem));
    return cudaErrorInvalidValue;
  }
  std::lock_guard<std::mutex> l(g_attr_mutex);
  smem_limits()[fn] = static_cast<size_t>(value);
  return cudaSuccess;
}

void launch(const char* name, const void* fn, dim3 grid, dim3 block, size_t dynamic_smem, cudaStream_t stream,
            void (*body)(void*), void* args) {
  (void)stream;
  const uint64_t threads = uint64_t{block.x} * block.y * block.z;
  if (threads == 0 || threads > kMaxThreadsPerBlock || block.z > 64 || grid.x == 0 || grid.y == 0 || grid.z == 0 ||
      grid.x > 0x7fffffffu || grid.y > 65535 || grid.z > 65535) {
    std::ostringstream o;
    o << "launch of kernel " << name << ": invalid configuration grid (" << grid.x << "," << grid.y << "," << grid.z
      << ") block (" << block.x << "," << block.y << "," << block.z << ")";
    set_error(cudaErrorInvalidConfiguration, o.str());
    return;
  }
  size_t limit = kDefaultDynamicSmem;
  {
    std::lock_guard<std::mutex> l(g_attr_mutex);
    auto it = smem_limits().find(fn);
    if (it != smem_limits().end()) limit = it->second;
  }
  if (dynamic_smem > limit) {
    set_error(cudaErrorInvalidValue, "launch of kernel " + std::string(name) + ": " + std::to_string(dynamic_smem) +
                                         " bytes of dynamic shared memory exceed the " + std::to_string(limit) +
                                         " allowed (raise it with cudaFuncSetAttribute)");
    return;
  }

  if (skip_device_work()) return;
  std::lock_guard<std::mutex> lock(g_launch_mutex);
  Run r;
  r.name = name;
  r.grid = grid;
  r.block = block;
  r.body = body;
  r.args = args;
  r.threads.resize(threads);
  r.rng = base_seed() * 0x2545f4914f6cdd1dull + (++g_launch_count);
  // Exactly sized, so AddressSanitizer catches an access past its end.
  struct AlignedFree {
    void operator()(unsigned char* p) const { ::operator delete[](p, std::align_val_t{128}); }
  };
  std::unique_ptr<unsigned char[], AlignedFree> smem(
      static_cast<unsigned char*>(::operator new[](dynamic_smem == 0 ? 1 : dynamic_smem, std::align_val_t{128})));
  r.dynamic_smem = dynamic_smem ? smem.get() : nullptr;
  r.dynamic_bytes = dynamic_smem;
  g_run = &r;

  std::vector<uint3> blocks;
  blocks.reserve(static_cast<size_t>(grid.x) * grid.y * grid.z);
  for (unsigned z = 0; z < grid.z; ++z)
    for (unsigned y = 0; y < grid.y; ++y)
      for (unsigned x = 0; x < grid.x; ++x) blocks.push_back(uint3{x, y, z});
  shuffle(blocks, r.rng);
  for (const uint3& b : blocks)
    if (!run_block(r, b)) {
      for (size_t i = 0; i < r.threads.size(); ++i) stack_pool().get(i).dirty = true;  // fibers dropped
      break;
    }
  g_run = nullptr;
  tls_builtins = nullptr;
  if (r.failed) {
    std::fprintf(stderr, "cuda emulation: %s\n", r.error.c_str());
    set_error(cudaErrorLaunchFailure, r.error);
  }
}

}  // namespace fc_emu
