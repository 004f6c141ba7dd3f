// Shared helpers for the libFuzzer targets. A target feeds the input bytes to a parser's in-memory
// entry point; foldcore::Error is the parser's documented answer to bad input, so it is caught and
// ignored. Everything else (a crash, a sanitizer report, another exception type, a hang caught by
// -timeout, a leak, an allocation over -rss_limit_mb / -malloc_limit_mb) is a finding.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "core/error.h"

namespace foldcore::fuzz {

// Inputs above this size are skipped: they only slow the search down (the parsers are linear
// in their input) and big seeds are truncated prefixes anyway.
constexpr size_t kMaxInputBytes = 1 << 20;

inline std::string as_text(const uint8_t* data, size_t size) {
  return std::string(reinterpret_cast<const char*>(data), size);
}

// Runs `fn`, treating foldcore::Error as a clean rejection of the input.
template <typename Fn> void expect_clean(Fn&& fn) {
  try {
    fn();
  } catch (const foldcore::Error&) {
  }
}

// A property the parser must keep (e.g. a round trip) failed: abort so libFuzzer saves the input.
[[noreturn]] inline void property_failed(const char* what) {
  std::fprintf(stderr, "fuzz property violated: %s\n", what);
  std::abort();
}

// Runs a check on an accepted parse: here foldcore::Error means the parser broke its own contract.
template <typename Fn> void expect_valid(Fn&& fn, const char* what) {
  try {
    fn();
  } catch (const foldcore::Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    property_failed(what);
  }
}

}  // namespace foldcore::fuzz
