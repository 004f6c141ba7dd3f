// Device identity and the process-wide device context (the only global mutable state allowed).
#pragma once

#include <cstdint>
#include <string>

namespace foldcore {

enum class DeviceType : uint8_t { cpu, cuda };

struct Device {
  DeviceType type = DeviceType::cpu;
  int index = 0;

  static constexpr Device cpu() { return Device{DeviceType::cpu, 0}; }
  static constexpr Device cuda(int i = 0) { return Device{DeviceType::cuda, i}; }
  constexpr bool is_cpu() const { return type == DeviceType::cpu; }
  constexpr bool is_cuda() const { return type == DeviceType::cuda; }
  constexpr bool operator==(const Device& o) const {
    return type == o.type && (type == DeviceType::cpu || index == o.index);
  }
  std::string str() const;
  // "cpu", "cuda", "cuda:N"; throws Error otherwise.
  static Device parse(const std::string& s);
};

// True when this build contains the CUDA backend.
bool cuda_built();
// Number of usable CUDA devices: 0 when not built with CUDA, no driver, or no device.
int cuda_device_count();
inline bool cuda_available() { return cuda_device_count() > 0; }
// The device a command line names (`--device`), parsed as Device::parse does and checked to be
// usable by this process: cpu, or a CUDA device below cuda_device_count(). Throws Error naming the
// device and why it is not (a build without CUDA; no device visible, with the CUDA runtime's
// reason, e.g. a driver older than the runtime; an index past the last device), before any work
// or output starts.
Device parse_usable_device(const std::string& s);
// Makes `d` the current CUDA device of the calling thread (no-op for cpu).
void set_device(Device d);
// Waits for all work on device `d` (no-op for cpu).
void synchronize(Device d);
// Total memory of CUDA device `d` in bytes; throws Error for cpu or without the CUDA backend.
size_t cuda_total_memory(Device d);
// Memory the driver can still hand out on CUDA device `d` (cudaMemGetInfo's free bytes; blocks
// cached by the caching allocator are not included); throws Error like cuda_total_memory.
size_t cuda_free_memory(Device d);

}  // namespace foldcore
