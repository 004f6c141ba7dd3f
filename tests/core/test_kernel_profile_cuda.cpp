// The kernel profiler (core/kernel_profile.h) on device work: every kernel, GEMM and device copy
// of a few ops is recorded once, under its own name, with a non-negative time; the records equal
// the launches counted by core/host_waits.h; the span covers the kernels, and the stage of each
// record is the profile stage it was issued in (with FOLDCORE_PROFILE=1). On the host emulation the events hold host
// timestamps around the emulated kernels, so the times are the emulation's, not a GPU's.
#include <gtest/gtest.h>

#include <string>

#include "core/host_waits.h"
#include "core/kernel_profile.h"
#include "core/profile.h"
#include "core/random.h"
#include "kernels/elementwise.h"
#include "kernels/gemm.h"
#include "test_util.h"

namespace foldcore::kernel_profile {
namespace {

// Enables the profiler for one test and restores it.
struct On {
  On() {
    reset();
    set_enabled(true);
  }
  ~On() {
    set_enabled(false);
    reset();
  }
};

bool has(const std::vector<Row>& rows, const std::string& part, int64_t calls) {
  for (const Row& r : rows)
    if (r.name.find(part) != std::string::npos && r.calls == calls) return true;
  return false;
}

TEST(KernelProfileCuda, RecordsEveryLaunchOnceByName) {
  FC_REQUIRE_CUDA();
  const Device gpu = Device::cuda();
  Generator gen(3);
  const Tensor a = randn({64, 32}, gen).to(gpu), b = randn({32, 48}, gen).to(gpu);
  const Tensor c = Tensor::empty({64, 48}, DType::f32, gpu);
  Tensor d = Tensor::empty({64, 48}, DType::f32, gpu);
  synchronize(gpu);
  const On on;
  reset_host_waits();
  ops::gemm(a, b, c);                // one GEMM
  ops::gemm(a, b, c);                // and another of the same shape
  ops::scale(c, 2.f, d);             // one kernel
  d.copy_(c);                        // one device-to-device copy
  const int64_t launches = host_waits().launches;
  const Report r = collect();
  EXPECT_EQ(r.launches, launches);
  EXPECT_TRUE(has(r.kernels, "gemm f32 64x48x32", 2)) << "the two GEMMs under one name";
  EXPECT_TRUE(has(r.kernels, "memcpy", 1));
  int64_t calls = 0;
  double sum = 0;
  for (const Row& row : r.kernels) {
    EXPECT_GE(row.seconds, 0.0) << row.name;
    calls += row.calls;
    sum += row.seconds;
  }
  EXPECT_EQ(calls, launches);
  EXPECT_NEAR(sum, r.busy_seconds, 1e-12);
  EXPECT_GE(r.span_seconds, 0.0);
  // A second collection starts empty.
  EXPECT_EQ(collect().launches, 0);
}

TEST(KernelProfileCuda, StagesAndNothingWhenOff) {
  FC_REQUIRE_CUDA();
  const Device gpu = Device::cuda();
  const Tensor x = Tensor::zeros({1024}, DType::f32, gpu), y = Tensor::empty({1024}, DType::f32, gpu);
  synchronize(gpu);
  ops::scale(x, 3.f, y);  // off: not recorded
  EXPECT_EQ(collect().launches, 0);
  const On on;
  {
    const profile::Scope stage("scaled", gpu);
    ops::scale(x, 3.f, y);
  }
  ops::scale(x, 3.f, y);
  const Report r = collect();
  ASSERT_EQ(r.launches, 2);
  // Stages exist only with FOLDCORE_PROFILE=1 (read once from the environment); off, every record
  // is outside any stage.
  int64_t scaled = 0, outside = 0;
  for (const Row& s : r.stages) {
    if (s.name.find("scaled") != std::string::npos) scaled += s.calls;
    if (s.name == "-") outside += s.calls;
  }
  EXPECT_EQ(scaled, profile::enabled() ? 1 : 0);
  EXPECT_EQ(outside, profile::enabled() ? 1 : 2);
  // By kernel and stage: "<kernel> @ <stage>", every record once.
  int64_t pairs = 0;
  for (const Row& p : r.kernel_stages) {
    EXPECT_NE(p.name.find("map_kernel"), std::string::npos) << p.name;
    EXPECT_NE(p.name.find(" @ "), std::string::npos) << p.name;
    pairs += p.calls;
  }
  EXPECT_EQ(pairs, 2);
  EXPECT_EQ(r.kernel_stages.size(), profile::enabled() ? 2u : 1u);
}

}  // namespace
}  // namespace foldcore::kernel_profile
