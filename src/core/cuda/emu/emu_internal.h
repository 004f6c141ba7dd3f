// Internal to the CUDA host emulation: the per-host-thread last error shared by the runtime
// stand-ins and the kernel scheduler.
#pragma once

#include <string>

#include "core/cuda/emu/cuda_emu.h"

namespace fc_emu {
// Records `e` as the calling thread's last error, with a message cudaGetErrorString returns.
void set_error(cudaError_t e, const std::string& message);
}  // namespace fc_emu
