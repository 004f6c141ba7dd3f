// How much memory a device has and how much of it this process can still take: the sizes that
// `predict`'s preflight and the trainer's recompute_keep_blocks: auto plan against.
#pragma once

#include <cstdint>

#include "core/device.h"

namespace foldcore {

// Memory the device can give one process in all: CPU: physical memory, or the cgroup limit when
// lower; CUDA: the device's total memory.
int64_t device_memory_limit(Device device);

// Memory available to this process now, for what it has not allocated yet: CPU: MemAvailable of
// /proc/meminfo (or the cgroup's limit less its usage, when lower) plus the blocks the CPU
// allocator caches; CUDA: the driver's free memory (cudaMemGetInfo) plus the caching allocator's
// free blocks.
int64_t device_memory_available(Device device);

}  // namespace foldcore
