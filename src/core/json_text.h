// JSON text for hand-rendered output lines (MLPerf log lines, `foldcore msa` results).
// Dependency-free so the GPU-only build needs nothing beyond the CUDA toolkit.
#pragma once

#include <string>

namespace foldcore {

// `s` as a quoted JSON string: '"' and '\\' backslash-escaped, control characters (< 0x20) as
// \u00XX; every other byte (UTF-8 included) is copied unchanged.
std::string json_string(const std::string& s);

}  // namespace foldcore
