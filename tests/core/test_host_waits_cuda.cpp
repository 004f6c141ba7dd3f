// core/host_waits.h on a CUDA device: what is counted as a wait, what is not, and the staged
// host → device copies (their data arrives, in order, also when the page-locked ring wraps around
// many times and when a later copy overwrites the slot of an earlier one's source).
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "core/host_waits.h"
#include "core/profile.h"
#include "core/stream.h"
#include "core/tensor.h"
#include "test_util.h"

namespace foldcore {
namespace {

TEST(HostWaits, CopiesAndSynchronizesAreCountedStagedCopiesAreNot) {
  FC_REQUIRE_CUDA();
  const Device d = Device::cuda();
  const Tensor host = Tensor::from_vector({1, 2, 3, 4}, {4});
  reset_host_waits();
  const Tensor dev = host.to(d);  // 16 bytes: staged
  HostWaits w = host_waits();
  EXPECT_EQ(w.staged_copies_to_device, 1);
  EXPECT_EQ(w.waits(), 0);
  EXPECT_EQ(dev.to_vector(), host.to_vector());  // one copy to the host
  w = host_waits();
  EXPECT_EQ(w.copies_to_host, 1);
  EXPECT_EQ(w.bytes_to_host, 16);
  current_stream(d).synchronize();
  synchronize(d);
  EXPECT_EQ(host_waits().synchronizes, 2);
  {
    const detail::UncountedWaits quiet;
    synchronize(d);
    (void)dev.to(Device::cpu());
  }
  EXPECT_EQ(host_waits().waits(), 3);
  // Larger than kStagedCopyMaxBytes: a synchronous copy, counted.
  const int64_t big = static_cast<int64_t>(kStagedCopyMaxBytes / 4) + 1;
  const Tensor large = Tensor::full({big}, 2.5, DType::f32);
  const Tensor large_dev = large.to(d);
  EXPECT_EQ(host_waits().sync_copies_to_device, 1);
  EXPECT_EQ(large_dev.to_vector(), large.to_vector());
  // A non-contiguous host tensor of another dtype: a contiguous image staged, converted there.
  const Tensor t = Tensor::from_vector({1, 2, 3, 4, 5, 6}, {2, 3}).transpose(0, 1);
  Tensor into = Tensor::empty({3, 2}, DType::bf16, d);
  reset_host_waits();
  into.copy_(t);
  EXPECT_EQ(host_waits().staged_copies_to_device, 1);
  EXPECT_EQ(host_waits().waits(), 0);
  EXPECT_EQ(into.to(DType::f32).to_vector(), t.contiguous().to_vector());
}

// The time of the waits: a 64 MiB copy to the host is timed (more than 0, no more than the call's
// own wall time), the same copy under UncountedWaits adds nothing, and reset_host_waits clears it.
TEST(HostWaits, WaitTimeIsTheHostTimeBlockedInTheWaits) {
  FC_REQUIRE_CUDA();
  const Device d = Device::cuda();
  const Tensor dev = Tensor::full({int64_t{16} << 20}, 1.5, DType::f32, d);
  synchronize(d);
  reset_host_waits();
  EXPECT_EQ(host_waits().wait_ns, 0);
  const auto t0 = std::chrono::steady_clock::now();
  const Tensor host = dev.to(Device::cpu());
  const int64_t call_ns =
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0).count();
  const HostWaits w = host_waits();
  EXPECT_EQ(w.copies_to_host, 1);
  EXPECT_GT(w.wait_ns, 0);
  EXPECT_LE(w.wait_ns, call_ns);
  EXPECT_EQ(host.to_vector()[12345], 1.5f);
  {
    const detail::UncountedWaits quiet;
    (void)dev.to(Device::cpu());
    synchronize(d);
  }
  EXPECT_EQ(host_waits().wait_ns, w.wait_ns);
  EXPECT_EQ((host_waits() - w).waits(), 0);
  reset_host_waits();
  EXPECT_EQ(host_waits().wait_ns, 0);
}

// 64 copies of 256 KiB each through the 8 MiB ring (two wraps), each from a host buffer that is
// overwritten right after the call returns, into 64 device tensors: every one holds its own values.
// Also Event::query on a recorded event.
TEST(HostWaits, StagedCopiesArriveWhenTheRingWraps) {
  FC_REQUIRE_CUDA();
  const Device d = Device::cuda();
  {
    Event e(d);
    e.record();
    e.synchronize();
    EXPECT_TRUE(e.query());
  }
  const int64_t n = 64 * 1024;  // 256 KiB of floats
  std::vector<Tensor> dev;
  Tensor host = Tensor::empty({n}, DType::f32);
  reset_host_waits();
  for (int k = 0; k < 64; ++k) {
    host.fill_(static_cast<double>(k));
    dev.push_back(host.to(d));
  }
  host.fill_(-1.0);
  EXPECT_EQ(host_waits().staged_copies_to_device, 64);
  // The slots reused on the wraps belonged to completed copies (the emulation's copies complete at
  // once): dropped without a wait, so none is counted.
  EXPECT_EQ(host_waits().waits(), 0);
  for (int k = 0; k < 64; ++k) {
    const std::vector<float> v = dev[static_cast<size_t>(k)].to_vector();
    ASSERT_EQ(v.front(), static_cast<float>(k));
    ASSERT_EQ(v.back(), static_cast<float>(k));
  }
}

// A profile stage reports the waits made inside it, not the profiler's own at its borders.
TEST(HostWaits, ProfileStagesCountTheirWaits) {
  FC_REQUIRE_CUDA();
  const profile::EnabledGuard profiling;
  ASSERT_TRUE(profile::enabled());
  const Device d = Device::cuda();
  const Tensor x = Tensor::from_vector({1, 2}, {2}).to(d);
  profile::reset();
  {
    const profile::Scope outer("outer", d);
    {
      const profile::Scope quiet("quiet", d);
      (void)Tensor::from_vector({3}, {1}).to(d);  // staged: no wait
    }
    const profile::Scope loud("loud", d);
    (void)x.to_vector();
  }
  std::map<std::string, HostWaits> by;
  for (const profile::Stage& s : profile::report()) by[s.path] = s.waits;
  EXPECT_EQ(by.at("outer/quiet").waits(), 0);
  EXPECT_EQ(by.at("outer/quiet").staged_copies_to_device, 1);
  EXPECT_EQ(by.at("outer/loud").copies_to_host, 1);
  EXPECT_EQ(by.at("outer/loud").waits(), 1);
  EXPECT_EQ(by.at("outer").waits(), 1);
}

}  // namespace
}  // namespace foldcore
