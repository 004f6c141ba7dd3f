#include "core/device.h"

#include "core/cuda_backend.h"
#include "core/error.h"
#include "core/host_waits.h"

namespace foldcore {

std::string Device::str() const { return is_cpu() ? "cpu" : "cuda:" + std::to_string(index); }

Device Device::parse(const std::string& s) {
  if (s == "cpu") return cpu();
  if (s == "cuda") return cuda(0);
  if (s.rfind("cuda:", 0) == 0 && s.size() > 5) {
    int idx = 0;
    for (size_t i = 5; i < s.size(); ++i) {
      FC_CHECK(s[i] >= '0' && s[i] <= '9', "bad device '", s, "' (expected cpu, cuda or cuda:N)");
      idx = idx * 10 + (s[i] - '0');
      FC_CHECK(idx < 1024, "bad device index in '", s, "'");
    }
    return cuda(idx);
  }
  FC_THROW("bad device '", s, "' (expected cpu, cuda or cuda:N)");
}

int cuda_device_count() {
  if (!cuda_built()) return 0;
  static const int n = detail::cuda_device_count_impl();
  return n;
}

Device parse_usable_device(const std::string& s) {
  const Device d = Device::parse(s);
  if (d.is_cpu()) return d;
  FC_CHECK(cuda_built(), "device '", s, "': this build of foldcore has no CUDA backend; use --device cpu");
  const int n = cuda_device_count();
  FC_CHECK(n > 0, "device '", s, "': no CUDA device is visible to this process (", detail::cuda_unavailable_reason(),
           "); use --device cpu");
  FC_CHECK(d.index < n, "device '", s, "': this process sees ", n, " CUDA device", n == 1 ? "" : "s", " (cuda:0",
           n == 1 ? "" : " to cuda:" + std::to_string(n - 1), ")");
  return d;
}

void set_device(Device d) {
  if (d.is_cuda()) detail::cuda_set_device(d.index);
}

size_t cuda_total_memory(Device d) {
  FC_CHECK(d.is_cuda(), "cuda_total_memory: ", d.str(), " is not a CUDA device");
  return detail::cuda_total_memory(d.index);
}

size_t cuda_free_memory(Device d) {
  FC_CHECK(d.is_cuda(), "cuda_free_memory: ", d.str(), " is not a CUDA device");
  return detail::cuda_free_memory(d.index);
}

void synchronize(Device d) {
  if (!d.is_cuda()) return;
  const detail::CountedWait wait(detail::WaitKind::synchronize);
  detail::cuda_device_synchronize(d.index);
}

}  // namespace foldcore
