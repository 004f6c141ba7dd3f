// JSON text for hand-rendered output lines (MLPerf log lines, `foldcore msa` results).
// Dependency-free so the GPU-only build needs nothing beyond the CUDA toolkit.
#pragma once

#include <string>

namespace foldcore {

// `s` as a quoted JSON string: '"' and '\\' backslash-escaped, control characters (< 0x20) as
// \u00XX; every other byte (UTF-8 included) is copied unchanged.
std::string json_string(const std::string& s);

// The JSON string literal that starts at text[pos] ('"'), unescaped (\" \\ \/ \b \f \n \r
// \t and \uXXXX, written as UTF-8, surrogate pairs joined); *end receives the index after its
// closing quote. Throws foldcore::Error naming the position on anything else (no quote at pos, an
// unknown escape, a bad \u, a lone surrogate, a raw control character, no closing quote).
std::string json_unstring(const std::string& text, size_t pos, size_t* end = nullptr);

}  // namespace foldcore
