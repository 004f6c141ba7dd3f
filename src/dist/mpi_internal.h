// Internal to src/dist: the MPI-facing pieces the backends share (the MPI-free ones are in
// comm_internal.h). Includes <mpi.h>, so only the
// dist .cpp files include it (the public headers stay MPI-free and so does every other target).
#pragma once

#include <mpi.h>

#include <cstddef>
#include <memory>
#include <string>

#include "core/device.h"
#include "dist/comm_internal.h"
#include "dist/communicator.h"

namespace foldcore::dist::detail {

// Marks the collective this rank is blocked in, for the SIGTERM report (runtime.cpp).
class ActiveOp {
 public:
  explicit ActiveOp(const OpInfo& info);
  ~ActiveOp();
  ActiveOp(const ActiveOp&) = delete;
  ActiveOp& operator=(const ActiveOp&) = delete;
};

// An MPI call's return code: anything but MPI_SUCCESS is fatal (a peer failed or the library
// broke; the job cannot continue consistently), reported with MPI's error string.
void check_mpi(int rc, const char* call, const OpInfo& info);

// Polls `done()` until true; past `timeout_s` the job ends with a message naming `info`. Spins
// briefly, then yields and sleeps so oversubscribed ranks (tests: 4 ranks on 2 cores) progress.
template <typename Done> void wait_with_watchdog(Done&& done, const OpInfo& info, double timeout_s);
void watchdog_expired(const OpInfo& info, double timeout_s);  // [[noreturn]] in effect
void watchdog_backoff(long iteration);

template <typename Done> void wait_with_watchdog(Done&& done, const OpInfo& info, double timeout_s) {
  if (done()) return;
  ActiveOp active(info);
  const double start = now_seconds();
  for (long it = 0; !done(); ++it) {
    watchdog_backoff(it);
    if ((it & 63) == 0 && now_seconds() - start > timeout_s) watchdog_expired(info, timeout_s);
  }
}

// Backends. Both take ownership of `comm` (freed with the communicator).
std::unique_ptr<Communicator> make_mpi_communicator(MPI_Comm comm, std::string name, double timeout_s);
// `bootstrap`: the MPI communicator over the same ranks, used to broadcast the ncclUniqueId and to
// split. Defined only in builds with NCCL (communicator_nccl.cpp).
std::unique_ptr<Communicator> make_nccl_communicator(MPI_Comm bootstrap, Device device, std::string name,
                                                     double timeout_s);

}  // namespace foldcore::dist::detail
