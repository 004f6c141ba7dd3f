// Helpers shared by the data-pipeline tests.
#pragma once

#include <functional>
#include <string>

#include "core/error.h"

namespace foldcore::data {

// The message of the foldcore::Error that fn throws, or "" when it throws none.
inline std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace foldcore::data
