// "Last block" reductions in one launch: the blocks of a split reduction write their partial sums,
// and the last block to finish a group (a tile of output columns) adds the group's partials in a
// fixed order, so a two-kernel reduction (partials, then a combining kernel) becomes one launch with
// the same sums, bit for bit, whichever block finishes last.
//
//   unsigned* counters = block_counters(device, groups);   // host: zeroed, one per group
//   ... each block writes its partials, then:
//   if (last_block_of_group(&counters[group], blocks_per_group)) { combine the group's partials }
//
// The counters belong to the device's current stream: kernels on one stream run one after another,
// and the last block resets its counter to zero, so the next kernel finds them zeroed again.
#pragma once

#include <cstdint>

#include "core/cuda/cuda_utils.cuh"

namespace foldcore {

// At least `groups` zeroed counters for kernels on the current stream of `device` (grows as needed;
// a new buffer is zeroed once, on that stream).
unsigned* block_counters(Device device, int64_t groups);

// Called by every thread of the block after it wrote its partials (to global memory): true in the
// one block that arrives last among `blocks` at `counter`, whose reads of the other blocks' partials
// must then go through read_partial (not the incoherent L1). Resets the counter for the next kernel.
__device__ __forceinline__ bool last_block_of_group(unsigned* counter, unsigned blocks) {
  FC_SHARED(bool, last, [1]);
  __threadfence();  // this block's partials are visible device-wide before it is counted
  __syncthreads();
  if (threadIdx.x == 0 && threadIdx.y == 0 && threadIdx.z == 0) {
    const unsigned arrived = atomicAdd(counter, 1u);
    last[0] = arrived == blocks - 1;
    if (last[0]) *counter = 0;  // every block of the group has arrived: ready for the next kernel
  }
  __syncthreads();
  return last[0];
}

// A partial written by another block of the group (volatile: read from L2, not a stale L1 line).
__device__ __forceinline__ float read_partial(const float* p) { return *static_cast<const volatile float*>(p); }

}  // namespace foldcore
