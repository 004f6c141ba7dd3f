#include "core/log.h"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <mutex>

namespace foldcore::log {
namespace {
std::atomic<Level> g_level{Level::info};
std::mutex g_mutex;
const char* level_name(Level l) {
  switch (l) {
    case Level::debug: return "debug";
    case Level::info: return "info";
    case Level::warn: return "warn";
    case Level::error: return "error";
    default: return "off";
  }
}
}  // namespace

void set_level(Level l) { g_level.store(l); }
Level level() { return g_level.load(std::memory_order_relaxed); }

Level parse_level(const std::string& name) {
  for (Level l : {Level::debug, Level::info, Level::warn, Level::error, Level::off})
    if (name == level_name(l)) return l;
  FC_THROW("unknown log level '", name, "' (expected debug, info, warn, error or off)");
}

void write(Level l, const std::string& message) {
  using namespace std::chrono;
  const auto now = system_clock::now();
  const std::time_t t = system_clock::to_time_t(now);
  const int ms = static_cast<int>(duration_cast<milliseconds>(now.time_since_epoch()).count() % 1000);
  std::tm tm{};
  localtime_r(&t, &tm);
  char stamp[32];
  std::strftime(stamp, sizeof stamp, "%Y-%m-%d %H:%M:%S", &tm);
  std::lock_guard<std::mutex> lock(g_mutex);
  std::fprintf(stderr, "[%s.%03d] [%s] %s\n", stamp, ms, level_name(l), message.c_str());
}

}  // namespace foldcore::log
