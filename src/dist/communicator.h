// Communicator: collectives over a group of ranks, one interface with three backends chosen by the
// device of the tensors (dist/runtime.h makes them):
//   MPI  (dist/communicator_mpi.cpp)  CPU tensors; non-blocking MPI calls, progressed by wait()/test()
//   NCCL (dist/communicator_nccl.cpp) CUDA tensors; the communicator's own stream, ordered after the
//        caller's current stream at launch; wait() makes the caller's current stream wait (no host block)
//   MPI staged (dist/communicator_staged.cpp) CUDA tensors where NCCL cannot run (several ranks on
//        one GPU, no NCCL in the build): device → host copy at launch, the MPI collective on the
//        host copies, host → device copy at wait()
//
// Semantics (n = elements per rank's block, P = size(), tensors contiguous, one dtype and the
// communicator's device; "in place" where only one tensor is named):
//   all_reduce(t, op)            t ← op over ranks of t                      (in place)
//   reduce_scatter(in, out, op)  in: [P·n], out: [n];  out_r ← op over ranks of in[r·n, (r+1)·n)
//   all_gather(in, out)          in: [n], out: [P·n];   out[j·n, (j+1)·n) ← in of rank j
//   all_to_all(in, out)          in, out: [P·n];        out[j·n, …) ← in[r·n, …) of rank j (r = me)
//   broadcast(t, root)           t ← t of rank root                            (in place)
//   send(t, peer, tag) / recv(t, peer, tag)   point to point, matched by (peer, tag) in order
//   barrier()                    returns once every rank has entered it
// Reductions: sum, max, min. bf16/f16 reduce with fp32 accumulation (MPI: up-converted to f32 for
// the call and rounded once at the end; NCCL: its native bf16/f16 reductions). Integer dtypes (i32,
// i64, u8) reduce exactly.
//
// Every collective has an async form returning a CommHandle; the plain form is async + wait().
// Ranks must call collectives on a communicator in the same order (as with MPI and NCCL). A handle
// not waited for is waited for by its destructor: an operation never outlives its buffers, but the
// caller must keep the tensors' contents untouched until wait() returns.
//
// Watchdog: an operation that does not complete within the runtime's timeout (dist/runtime.h) ends
// the whole job (MPI_Abort, exit code 3) after printing which rank, collective, communicator and
// size were stuck: a dead or hung peer never leaves the others waiting forever. MPI checks at
// wait(); NCCL, whose wait() does not block the host, from a thread that watches every operation
// in flight (completion_watchdog.h; it aborts the NCCL communicator, then exits with code 3, and
// the launcher ends the other ranks).
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "core/device.h"
#include "core/tensor.h"

namespace foldcore::dist {

enum class ReduceOp { sum, max, min };
std::string_view reduce_op_name(ReduceOp op);

// Backend state of one in-flight operation.
class PendingOp {
 public:
  virtual ~PendingOp() = default;
  // Completes the operation: CPU/MPI blocks (under the watchdog); CUDA/NCCL orders the caller's
  // current stream after it. Called at most once.
  virtual void wait() = 0;
  // Non-blocking: true when complete. Also drives progress (MPI progresses non-blocking collectives
  // only inside MPI calls, so overlapping code should test() now and then).
  virtual bool test() = 0;
};

class CommHandle {
 public:
  CommHandle() = default;  // an already completed operation
  explicit CommHandle(std::unique_ptr<PendingOp> op) : op_(std::move(op)) {}
  CommHandle(CommHandle&&) noexcept = default;
  CommHandle& operator=(CommHandle&& other) noexcept;
  CommHandle(const CommHandle&) = delete;
  CommHandle& operator=(const CommHandle&) = delete;
  ~CommHandle();

  void wait();           // idempotent
  bool test();           // true once complete (then wait() is free)
  bool pending() const { return op_ != nullptr; }

 private:
  std::unique_ptr<PendingOp> op_;
  bool complete_ = false;  // test() saw it finish; wait() still runs the op's completion step
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  Communicator() = default;
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual Device device() const = 0;
  virtual std::string_view backend() const = 0;  // "mpi", "nccl" or "mpi-staged"
  virtual const std::string& name() const = 0;   // for messages: "world", "dp", "dap", "bp", …

  virtual CommHandle all_reduce_async(const Tensor& t, ReduceOp op = ReduceOp::sum) = 0;
  virtual CommHandle reduce_scatter_async(const Tensor& in, const Tensor& out, ReduceOp op = ReduceOp::sum) = 0;
  virtual CommHandle all_gather_async(const Tensor& in, const Tensor& out) = 0;
  virtual CommHandle all_to_all_async(const Tensor& in, const Tensor& out) = 0;
  virtual CommHandle broadcast_async(const Tensor& t, int root) = 0;
  virtual CommHandle send_async(const Tensor& t, int peer, int tag = 0) = 0;
  virtual CommHandle recv_async(const Tensor& t, int peer, int tag = 0) = 0;
  virtual CommHandle barrier_async() = 0;

  void all_reduce(const Tensor& t, ReduceOp op = ReduceOp::sum) { all_reduce_async(t, op).wait(); }
  void reduce_scatter(const Tensor& in, const Tensor& out, ReduceOp op = ReduceOp::sum) {
    reduce_scatter_async(in, out, op).wait();
  }
  void all_gather(const Tensor& in, const Tensor& out) { all_gather_async(in, out).wait(); }
  void all_to_all(const Tensor& in, const Tensor& out) { all_to_all_async(in, out).wait(); }
  void broadcast(const Tensor& t, int root) { broadcast_async(t, root).wait(); }
  void send(const Tensor& t, int peer, int tag = 0) { send_async(t, peer, tag).wait(); }
  void recv(const Tensor& t, int peer, int tag = 0) { recv_async(t, peer, tag).wait(); }
  void barrier() { barrier_async().wait(); }

  // Collective over this communicator: the ranks passing the same color (≥ 0) form a new
  // communicator of the same backend, ranked by key (ties: by rank here).
  virtual std::unique_ptr<Communicator> split(int color, int key, const std::string& name) = 0;
};

// A communicator of `device` tensors (not the CPU) over `host`, a communicator of CPU tensors of the
// same ranks: every collective stages through host copies (dist/communicator_staged.cpp); its
// backend() is "mpi-staged", its name, rank and size those of `host`, and split() stages the split
// host communicator.
std::unique_ptr<Communicator> make_staged_communicator(std::unique_ptr<Communicator> host, Device device);

// A single-process NCCL communicator (rank 0 of 1) on a CUDA device, bootstrapped without MPI:
// the NCCL backend on a machine with one GPU, where NCCL refuses a second rank on the same device
// and MPI may be missing. Its collectives run through NCCL on the device like any other's;
// send/recv to itself would wait for each other (they are not grouped), so do not use them.
// `timeout_s`: its watchdog's limit per collective (completion_watchdog.h; a collective still
// running on the device after it ends the process with exit code 3 and a message).
// Builds with NCCL only (FOLDCORE_HAVE_NCCL); elsewhere an Error.
std::unique_ptr<Communicator> make_local_nccl_communicator(Device device, const std::string& name = "local",
                                                           double timeout_s = 600);

namespace detail {
// Argument checks shared by the backends; Errors name the collective and the communicator.
void check_tensor(const Communicator& c, const char* op, const char* role, const Tensor& t);
void check_sizes(const Communicator& c, const char* op, const Tensor& in, const Tensor& out, int64_t in_blocks,
                 int64_t out_blocks);
void check_peer(const Communicator& c, const char* op, int peer);
}  // namespace detail

}  // namespace foldcore::dist
