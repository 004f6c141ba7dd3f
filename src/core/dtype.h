// Element types a Tensor can hold.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "core/half.h"

namespace foldcore {

enum class DType : uint8_t { f32, bf16, f16, i32, i64, u8 };

constexpr size_t dtype_size(DType t) {
  switch (t) {
    case DType::f32: return 4;
    case DType::bf16: return 2;
    case DType::f16: return 2;
    case DType::i32: return 4;
    case DType::i64: return 8;
    case DType::u8: return 1;
  }
  return 0;
}

constexpr std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::f32: return "f32";
    case DType::bf16: return "bf16";
    case DType::f16: return "f16";
    case DType::i32: return "i32";
    case DType::i64: return "i64";
    case DType::u8: return "u8";
  }
  return "?";
}

constexpr bool is_floating(DType t) { return t == DType::f32 || t == DType::bf16 || t == DType::f16; }
// bf16 or f16: the storage dtypes autocast computes in, beside fp32.
constexpr bool is_16bit_float(DType t) { return t == DType::bf16 || t == DType::f16; }

// Compile-time mapping C++ type -> DType.
template <typename T> struct DTypeOf;
template <> struct DTypeOf<float> { static constexpr DType value = DType::f32; };
template <> struct DTypeOf<bf16> { static constexpr DType value = DType::bf16; };
template <> struct DTypeOf<f16> { static constexpr DType value = DType::f16; };
template <> struct DTypeOf<int32_t> { static constexpr DType value = DType::i32; };
template <> struct DTypeOf<int64_t> { static constexpr DType value = DType::i64; };
template <> struct DTypeOf<uint8_t> { static constexpr DType value = DType::u8; };

// Calls f(T{}) with T the C++ type of `t`. Used by CPU kernels to write one templated body.
template <typename F> decltype(auto) dispatch_dtype(DType t, F&& f) {
  switch (t) {
    case DType::f32: return f(float{});
    case DType::bf16: return f(bf16{});
    case DType::f16: return f(f16{});
    case DType::i32: return f(int32_t{});
    case DType::i64: return f(int64_t{});
    case DType::u8: return f(uint8_t{});
  }
  return f(float{});
}

// Same for the floating types only (f32, bf16, f16); anything else is the caller's error.
template <typename F> decltype(auto) dispatch_float(DType t, F&& f) {
  switch (t) {
    case DType::bf16: return f(bf16{});
    case DType::f16: return f(f16{});
    default: return f(float{});
  }
}

}  // namespace foldcore
