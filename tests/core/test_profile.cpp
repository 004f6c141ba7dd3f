// Stage timing (core/profile.h): nested scopes are named by their path, repeated stages add up,
// reset clears. FOLDCORE_PROFILE is read once per process, so the test sets it before the first
// use (ctest runs every test in a process of its own).
#include <gtest/gtest.h>

#include <cstdlib>
#include <thread>

#include "core/profile.h"

namespace foldcore {
namespace {

TEST(Profile, NestedScopesAddUpByPath) {
  ::setenv("FOLDCORE_PROFILE", "1", 1);
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

}  // namespace
}  // namespace foldcore
