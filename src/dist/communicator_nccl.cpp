// The NCCL backend: CUDA tensors. One ncclComm_t per communicator, bootstrapped over MPI (rank 0
// of the group makes the ncclUniqueId and broadcasts it, as nccl-tests does), on the
// communicator's own stream. Without a bootstrap communicator (make_local_nccl_communicator; the
// only kind in builds without MPI) it is a single-process communicator, rank 0 of 1: every
// collective is then a copy or a no-op that still goes through NCCL on the device.
//
// Ordering (llm.c zero.cuh's pattern): at launch an event recorded on the caller's current stream
// makes the NCCL stream wait, so the collective sees everything the compute stream produced before
// the call; the collective is enqueued on the NCCL stream; a completion event is recorded after it.
// CommHandle::wait() makes the caller's current stream wait for that event (no host blocking), so
// compute continues while the bucket is on the wire; test() polls the event without blocking.
// all_to_all is a group of send/recv pairs (works on every NCCL ≥ 2.7); barrier is a 1-element
// all-reduce. NCCL has no tags: send/recv match in call order per peer, and `tag` is ignored.
//
// Failure: an asynchronous NCCL error (a peer died; ncclCommGetAsyncError) found by test()/wait()
// aborts the communicator and the job with a message. As wait() does not block the host, a
// collective that never completes on the GPU would otherwise surface nowhere (the host would block
// in some later synchronisation, forever): each communicator's CompletionWatchdog thread
// (completion_watchdog.h) polls the completion events and the async error of the operations in
// flight, and past the timeout (FOLDCORE_COMM_TIMEOUT_S) or on an async error it calls
// ncclCommAbort and ends the process (exit code 3) with a message naming the operation.
#include <cuda_runtime.h>
#include <nccl.h>

#include <atomic>
#include <memory>
#include <vector>

#include "core/error.h"
#include "core/stream.h"
#include "dist/completion_watchdog.h"
#ifdef FOLDCORE_HAVE_MPI
#include "dist/mpi_internal.h"
#else
#include "dist/comm_internal.h"
#include "dist/communicator.h"
#endif

namespace foldcore::dist::detail {
namespace {

using foldcore::detail::concat;

ncclDataType_t nccl_type(DType t) {
  switch (t) {
    case DType::f32: return ncclFloat32;
    case DType::bf16: return ncclBfloat16;
    case DType::f16: return ncclFloat16;
    case DType::i32: return ncclInt32;
    case DType::i64: return ncclInt64;
    case DType::u8: return ncclUint8;
  }
  return ncclFloat32;
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum: return ncclSum;
    case ReduceOp::max: return ncclMax;
    case ReduceOp::min: return ncclMin;
  }
  return ncclSum;
}

void check_nccl(ncclResult_t rc, const char* call, const OpInfo& info) {
  if (rc == ncclSuccess) return;
  fatal_comm_failure(concat(call, " failed in ", describe(info), ": ", ncclGetErrorString(rc), "; aborting the job"));
}

void check_cuda(cudaError_t rc, const char* call, const OpInfo& info) {
  if (rc == cudaSuccess) return;
  fatal_comm_failure(concat(call, " failed in ", describe(info), ": ", cudaGetErrorString(rc)));
}

cudaStream_t native(const Stream& s) { return static_cast<cudaStream_t>(s.native()); }

// A completion event shared by the handle and the watchdog (either may outlive the other); CUDA
// releases it once it has completed.
using SharedEvent = std::shared_ptr<CUevent_st>;

class NcclPending : public PendingOp {
 public:
  NcclPending(ncclComm_t comm, Device device, SharedEvent done, OpInfo info, std::vector<Tensor> keep)
      : comm_(comm), device_(device), done_(std::move(done)), info_(info), keep_(std::move(keep)) {}

  void wait() override {
    check_async_error();
    check_cuda(cudaStreamWaitEvent(native(current_stream(device_)), done_.get(), 0), "cudaStreamWaitEvent", info_);
  }
  bool test() override {
    check_async_error();
    const cudaError_t rc = cudaEventQuery(done_.get());
    if (rc == cudaErrorNotReady) return false;
    check_cuda(rc, "cudaEventQuery", info_);
    return true;
  }

 private:
  void check_async_error() {
    ncclResult_t async = ncclSuccess;
    check_nccl(ncclCommGetAsyncError(comm_, &async), "ncclCommGetAsyncError", info_);
    if (async != ncclSuccess) {
      ncclCommAbort(comm_);
      fatal_comm_failure(concat(describe(info_), ": NCCL reported ", ncclGetErrorString(async),
                                " (a peer rank probably died); aborting the job"));
    }
  }
  ncclComm_t comm_;
  Device device_;
  SharedEvent done_;
  OpInfo info_;
  std::vector<Tensor> keep_;  // the tensors stay allocated until the handle is done with
};

// The MPI communicator over the same ranks, or none (a single-process communicator).
struct Bootstrap {
#ifdef FOLDCORE_HAVE_MPI
  MPI_Comm comm = MPI_COMM_NULL;
  bool single() const { return comm == MPI_COMM_NULL; }
#else
  bool single() const { return true; }
#endif
};

class NcclCommunicator : public Communicator {
 public:
  NcclCommunicator(Bootstrap bootstrap, Device device, std::string name, double timeout_s)
      : bootstrap_(bootstrap), device_(device), name_(std::move(name)), timeout_(timeout_s) {
    FC_CHECK(device.is_cuda(), "NCCL communicator '", name_, "' needs a CUDA device, got ", device.str());
#ifdef FOLDCORE_HAVE_MPI
    if (!bootstrap_.single()) {
      MPI_Comm_rank(bootstrap_.comm, &rank_);
      MPI_Comm_size(bootstrap_.comm, &size_);
    }
#endif
    set_device(device_);
    const OpInfo init{"ncclCommInitRank", &name_, sizeof(ncclUniqueId), 0};
    ncclUniqueId id;
    if (rank_ == 0) check_nccl(ncclGetUniqueId(&id), "ncclGetUniqueId", init);
#ifdef FOLDCORE_HAVE_MPI
    if (!bootstrap_.single())
      check_mpi(MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, bootstrap_.comm), "MPI_Bcast(ncclUniqueId)", init);
#endif
    check_nccl(ncclCommInitRank(&comm_, size_, id, rank_), "ncclCommInitRank", init);
    stream_ = Stream::create(device_);
    scratch_ = Tensor::zeros({1}, DType::f32, device_);
    const ncclComm_t comm = comm_;
    const Device dev = device_;
    std::atomic<bool>* aborted = &aborted_;
    watchdog_ = std::make_unique<CompletionWatchdog>(
        name_, timeout_,
        [comm, dev]() -> std::string {
          set_device(dev);  // the watchdog's thread: the events' device
          ncclResult_t async = ncclSuccess;
          const ncclResult_t rc = ncclCommGetAsyncError(comm, &async);
          if (rc != ncclSuccess) return concat("ncclCommGetAsyncError failed: ", ncclGetErrorString(rc));
          if (async != ncclSuccess)
            return concat("NCCL reported ", ncclGetErrorString(async), " (a peer rank probably died); aborting the job");
          return {};
        },
        [comm, aborted] {
          aborted->store(true);
          ncclCommAbort(comm);
        });
  }
  ~NcclCommunicator() override {
    cudaStreamSynchronize(native(stream_));
    watchdog_.reset();
    if (aborted_.load()) return;  // ncclCommAbort freed the communicator
    ncclCommDestroy(comm_);
#ifdef FOLDCORE_HAVE_MPI
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized && !bootstrap_.single()) MPI_Comm_free(&bootstrap_.comm);
#endif
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  Device device() const override { return device_; }
  std::string_view backend() const override { return "nccl"; }
  const std::string& name() const override { return name_; }

  CommHandle all_reduce_async(const Tensor& t, ReduceOp op) override {
    check_tensor(*this, "all_reduce", "data", t);
    return launch(info("all_reduce", t.nbytes()), {t}, [&] {
      return ncclAllReduce(t.data_ptr(), t.data_ptr(), static_cast<size_t>(t.numel()), nccl_type(t.dtype()),
                           nccl_op(op), comm_, native(stream_));
    });
  }
  CommHandle reduce_scatter_async(const Tensor& in, const Tensor& out, ReduceOp op) override {
    check_sizes(*this, "reduce_scatter", in, out, size_, 1);
    return launch(info("reduce_scatter", in.nbytes()), {in, out}, [&] {
      return ncclReduceScatter(in.data_ptr(), out.data_ptr(), static_cast<size_t>(out.numel()), nccl_type(in.dtype()),
                               nccl_op(op), comm_, native(stream_));
    });
  }
  CommHandle all_gather_async(const Tensor& in, const Tensor& out) override {
    check_sizes(*this, "all_gather", in, out, 1, size_);
    return launch(info("all_gather", out.nbytes()), {in, out}, [&] {
      return ncclAllGather(in.data_ptr(), out.data_ptr(), static_cast<size_t>(in.numel()), nccl_type(in.dtype()),
                           comm_, native(stream_));
    });
  }
  CommHandle all_to_all_async(const Tensor& in, const Tensor& out) override {
    check_sizes(*this, "all_to_all", in, out, 1, 1);
    FC_CHECK(in.numel() % size_ == 0, "all_to_all on communicator '", name_, "': ", in.numel(),
             " elements do not split into ", size_, " equal blocks");
    return launch(info("all_to_all", in.nbytes()), {in, out}, [&] {
      const size_t n = static_cast<size_t>(in.numel() / size_);
      const size_t bytes = n * dtype_size(in.dtype());
      const ncclDataType_t ty = nccl_type(in.dtype());
      ncclResult_t rc = ncclGroupStart();
      for (int peer = 0; peer < size_ && rc == ncclSuccess; ++peer) {
        rc = ncclSend(static_cast<const char*>(in.data_ptr()) + peer * bytes, n, ty, peer, comm_, native(stream_));
        if (rc == ncclSuccess)
          rc = ncclRecv(static_cast<char*>(out.data_ptr()) + peer * bytes, n, ty, peer, comm_, native(stream_));
      }
      const ncclResult_t end = ncclGroupEnd();
      return rc != ncclSuccess ? rc : end;
    });
  }
  CommHandle broadcast_async(const Tensor& t, int root) override {
    check_tensor(*this, "broadcast", "data", t);
    check_peer(*this, "broadcast", root);
    return launch(info("broadcast", t.nbytes(), root), {t}, [&] {
      return ncclBroadcast(t.data_ptr(), t.data_ptr(), static_cast<size_t>(t.numel()), nccl_type(t.dtype()), root,
                           comm_, native(stream_));
    });
  }
  CommHandle send_async(const Tensor& t, int peer, int /*tag: NCCL matches in order*/) override {
    check_tensor(*this, "send", "data", t);
    check_peer(*this, "send", peer);
    return launch(info("send", t.nbytes(), peer), {t}, [&] {
      return ncclSend(t.data_ptr(), static_cast<size_t>(t.numel()), nccl_type(t.dtype()), peer, comm_,
                      native(stream_));
    });
  }
  CommHandle recv_async(const Tensor& t, int peer, int /*tag*/) override {
    check_tensor(*this, "recv", "data", t);
    check_peer(*this, "recv", peer);
    return launch(info("recv", t.nbytes(), peer), {t}, [&] {
      return ncclRecv(t.data_ptr(), static_cast<size_t>(t.numel()), nccl_type(t.dtype()), peer, comm_,
                      native(stream_));
    });
  }
  CommHandle barrier_async() override {
    return launch(info("barrier", 0), {}, [&] {
      return ncclAllReduce(scratch_.data_ptr(), scratch_.data_ptr(), 1, ncclFloat32, ncclSum, comm_, native(stream_));
    });
  }

  std::unique_ptr<Communicator> split(int color, int key, const std::string& name) override {
    FC_CHECK(color >= 0, "split of communicator '", name_, "': color ", color, " must be ≥ 0");
#ifdef FOLDCORE_HAVE_MPI
    if (!bootstrap_.single()) {
      MPI_Comm sub = MPI_COMM_NULL;
      check_mpi(MPI_Comm_split(bootstrap_.comm, color, key, &sub), "MPI_Comm_split", info("split", 0));
      MPI_Comm_set_errhandler(sub, MPI_ERRORS_RETURN);
      return make_nccl_communicator(sub, device_, name, timeout_);
    }
#endif
    return std::make_unique<NcclCommunicator>(Bootstrap{}, device_, name, timeout_);  // this one rank
  }

 private:
  OpInfo info(const char* op, size_t bytes, int peer = -1) const { return OpInfo{op, &name_, bytes, peer}; }

  template <typename Enqueue>
  CommHandle launch(const OpInfo& op, std::vector<Tensor> keep, Enqueue&& enqueue) {
    set_device(device_);
    // The NCCL stream waits for the work the caller queued before this call.
    cudaEvent_t ready = nullptr, done = nullptr;
    check_cuda(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming), "cudaEventCreate", op);
    check_cuda(cudaEventRecord(ready, native(current_stream(device_))), "cudaEventRecord", op);
    check_cuda(cudaStreamWaitEvent(native(stream_), ready, 0), "cudaStreamWaitEvent", op);
    cudaEventDestroy(ready);
    check_nccl(enqueue(), op.op, op);
    check_cuda(cudaEventCreateWithFlags(&done, cudaEventDisableTiming), "cudaEventCreate", op);
    SharedEvent event(done, [](cudaEvent_t e) { cudaEventDestroy(e); });
    check_cuda(cudaEventRecord(done, native(stream_)), "cudaEventRecord", op);
    watchdog_->watch(describe(op), [event] { return cudaEventQuery(event.get()) != cudaErrorNotReady; });
    return CommHandle(std::make_unique<NcclPending>(comm_, device_, std::move(event), op, std::move(keep)));
  }

  Bootstrap bootstrap_;
  Device device_;
  std::string name_;
  double timeout_;
  int rank_ = 0, size_ = 1;
  ncclComm_t comm_ = nullptr;
  Stream stream_;
  Tensor scratch_;
  std::atomic<bool> aborted_{false};
  std::unique_ptr<CompletionWatchdog> watchdog_;
};

}  // namespace

#ifdef FOLDCORE_HAVE_MPI
std::unique_ptr<Communicator> make_nccl_communicator(MPI_Comm bootstrap, Device device, std::string name,
                                                     double timeout_s) {
  return std::make_unique<NcclCommunicator>(Bootstrap{bootstrap}, device, std::move(name), timeout_s);
}
#endif

}  // namespace foldcore::dist::detail

namespace foldcore::dist {

std::unique_ptr<Communicator> make_local_nccl_communicator(Device device, const std::string& name, double timeout_s) {
  return std::make_unique<detail::NcclCommunicator>(detail::Bootstrap{}, device, name, timeout_s);
}

}  // namespace foldcore::dist
