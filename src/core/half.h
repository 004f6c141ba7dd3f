// 16-bit floating point storage types usable from host code without the CUDA headers.
// Layout-compatible with __nv_bfloat16 / __half: CUDA kernels reinterpret_cast to those.
#pragma once

#include <cstdint>
#include <cstring>

#include "core/macros.h"

namespace foldcore {

// bfloat16: the upper 16 bits of an IEEE binary32. Conversion rounds to nearest even;
// NaN stays NaN (quiet bit forced so that rounding never turns it into Inf).
struct bf16 {
  uint16_t bits = 0;
  bf16() = default;
  FOLDCORE_HD explicit bf16(float f) : bits(from_float(f)) {}
  FOLDCORE_HD explicit operator float() const { return to_float(bits); }

  FOLDCORE_HD static uint16_t from_float(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);
    const uint32_t rounding = 0x7fffu + ((u >> 16) & 1u);
    return static_cast<uint16_t>((u + rounding) >> 16);
  }
  FOLDCORE_HD static float to_float(uint16_t b) {
    const uint32_t u = static_cast<uint32_t>(b) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
  }
};

// IEEE binary16. Conversion rounds to nearest even, handles subnormals, Inf and NaN.
struct f16 {
  uint16_t bits = 0;
  f16() = default;
  FOLDCORE_HD explicit f16(float f) : bits(from_float(f)) {}
  FOLDCORE_HD explicit operator float() const { return to_float(bits); }

  FOLDCORE_HD static uint16_t from_float(float f) {
    uint32_t x;
    std::memcpy(&x, &f, 4);
    const uint32_t sign = (x >> 16) & 0x8000u;
    const uint32_t absx = x & 0x7fffffffu;
    if (absx > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);  // NaN
    if (absx >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // overflow -> Inf
    if (absx < 0x38800000u) {                                               // subnormal or zero
      if (absx < 0x33000000u) return static_cast<uint16_t>(sign);
      const uint32_t mant = (absx & 0x7fffffu) | 0x800000u;
      const int shift = 126 - static_cast<int>(absx >> 23);  // 14..24
      uint32_t r = mant >> shift;
      const uint32_t rem = mant & ((1u << shift) - 1u);
      const uint32_t half = 1u << (shift - 1);
      if (rem > half || (rem == half && (r & 1u))) ++r;
      return static_cast<uint16_t>(sign | r);
    }
    uint32_t r = absx - 0x38000000u;  // rebias exponent 127 -> 15
    const uint32_t rem = r & 0x1fffu;
    r >>= 13;
    if (rem > 0x1000u || (rem == 0x1000u && (r & 1u))) ++r;
    return static_cast<uint16_t>(sign | r);
  }
  FOLDCORE_HD static float to_float(uint16_t h) {
    const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t mant = h & 0x3ffu;
    uint32_t u;
    if (exp == 0) {
      if (mant == 0) {
        u = sign;
      } else {  // subnormal: normalise
        exp = 1;
        while ((mant & 0x400u) == 0) {
          mant <<= 1;
          --exp;
        }
        mant &= 0x3ffu;
        u = sign | ((exp + 112u) << 23) | (mant << 13);
      }
    } else if (exp == 31) {
      u = sign | 0x7f800000u | (mant << 13);
    } else {
      u = sign | ((exp + 112u) << 23) | (mant << 13);
    }
    float f;
    std::memcpy(&f, &u, 4);
    return f;
  }
};

}  // namespace foldcore
