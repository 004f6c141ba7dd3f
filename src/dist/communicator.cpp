#include "dist/communicator.h"

#include <cstdio>
#include <cstdlib>

#include "core/error.h"
#include "dist/comm_internal.h"

namespace foldcore::dist {

std::string_view reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum: return "sum";
    case ReduceOp::max: return "max";
    case ReduceOp::min: return "min";
  }
  return "?";
}

CommHandle& CommHandle::operator=(CommHandle&& other) noexcept {
  if (this != &other) {
    {
      CommHandle finishing;  // finishes what this handle still holds before taking the other's
      finishing.op_ = std::move(op_);
    }
    op_ = std::move(other.op_);
    complete_ = other.complete_;
  }
  return *this;
}

CommHandle::~CommHandle() {
  if (!op_) return;
  // The buffers may be freed right after: the operation must be over. A failure here cannot be
  // thrown out of a destructor; it is reported and the process ends, as a dead collective would.
  try {
    op_->wait();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "foldcore: a collective failed while its handle was destroyed: %s\n", e.what());
    std::fflush(stderr);
    std::abort();
  }
}

void CommHandle::wait() {
  if (!op_) return;
  std::unique_ptr<PendingOp> op = std::move(op_);
  op->wait();
}

bool CommHandle::test() {
  if (!op_) return true;
  if (!complete_) complete_ = op_->test();
  return complete_;
}

namespace detail {

std::string describe(const OpInfo& info) {
  std::string s = foldcore::detail::concat(info.op, " on communicator '", info.comm ? *info.comm : std::string("?"),
                                           "' (", info.bytes, " bytes");
  if (info.peer >= 0) s += foldcore::detail::concat(", peer/root ", info.peer);
  return s + ")";
}


void check_tensor(const Communicator& c, const char* op, const char* role, const Tensor& t) {
  FC_CHECK(t.defined(), op, " on communicator '", c.name(), "': the ", role, " tensor is undefined");
  FC_CHECK(t.is_contiguous(), op, " on communicator '", c.name(), "': the ", role,
           " tensor must be contiguous (", t.str(), ")");
  FC_CHECK(t.device() == c.device(), op, " on communicator '", c.name(), "' (", c.device().str(), "): the ",
           role, " tensor is on ", t.device().str());
}

void check_sizes(const Communicator& c, const char* op, const Tensor& in, const Tensor& out, int64_t in_blocks,
                 int64_t out_blocks) {
  check_tensor(c, op, "input", in);
  check_tensor(c, op, "output", out);
  FC_CHECK(in.dtype() == out.dtype(), op, " on communicator '", c.name(), "': input is ", dtype_name(in.dtype()),
           ", output ", dtype_name(out.dtype()));
  // in.numel() / in_blocks == out.numel() / out_blocks, written without division.
  FC_CHECK(in.numel() * out_blocks == out.numel() * in_blocks, op, " on communicator '", c.name(), "' of ",
           c.size(), " ranks: input has ", in.numel(), " elements and output ", out.numel(), "; expected ",
           in_blocks, ":", out_blocks);
}

void check_peer(const Communicator& c, const char* op, int peer) {
  FC_CHECK(peer >= 0 && peer < c.size(), op, " on communicator '", c.name(), "' of ", c.size(), " ranks: peer ",
           peer, " is out of range");
}

}  // namespace detail
#ifndef FOLDCORE_HAVE_NCCL
std::unique_ptr<Communicator> make_local_nccl_communicator(Device device, const std::string& name, double) {
  FC_THROW("NCCL communicator '", name, "' on ", device.str(), ": this foldcore was built without NCCL");
}
#endif

}  // namespace foldcore::dist
