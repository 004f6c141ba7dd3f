#include "dist/runtime.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <thread>

#include "core/error.h"
#include "dist/mpi_internal.h"

namespace foldcore::dist {
using foldcore::detail::concat;
namespace {

// Process-wide state, by necessity: MPI can be initialised once per process, and a signal handler
// can reach only globals. Lock-free atomics are async-signal-safe to read.
std::atomic<bool> g_runtime_alive{false};
std::atomic<int> g_rank{0}, g_size{1};
std::atomic<const char*> g_active_op{nullptr};
std::atomic<const char*> g_active_comm{nullptr};
std::atomic<size_t> g_active_bytes{0};

// Async-signal-safe output helpers (no stdio in a handler).
void put(const char* s) {
  size_t n = 0;
  while (s[n]) ++n;
  ssize_t ignored = ::write(2, s, n);
  (void)ignored;
}
void put_int(long long v) {
  char buf[24];
  int i = 23;
  buf[i] = 0;
  const bool neg = v < 0;
  unsigned long long u = neg ? 0ULL - static_cast<unsigned long long>(v) : static_cast<unsigned long long>(v);
  do {
    buf[--i] = static_cast<char>('0' + u % 10);
    u /= 10;
  } while (u && i > 1);
  if (neg) buf[--i] = '-';
  put(buf + i);
}

extern "C" void on_terminate_signal(int sig) {
  put("foldcore: rank ");
  put_int(g_rank.load());
  put(" of ");
  put_int(g_size.load());
  put(sig == SIGTERM ? ": terminated by the launcher (SIGTERM)" : ": interrupted (SIGINT)");
  if (const char* op = g_active_op.load()) {
    put(" while in ");
    put(op);
    put(" on communicator '");
    put(g_active_comm.load() ? g_active_comm.load() : "?");
    put("' (");
    put_int(static_cast<long long>(g_active_bytes.load()));
    put(" bytes)");
  }
  put(sig == SIGTERM ? "; another rank failed or the job was aborted\n" : "\n");
  ::_exit(128 + sig);
}

double timeout_from(const RuntimeOptions& options) {
  if (options.timeout_seconds > 0) return options.timeout_seconds;
  if (const char* v = std::getenv("FOLDCORE_COMM_TIMEOUT_S"); v && *v) {
    char* end = nullptr;
    const double t = std::strtod(v, &end);
    FC_CHECK(end && *end == 0 && t > 0, "FOLDCORE_COMM_TIMEOUT_S='", v, "' is not a positive number of seconds");
    return t;
  }
  return 600;
}

}  // namespace

namespace detail {

ActiveOp::ActiveOp(const OpInfo& info) {
  g_active_comm.store(info.comm ? info.comm->c_str() : nullptr);
  g_active_bytes.store(info.bytes);
  g_active_op.store(info.op);
}
ActiveOp::~ActiveOp() { g_active_op.store(nullptr); }

void fatal_comm_failure(const std::string& message) {
  std::fprintf(stderr, "foldcore: rank %d of %d: %s\n", g_rank.load(), g_size.load(), message.c_str());
  std::fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, 3);
  std::_Exit(3);  // MPI_Abort does not return; this is for a library that would
}

void fatal_comm_failure_off_thread(const std::string& message) {
  std::fprintf(stderr, "foldcore: rank %d of %d: %s\n", g_rank.load(), g_size.load(), message.c_str());
  std::fflush(stderr);
  std::_Exit(3);
}

void check_mpi(int rc, const char* call, const OpInfo& info) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING] = {0};
  int len = 0;
  MPI_Error_string(rc, text, &len);
  fatal_comm_failure(concat(call, " failed in ", describe(info), ": ", text,
                            " (a peer rank probably died); aborting the job"));
}

void watchdog_backoff(long iteration) {
  // ~2k polls spinning (a few µs each: small messages complete here), then yield, then sleep.
  if (iteration < 2048) return;
  if (iteration < 4096) {
    std::this_thread::yield();
    return;
  }
  std::this_thread::sleep_for(std::chrono::microseconds(50));
}

void watchdog_expired(const OpInfo& info, double timeout_s) {
  fatal_comm_failure(concat(describe(info), " did not complete within ", timeout_s,
                            " s (watchdog; FOLDCORE_COMM_TIMEOUT_S): a peer rank is dead, hung or called a "
                            "different collective; aborting the job"));
}

}  // namespace detail

Runtime::Runtime(int& argc, char**& argv, const RuntimeOptions& options) {
  FC_CHECK(!g_runtime_alive.exchange(true), "dist::Runtime: one per process (MPI is initialised once)");
  try {
    env_ = detect_launch_env();
    timeout_ = timeout_from(options);
  } catch (...) {
    g_runtime_alive = false;
    throw;
  }
  int initialised = 0;
  MPI_Initialized(&initialised);
  FC_CHECK(!initialised, "dist::Runtime: MPI was already initialised elsewhere");
  // FUNNELED: only the thread that made the Runtime calls MPI (collectives are launched and
  // waited for from the training loop; OpenMP workers never touch MPI).
  int provided = 0;
  if (MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS)
    FC_THROW("dist::Runtime: MPI_Init_thread failed");
  // Errors come back as codes, so every failure gets our message (check_mpi) and not a bare abort.
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (env_.source != "none" && (env_.rank != rank || (env_.world_size >= 0 && env_.world_size != size)))
    detail::fatal_comm_failure(concat("the launcher environment (", env_.source, ") says rank ", env_.rank, " of ",
                                      env_.world_size, " but MPI says ", rank, " of ", size));
  env_.rank = rank;
  env_.world_size = size;
  g_rank = rank;
  g_size = size;
  // The node-local rank from MPI itself when the launcher did not say (PMIx, singleton).
  if (env_.local_rank < 0 || env_.local_size < 0) {
    MPI_Comm node = MPI_COMM_NULL;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node);
    MPI_Comm_rank(node, &env_.local_rank);
    MPI_Comm_size(node, &env_.local_size);
    MPI_Comm_free(&node);
  }
  if (options.handle_signals) {
    struct sigaction sa = {};
    sa.sa_handler = on_terminate_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, nullptr);
    sigaction(SIGINT, &sa, nullptr);
  }
  if (provided < MPI_THREAD_FUNNELED)
    detail::fatal_comm_failure("the MPI library does not provide MPI_THREAD_FUNNELED");
}

Runtime::~Runtime() {
  // A rank leaving with an exception in flight must not sit in MPI_Finalize while its peers wait in
  // a collective it will never join: end the job now, with the reason.
  if (std::uncaught_exceptions() > 0)
    detail::fatal_comm_failure("leaving with an unhandled error; aborting the job so the other ranks do not wait");
  MPI_Finalize();
  g_runtime_alive = false;
}

Device Runtime::device(DeviceType kind) const {
  return device_for_local_rank(kind, env_.local_rank, kind == DeviceType::cuda ? cuda_device_count() : 0);
}

std::unique_ptr<Communicator> Runtime::world(Device device) const {
  MPI_Comm comm = MPI_COMM_NULL;
  detail::OpInfo info{"MPI_Comm_dup", nullptr, 0, -1};
  detail::check_mpi(MPI_Comm_dup(MPI_COMM_WORLD, &comm), "MPI_Comm_dup", info);
  MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
  if (device.is_cpu()) return detail::make_mpi_communicator(comm, "world", timeout_);
  // CUDA tensors: NCCL where the build has it and every rank drives a GPU of its own (NCCL refuses
  // two ranks on one device), else MPI staged through host copies; FOLDCORE_CUDA_COMM=nccl|mpi
  // chooses (the same value on every rank: the launcher passes the environment on).
  const char* env = std::getenv("FOLDCORE_CUDA_COMM");
  const std::string choice = env != nullptr && *env != '\0' ? env : "auto";
  if (choice != "auto" && choice != "nccl" && choice != "mpi") {
    MPI_Comm_free(&comm);
    FC_THROW("FOLDCORE_CUDA_COMM=", choice, ": expected nccl, mpi or auto");
  }
  int own_gpu = cuda_device_count() >= env_.local_size ? 1 : 0, every_rank_own_gpu = 0;
  detail::check_mpi(MPI_Allreduce(&own_gpu, &every_rank_own_gpu, 1, MPI_INT, MPI_MIN, comm), "MPI_Allreduce",
                    detail::OpInfo{"choose the CUDA backend", nullptr, sizeof(int), -1});
#ifdef FOLDCORE_HAVE_NCCL
  if (choice == "nccl" || (choice == "auto" && every_rank_own_gpu == 1))
    return detail::make_nccl_communicator(comm, device, "world", timeout_);
#else
  if (choice == "nccl") {
    MPI_Comm_free(&comm);
    FC_THROW("dist::Runtime::world(", device.str(), "): FOLDCORE_CUDA_COMM=nccl, but this build has no NCCL backend");
  }
#endif
  return make_staged_communicator(detail::make_mpi_communicator(comm, "world", timeout_), device);
}

}  // namespace foldcore::dist
