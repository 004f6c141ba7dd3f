#include "core/memory_info.h"

#include <unistd.h>

#include <algorithm>
#include <exception>
#include <fstream>
#include <string>

#include "core/allocator.h"

namespace foldcore {

int64_t device_memory_limit(Device device) {
  if (device.is_cuda()) return static_cast<int64_t>(cuda_total_memory(device));
  int64_t limit = static_cast<int64_t>(::sysconf(_SC_PHYS_PAGES)) * static_cast<int64_t>(::sysconf(_SC_PAGE_SIZE));
  // A container's cgroup (v2) limit is what the kernel enforces when lower than the RAM.
  std::ifstream cg("/sys/fs/cgroup/memory.max");
  std::string text;
  if (cg >> text && text != "max") {
    try {
      limit = std::min<int64_t>(limit, std::stoll(text));
    } catch (const std::exception&) {
      // not a number: keep the physical size
    }
  }
  return limit;
}

namespace {

// A "Key:   123 kB" line of /proc/meminfo, in bytes; -1 when absent.
int64_t meminfo_bytes(const std::string& key) {
  std::ifstream in("/proc/meminfo");
  std::string name;
  int64_t kb = 0;
  std::string unit;
  while (in >> name >> kb) {
    std::getline(in, unit);
    if (name == key + ":") return kb * 1024;
  }
  return -1;
}

// A cgroup v2 file holding one number ("max" or missing: -1).
int64_t cgroup_value(const char* path) {
  std::ifstream in(path);
  std::string text;
  if (!(in >> text) || text == "max") return -1;
  try {
    return std::stoll(text);
  } catch (const std::exception&) {
    return -1;
  }
}

// Blocks the device's allocator holds but has not handed out (reusable without the system).
int64_t allocator_cached(Device device) {
  const MemStats s = default_allocator(device).stats();
  return s.reserved > s.current ? static_cast<int64_t>(s.reserved - s.current) : 0;
}

}  // namespace

int64_t device_memory_available(Device device) {
  if (device.is_cuda()) return static_cast<int64_t>(cuda_free_memory(device)) + allocator_cached(device);
  int64_t avail = meminfo_bytes("MemAvailable");
  if (avail < 0) avail = static_cast<int64_t>(::sysconf(_SC_AVPHYS_PAGES)) * static_cast<int64_t>(::sysconf(_SC_PAGE_SIZE));
  const int64_t cg_max = cgroup_value("/sys/fs/cgroup/memory.max");
  const int64_t cg_used = cgroup_value("/sys/fs/cgroup/memory.current");
  if (cg_max > 0 && cg_used >= 0) avail = std::min(avail, std::max<int64_t>(cg_max - cg_used, 0));
  return avail + allocator_cached(device);
}

}  // namespace foldcore
