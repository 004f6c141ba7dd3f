// The MPI backend: CPU tensors, non-blocking MPI-3 calls (MPI_Iallreduce …) so every collective
// has a true async form; wait() polls MPI_Test under the watchdog.
//
// bf16/f16 reductions: MPI has no 16-bit float type. The tensor is up-converted into an f32
// buffer, reduced in f32 and rounded back once at wait(): fp32 accumulation, at twice the bytes on
// the wire. Moves (gather, all-to-all, broadcast, send/recv) carry 16-bit values as MPI_UINT16_T.
#include <climits>
#include <vector>

#include "core/error.h"
#include "dist/mpi_internal.h"

namespace foldcore::dist::detail {
namespace {

using foldcore::detail::concat;

MPI_Datatype mpi_type(DType t) {
  switch (t) {
    case DType::f32: return MPI_FLOAT;
    case DType::bf16: return MPI_UINT16_T;
    case DType::f16: return MPI_UINT16_T;
    case DType::i32: return MPI_INT32_T;
    case DType::i64: return MPI_INT64_T;
    case DType::u8: return MPI_UINT8_T;
  }
  return MPI_DATATYPE_NULL;
}

MPI_Op mpi_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum: return MPI_SUM;
    case ReduceOp::max: return MPI_MAX;
    case ReduceOp::min: return MPI_MIN;
  }
  return MPI_OP_NULL;
}

// MPI counts are int. Larger messages would need derived datatypes; no tensor we move comes near
// 2^31 elements per call (AlphaFold's gradients are ~93 M), so this is a clear Error instead.
int count_of(int64_t n, const char* op, const std::string& comm) {
  FC_CHECK(n <= INT_MAX, op, " on communicator '", comm, "': ", n, " elements exceed MPI's int count");
  return static_cast<int>(n);
}

class MpiPending : public PendingOp {
 public:
  MpiPending(OpInfo info, double timeout_s) : info_(info), timeout_(timeout_s) {}
  MPI_Request* request() { return &requests_.emplace_back(MPI_REQUEST_NULL); }
  // A 16-bit reduction's f32 buffer and where to round it back to.
  void round_back_into(Tensor f32_buffer, Tensor destination) {
    f32_ = std::move(f32_buffer);
    dst_ = std::move(destination);
  }
  void keep_alive(Tensor t) { keep_ = std::move(t); }

  bool test() override {
    int flag = 0;
    check_mpi(MPI_Testall(static_cast<int>(requests_.size()), requests_.data(), &flag, MPI_STATUSES_IGNORE),
              "MPI_Testall", info_);
    return flag != 0;
  }
  void wait() override {
    wait_with_watchdog([this] { return test(); }, info_, timeout_);
    if (dst_.defined()) dst_.copy_(f32_);
  }

 private:
  OpInfo info_;
  double timeout_;
  std::vector<MPI_Request> requests_;
  Tensor f32_, dst_, keep_;
};

class MpiCommunicator : public Communicator {
 public:
  MpiCommunicator(MPI_Comm comm, std::string name, double timeout_s)
      : comm_(comm), name_(std::move(name)), timeout_(timeout_s) {
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
  }
  ~MpiCommunicator() override {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) MPI_Comm_free(&comm_);
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  Device device() const override { return Device::cpu(); }
  std::string_view backend() const override { return "mpi"; }
  const std::string& name() const override { return name_; }

  CommHandle all_reduce_async(const Tensor& t, ReduceOp op) override {
    check_tensor(*this, "all_reduce", "data", t);
    auto p = start("all_reduce", t.nbytes());
    Tensor buf = reduction_buffer(*p, t, t);
    const int n = count_of(t.numel(), "all_reduce", name_);
    check_mpi(MPI_Iallreduce(MPI_IN_PLACE, buf.data_ptr(), n, mpi_type(buf.dtype()), mpi_op(op), comm_, p->request()),
              "MPI_Iallreduce", info("all_reduce", t.nbytes()));
    return CommHandle(std::move(p));
  }

  CommHandle reduce_scatter_async(const Tensor& in, const Tensor& out, ReduceOp op) override {
    check_sizes(*this, "reduce_scatter", in, out, size_, 1);
    auto p = start("reduce_scatter", in.nbytes());
    Tensor src = in;
    if (is_16bit_float(in.dtype())) {
      src = in.to(DType::f32);
      p->keep_alive(src);
    }
    Tensor dst = reduction_buffer(*p, out, Tensor());
    const int n = count_of(out.numel(), "reduce_scatter", name_);
    check_mpi(MPI_Ireduce_scatter_block(src.data_ptr(), dst.data_ptr(), n, mpi_type(dst.dtype()), mpi_op(op), comm_,
                                        p->request()),
              "MPI_Ireduce_scatter_block", info("reduce_scatter", in.nbytes()));
    return CommHandle(std::move(p));
  }

  CommHandle all_gather_async(const Tensor& in, const Tensor& out) override {
    check_sizes(*this, "all_gather", in, out, 1, size_);
    auto p = start("all_gather", out.nbytes());
    const int n = count_of(in.numel(), "all_gather", name_);
    const MPI_Datatype ty = mpi_type(in.dtype());
    check_mpi(MPI_Iallgather(in.data_ptr(), n, ty, out.data_ptr(), n, ty, comm_, p->request()), "MPI_Iallgather",
              info("all_gather", out.nbytes()));
    return CommHandle(std::move(p));
  }

  CommHandle all_to_all_async(const Tensor& in, const Tensor& out) override {
    check_sizes(*this, "all_to_all", in, out, 1, 1);
    FC_CHECK(in.numel() % size_ == 0, "all_to_all on communicator '", name_, "': ", in.numel(),
             " elements do not split into ", size_, " equal blocks");
    auto p = start("all_to_all", in.nbytes());
    const int n = count_of(in.numel() / size_, "all_to_all", name_);
    const MPI_Datatype ty = mpi_type(in.dtype());
    check_mpi(MPI_Ialltoall(in.data_ptr(), n, ty, out.data_ptr(), n, ty, comm_, p->request()), "MPI_Ialltoall",
              info("all_to_all", in.nbytes()));
    return CommHandle(std::move(p));
  }

  CommHandle broadcast_async(const Tensor& t, int root) override {
    check_tensor(*this, "broadcast", "data", t);
    check_peer(*this, "broadcast", root);
    auto p = start("broadcast", t.nbytes(), root);
    const int n = count_of(t.numel(), "broadcast", name_);
    check_mpi(MPI_Ibcast(t.data_ptr(), n, mpi_type(t.dtype()), root, comm_, p->request()), "MPI_Ibcast",
              info("broadcast", t.nbytes(), root));
    return CommHandle(std::move(p));
  }

  CommHandle send_async(const Tensor& t, int peer, int tag) override {
    check_tensor(*this, "send", "data", t);
    check_peer(*this, "send", peer);
    auto p = start("send", t.nbytes(), peer);
    const int n = count_of(t.numel(), "send", name_);
    check_mpi(MPI_Isend(t.data_ptr(), n, mpi_type(t.dtype()), peer, tag, comm_, p->request()), "MPI_Isend",
              info("send", t.nbytes(), peer));
    return CommHandle(std::move(p));
  }

  CommHandle recv_async(const Tensor& t, int peer, int tag) override {
    check_tensor(*this, "recv", "data", t);
    check_peer(*this, "recv", peer);
    auto p = start("recv", t.nbytes(), peer);
    const int n = count_of(t.numel(), "recv", name_);
    check_mpi(MPI_Irecv(t.data_ptr(), n, mpi_type(t.dtype()), peer, tag, comm_, p->request()), "MPI_Irecv",
              info("recv", t.nbytes(), peer));
    return CommHandle(std::move(p));
  }

  CommHandle barrier_async() override {
    auto p = start("barrier", 0);
    check_mpi(MPI_Ibarrier(comm_, p->request()), "MPI_Ibarrier", info("barrier", 0));
    return CommHandle(std::move(p));
  }

  std::unique_ptr<Communicator> split(int color, int key, const std::string& name) override {
    FC_CHECK(color >= 0, "split of communicator '", name_, "': color ", color, " must be ≥ 0");
    MPI_Comm sub = MPI_COMM_NULL;
    check_mpi(MPI_Comm_split(comm_, color, key, &sub), "MPI_Comm_split", info("split", 0));
    MPI_Comm_set_errhandler(sub, MPI_ERRORS_RETURN);
    return make_mpi_communicator(sub, name, timeout_);
  }

  MPI_Comm comm() const { return comm_; }

 private:
  OpInfo info(const char* op, size_t bytes, int peer = -1) const { return OpInfo{op, &name_, bytes, peer}; }
  std::unique_ptr<MpiPending> start(const char* op, size_t bytes, int peer = -1) const {
    return std::make_unique<MpiPending>(info(op, bytes, peer), timeout_);
  }
  // The buffer an in-place or output reduction works on: `t` itself, or for 16-bit floats an f32
  // buffer (initialised from `init` when defined) that wait() rounds back into `t`.
  static Tensor reduction_buffer(MpiPending& p, const Tensor& t, const Tensor& init) {
    if (!is_16bit_float(t.dtype())) return t;
    Tensor f32 = init.defined() ? init.to(DType::f32) : Tensor::empty(t.shape(), DType::f32);
    p.round_back_into(f32, t);
    return f32;
  }

  MPI_Comm comm_;
  std::string name_;
  double timeout_;
  int rank_ = 0, size_ = 1;
};

}  // namespace

std::unique_ptr<Communicator> make_mpi_communicator(MPI_Comm comm, std::string name, double timeout_s) {
  return std::make_unique<MpiCommunicator>(comm, std::move(name), timeout_s);
}

}  // namespace foldcore::dist::detail
