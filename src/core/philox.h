// Philox4x32-10 counter-based RNG (Salmon et al., SC'11), identical on host and device.
// A random stream is addressed by (seed, offset, index): the same triple gives the same bits
// on CPU and CUDA, so dropout masks agree across backends and can be regenerated in backward
// (and in recompute) instead of stored.
//   counter = (idx/4 lo, idx/4 hi, offset lo, offset hi), key = (seed lo, seed hi),
//   element idx takes 32-bit word idx%4 of the block.
#pragma once

#include <cstdint>

#include "core/macros.h"

namespace foldcore {

struct PhiloxBlock {
  uint32_t v[4];
};

FOLDCORE_HD uint32_t philox_mulhilo(uint32_t a, uint32_t b, uint32_t* hi) {
  const uint64_t p = static_cast<uint64_t>(a) * b;
  *hi = static_cast<uint32_t>(p >> 32);
  return static_cast<uint32_t>(p);
}

FOLDCORE_HD PhiloxBlock philox4x32_10(uint32_t c0, uint32_t c1, uint32_t c2, uint32_t c3, uint32_t k0,
                                      uint32_t k1) {
  constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;
  constexpr uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;
  for (int r = 0; r < 10; ++r) {
    uint32_t hi0, hi1;
    const uint32_t lo0 = philox_mulhilo(kM0, c0, &hi0);
    const uint32_t lo1 = philox_mulhilo(kM1, c2, &hi1);
    const uint32_t n0 = hi1 ^ c1 ^ k0;
    const uint32_t n2 = hi0 ^ c3 ^ k1;
    c0 = n0;
    c1 = lo1;
    c2 = n2;
    c3 = lo0;
    k0 += kW0;
    k1 += kW1;
  }
  return PhiloxBlock{{c0, c1, c2, c3}};
}

// The 32 random bits for element `idx` of stream (seed, offset).
FOLDCORE_HD uint32_t philox_bits(uint64_t seed, uint64_t offset, uint64_t idx) {
  const uint64_t block = idx >> 2;
  const PhiloxBlock b = philox4x32_10(static_cast<uint32_t>(block), static_cast<uint32_t>(block >> 32),
                                      static_cast<uint32_t>(offset), static_cast<uint32_t>(offset >> 32),
                                      static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32));
  // Word idx % 4, chosen without an index into the array: a dynamic index would put the block in
  // local memory in every GPU thread (a 16-byte stack frame in the dropout kernels).
  const uint32_t lo = (idx & 1) ? b.v[1] : b.v[0], hi = (idx & 1) ? b.v[3] : b.v[2];
  return (idx & 2) ? hi : lo;
}

// Uniform in [0, 1) with 24 bits of resolution (exact in float).
FOLDCORE_HD float philox_uniform(uint64_t seed, uint64_t offset, uint64_t idx) {
  return static_cast<float>(philox_bits(seed, offset, idx) >> 8) * (1.0f / 16777216.0f);
}

// Dropout keep decision: element kept iff uniform >= rate.
FOLDCORE_HD bool philox_keep(uint64_t seed, uint64_t offset, uint64_t idx, float rate) {
  return philox_uniform(seed, offset, idx) >= rate;
}

// Host-side generator: a seed plus an advancing offset. Each consumer takes a fresh offset
// (reserve()) so that streams never overlap; a recompute replays the offset it recorded.
class Generator {
 public:
  explicit Generator(uint64_t seed = 0) : seed_(seed) {}
  uint64_t seed() const { return seed_; }
  uint64_t offset() const { return offset_; }
  void set_offset(uint64_t o) { offset_ = o; }
  // Returns the offset to use for the next stream and advances.
  uint64_t reserve() { return offset_++; }

 private:
  uint64_t seed_;
  uint64_t offset_ = 0;
};

}  // namespace foldcore
