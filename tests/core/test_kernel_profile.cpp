// The kernel profiler's host side (core/kernel_profile.h): the kernel name taken from a function
// signature, names interned, and nothing recorded while it is off. Its timing of real device
// work is checked in test_kernel_profile_cuda.cpp.
#include <gtest/gtest.h>

#include <string>

#include "core/kernel_profile.h"

namespace foldcore::kernel_profile {
namespace {

TEST(KernelProfile, NameFromASignature) {
  EXPECT_STREQ(detail::kernel_name_from_signature(
                   "const char* foldcore::kernel_name() [with auto Kernel = foldcore::ops::cuda::my_kernel<float, 32>]"),
               "foldcore::ops::cuda::my_kernel<float, 32>");
  // Further template parameters after a ';' are not part of the name.
  EXPECT_STREQ(detail::kernel_name_from_signature(
                   "void foldcore::launch_kernel(dim3) [with auto Kernel = k<(anonymous namespace)::Op, 2>; Args = {int}]"),
               "k<(anonymous namespace)::Op, 2>");
  // A signature without the marker is kept whole.
  EXPECT_STREQ(detail::kernel_name_from_signature("plain"), "plain");
}

TEST(KernelProfile, InternedNamesAreStable) {
  const char* a = detail::intern(std::string("gemm bf16 ") + "64x64x64");
  const char* b = detail::intern("gemm bf16 64x64x64");
  EXPECT_EQ(a, b);
  EXPECT_STREQ(a, "gemm bf16 64x64x64");
}

TEST(KernelProfile, OffByDefaultAndEmpty) {
  // FOLDCORE_PROFILE_KERNELS is not set by the test runner.
  EXPECT_FALSE(enabled());
  const Report r = collect();
  EXPECT_EQ(r.launches, 0);
  EXPECT_TRUE(r.kernels.empty());
  EXPECT_EQ(r.busy_seconds, 0.0);
  EXPECT_EQ(r.idle_seconds(), 0.0);
}

}  // namespace
}  // namespace foldcore::kernel_profile
