// Minimal leveled logging to stderr: "[2026-11-22 17:30:01.123] [info] message".
// Dependency-free so the GPU-only build needs nothing beyond the CUDA toolkit.
#pragma once

#include <string>

#include "core/error.h"

namespace foldcore::log {

enum class Level { debug = 0, info = 1, warn = 2, error = 3, off = 4 };

void set_level(Level level);
Level level();
// Parses "debug|info|warn|error|off"; throws Error otherwise.
Level parse_level(const std::string& name);
void write(Level level, const std::string& message);

template <typename... Args> void debug(Args&&... a) {
  if (level() <= Level::debug) write(Level::debug, detail::concat(std::forward<Args>(a)...));
}
template <typename... Args> void info(Args&&... a) {
  if (level() <= Level::info) write(Level::info, detail::concat(std::forward<Args>(a)...));
}
template <typename... Args> void warn(Args&&... a) {
  if (level() <= Level::warn) write(Level::warn, detail::concat(std::forward<Args>(a)...));
}
template <typename... Args> void error(Args&&... a) {
  if (level() <= Level::error) write(Level::error, detail::concat(std::forward<Args>(a)...));
}

}  // namespace foldcore::log
