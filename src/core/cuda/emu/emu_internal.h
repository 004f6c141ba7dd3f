// Internal to the CUDA host emulation: the per-host-thread last error shared by the runtime
// stand-ins and the kernel scheduler.
#pragma once

#include <string>

#include "core/cuda/emu/cuda_emu.h"

namespace fc_emu {
// Records `e` as the calling thread's last error, with a message cudaGetErrorString returns.
void set_error(cudaError_t e, const std::string& message);

// FOLDCORE_EMU_SKIP_DEVICE_WORK=1: the host-cost mode. Kernel launches, cuBLASLt matmuls,
// device-to-device copies and memsets are checked (configuration, pointers, shapes) and then not
// executed; copies to and from the host still copy. What remains is the host's own work per step —
// the framework issuing the device's work — so a benchmark run in this mode on a CPU measures it
// with no GPU. Device memory then holds whatever the allocator left there: the values computed are
// meaningless, and only code whose control flow does not depend on them may run in this mode.
bool skip_device_work();
}  // namespace fc_emu
