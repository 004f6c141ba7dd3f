// The staged backend: collectives on device (CUDA) tensors run over a host communicator (MPI) of
// the same ranks through host copies. Each operation copies its device input to a host buffer
// (the copy waits for the work queued on the device before it), starts the host collective, and at
// wait() copies the host result back into the device tensor; a device tensor is never handed to
// MPI. This is the backend where NCCL cannot run: several ranks on one GPU (NCCL refuses two ranks
// on a device), a build without NCCL, or FOLDCORE_CUDA_COMM=mpi (dist/runtime.h). It moves every
// byte twice more than NCCL and blocks the host for the device-to-host copy, so it is for
// correctness and small jobs, not for speed.
#include <functional>
#include <utility>

#include "core/error.h"
#include "dist/communicator.h"

namespace foldcore::dist {
namespace {

class StagedPending : public PendingOp {
 public:
  StagedPending(CommHandle inner, std::function<void()> finish) : finish_(std::move(finish)), inner_(std::move(inner)) {}
  bool test() override { return inner_.test(); }
  void wait() override {
    inner_.wait();
    if (finish_) finish_();  // the host result into the device tensor
  }

 private:
  std::function<void()> finish_;  // holds the host buffers: declared first, so destroyed after inner_
  CommHandle inner_;
};

Tensor host_copy(const Tensor& t) { return t.to(Device::cpu()); }
Tensor host_like(const Tensor& t) { return Tensor::empty(t.shape(), t.dtype(), Device::cpu()); }

class StagedCommunicator : public Communicator {
 public:
  StagedCommunicator(std::unique_ptr<Communicator> host, Device device) : host_(std::move(host)), device_(device) {
    FC_CHECK(host_ != nullptr && host_->device().is_cpu(), "staged communicator on ", device.str(),
             ": needs a communicator of CPU tensors to stage through");
    FC_CHECK(!device.is_cpu(), "staged communicator '", host_->name(), "': ", device.str(),
             " is the host itself (use the host communicator)");
  }

  int rank() const override { return host_->rank(); }
  int size() const override { return host_->size(); }
  Device device() const override { return device_; }
  std::string_view backend() const override { return "mpi-staged"; }
  const std::string& name() const override { return host_->name(); }

  CommHandle all_reduce_async(const Tensor& t, ReduceOp op) override {
    detail::check_tensor(*this, "all_reduce", "data", t);
    Tensor h = host_copy(t);
    return staged(host_->all_reduce_async(h, op), t, h);
  }
  CommHandle reduce_scatter_async(const Tensor& in, const Tensor& out, ReduceOp op) override {
    detail::check_sizes(*this, "reduce_scatter", in, out, size(), 1);
    Tensor hin = host_copy(in), hout = host_like(out);
    return staged(host_->reduce_scatter_async(hin, hout, op), out, hout, hin);
  }
  CommHandle all_gather_async(const Tensor& in, const Tensor& out) override {
    detail::check_sizes(*this, "all_gather", in, out, 1, size());
    Tensor hin = host_copy(in), hout = host_like(out);
    return staged(host_->all_gather_async(hin, hout), out, hout, hin);
  }
  CommHandle all_to_all_async(const Tensor& in, const Tensor& out) override {
    detail::check_sizes(*this, "all_to_all", in, out, 1, 1);
    Tensor hin = host_copy(in), hout = host_like(out);
    return staged(host_->all_to_all_async(hin, hout), out, hout, hin);
  }
  CommHandle broadcast_async(const Tensor& t, int root) override {
    detail::check_tensor(*this, "broadcast", "data", t);
    detail::check_peer(*this, "broadcast", root);
    const bool from_here = rank() == root;  // the root's t already holds the value: nothing comes back
    Tensor h = from_here ? host_copy(t) : host_like(t);
    return staged(host_->broadcast_async(h, root), from_here ? Tensor() : t, h);
  }
  CommHandle send_async(const Tensor& t, int peer, int tag) override {
    detail::check_tensor(*this, "send", "data", t);
    detail::check_peer(*this, "send", peer);
    Tensor h = host_copy(t);
    return staged(host_->send_async(h, peer, tag), Tensor(), h);
  }
  CommHandle recv_async(const Tensor& t, int peer, int tag) override {
    detail::check_tensor(*this, "recv", "data", t);
    detail::check_peer(*this, "recv", peer);
    Tensor h = host_like(t);
    return staged(host_->recv_async(h, peer, tag), t, h);
  }
  CommHandle barrier_async() override { return host_->barrier_async(); }

  std::unique_ptr<Communicator> split(int color, int key, const std::string& name) override {
    return make_staged_communicator(host_->split(color, key, name), device_);
  }

 private:
  // The handle of a host operation whose result `h` goes into `dst` at wait() (none: undefined dst);
  // `keep` (an input's host copy) lives until then too.
  static CommHandle staged(CommHandle inner, Tensor dst, Tensor h, Tensor keep = Tensor()) {
    return CommHandle(std::make_unique<StagedPending>(std::move(inner), [dst, h, keep]() mutable {
      if (dst.defined()) dst.copy_(h);
      h = Tensor();
      keep = Tensor();
    }));
  }

  std::unique_ptr<Communicator> host_;
  Device device_;
};

}  // namespace

std::unique_ptr<Communicator> make_staged_communicator(std::unique_ptr<Communicator> host, Device device) {
  return std::make_unique<StagedCommunicator>(std::move(host), device);
}

}  // namespace foldcore::dist
