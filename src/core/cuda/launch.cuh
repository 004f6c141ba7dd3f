// The one way FoldCore launches a kernel:
//   launch_kernel<my_kernel<T>>(grid, block, dynamic_smem_bytes, stream, args...)
// is `my_kernel<T><<<grid, block, dynamic_smem_bytes, stream>>>(args...)` on a CUDA build, and
// under -DFOLDCORE_CUDA=EMULATE runs the kernel on the CPU through the host emulation
// (core/cuda/emu/cuda_emu.h), which names the kernel in its error messages. Launch errors are
// picked up as usual by FC_CUDA_CHECK_LAUNCH(). Every launch is counted (HostWaits::launches) and,
// when the kernel profiler is on (core/kernel_profile.h), timed under the kernel's name;
// launch_kernel_as<my_kernel>(name, …) times it under `name` instead (a literal or
// kernel_profile::detail::intern()'s copy: a kernel whose work depends on its arguments' shapes).
#pragma once

#include <cstddef>
#include <tuple>

#include "core/cuda/cuda_utils.cuh"
#include "core/host_waits.h"
#include "core/kernel_profile.h"

namespace foldcore {

// "my_kernel<float>" for launch_kernel<my_kernel<float>>: the profiler's and the emulation's name.
template <auto Kernel> const char* kernel_name() {
  static const char* name = ::foldcore::kernel_profile::detail::kernel_name_from_signature(__PRETTY_FUNCTION__);
  return name;
}

#if defined(FOLDCORE_CUDA_EMULATE)

template <auto Kernel, typename... Args>
inline void launch_kernel_as(const char* name, dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                             const Args&... args) {
  ::foldcore::detail::count_launch();
  const ::foldcore::kernel_profile::detail::Scope timed(name, stream);
  using Pack = std::tuple<const Args&...>;
  Pack pack(args...);
  // Every emulated thread calls the kernel with its own copies of the arguments, as CUDA passes
  // kernel parameters by value.
  auto body = [](void* p) { std::apply([](const Args&... a) { Kernel(a...); }, *static_cast<Pack*>(p)); };
  ::fc_emu::launch(name, reinterpret_cast<const void*>(Kernel), grid, block, smem, stream, body, &pack);
}
#else
template <auto Kernel, typename... Args>
inline void launch_kernel_as(const char* name, dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                             const Args&... args) {
  ::foldcore::detail::count_launch();
  const ::foldcore::kernel_profile::detail::Scope timed(::foldcore::kernel_profile::enabled() ? name : nullptr, stream);
  Kernel<<<grid, block, smem, stream>>>(args...);
}
#endif

template <auto Kernel, typename... Args>
inline void launch_kernel(dim3 grid, dim3 block, size_t smem, cudaStream_t stream, const Args&... args) {
  launch_kernel_as<Kernel>(kernel_name<Kernel>(), grid, block, smem, stream, args...);
}

}  // namespace foldcore
