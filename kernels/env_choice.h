// The initial value of a kernel-form switch (ops::set_attention_pipeline, …) from the environment.
#pragma once

#include <cstdlib>
#include <initializer_list>
#include <string>
#include <string_view>

#include "core/error.h"

namespace foldcore::ops::detail {

// The index in `values` of the environment variable's value; unset or empty: 0. Any other value
// throws, naming the variable and the values it takes.
inline int choice_from_env(const char* var, std::initializer_list<std::string_view> values) {
  const char* e = std::getenv(var);
  if (e == nullptr || *e == '\0') return 0;
  int i = 0;
  for (std::string_view v : values) {
    if (v == e) return i;
    ++i;
  }
  std::string expected;
  for (std::string_view v : values) expected += (expected.empty() ? "" : " or ") + std::string(v);
  FC_THROW(var, "=", e, ": expected ", expected);
}

}  // namespace foldcore::ops::detail
