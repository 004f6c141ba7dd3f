// Stage timing (core/profile.h): nested scopes are named by their path, repeated stages add up,
// reset clears. FOLDCORE_PROFILE is read once per process, so the test sets it before the first
// use (ctest runs every test in a process of its own).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "autograd/autograd.h"
#include "core/profile.h"
#include "core/tensor.h"

namespace foldcore {
namespace {

TEST(Profile, NestedScopesAddUpByPath) {
  const profile::EnabledGuard profiling;
  ASSERT_TRUE(profile::enabled());
  profile::reset();
  for (int i = 0; i < 3; ++i) {
    const profile::Scope outer("iteration", Device::cpu());
    {
      const profile::Scope inner("trunk", Device::cpu());
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    const profile::Scope other("heads", Device::cpu());
  }
  const std::vector<profile::Stage> r = profile::report();
  ASSERT_EQ(r.size(), 3u);  // in first-exit order: the inner stages close first
  EXPECT_EQ(r[0].path, "iteration/trunk");
  EXPECT_EQ(r[1].path, "iteration/heads");
  EXPECT_EQ(r[2].path, "iteration");
  for (const profile::Stage& s : r) EXPECT_EQ(s.count, 3) << s.path;
  EXPECT_GE(r[0].seconds, 3 * 0.002);                    // slept 2 ms three times
  EXPECT_GE(r[2].seconds, r[0].seconds + r[1].seconds);  // the enclosing stage holds both
  profile::reset();
  EXPECT_TRUE(profile::report().empty());
}

// held_bytes: what a stage left allocated (the allocator's current bytes at exit minus at entry),
// summed over its runs; a stage that frees what it allocated holds nothing, one that frees an
// older tensor holds a negative amount.
TEST(Profile, HeldBytesAreWhatTheStageLeftAllocated) {
  const profile::EnabledGuard profiling;
  ASSERT_TRUE(profile::enabled());
  profile::reset();
  std::vector<Tensor> kept;
  for (int i = 0; i < 2; ++i) {
    const profile::Scope s("keeps", Device::cpu());
    kept.push_back(Tensor::empty({1024, 256}, DType::f32));  // 1 MiB each run
    const Tensor scratch = Tensor::empty({4096}, DType::f32);  // freed at the stage's end
  }
  {
    const profile::Scope s("transient", Device::cpu());
    const Tensor t = Tensor::empty({1 << 20}, DType::f32);
  }
  {
    const profile::Scope s("frees", Device::cpu());
    kept.pop_back();
  }
  std::map<std::string, int64_t> held;
  for (const profile::Stage& st : profile::report()) held[st.path] = st.held_bytes;
  EXPECT_EQ(held.at("keeps"), 2 * 1024 * 256 * 4);
  EXPECT_EQ(held.at("transient"), 0);
  EXPECT_EQ(held.at("frees"), -1024 * 256 * 4);
  profile::reset();
}

// The autograd engine makes each node's backward a stage of its own, named by the op, under the
// stage that runs the backward: where a training step's backward goes, op by op.
TEST(Profile, BackwardNodesAreStagesNamedByTheirOp) {
  const profile::EnabledGuard profiling;
  ASSERT_TRUE(profile::enabled());
  profile::reset();
  const autograd::Variable a(Tensor::full({4, 3}, 1.0, DType::f32), true), b(Tensor::full({4, 3}, 1.0, DType::f32), true);
  const autograd::Variable loss = autograd::sum(autograd::mul(autograd::add(a, b), b), {0, 1});
  {
    const profile::Scope stage("backward", Device::cpu());
    autograd::backward(loss);
  }
  std::vector<std::string> paths;
  for (const profile::Stage& s : profile::report()) paths.push_back(s.path);
  for (const char* op : {"backward/sum", "backward/mul", "backward/add"})
    EXPECT_NE(std::find(paths.begin(), paths.end(), op), paths.end()) << op;
  EXPECT_EQ(paths.back(), "backward");
  profile::reset();
}

}  // namespace
}  // namespace foldcore
