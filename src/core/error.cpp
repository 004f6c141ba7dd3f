#include "core/error.h"

#include <cstring>

namespace foldcore {

Error::Error(std::string message) : std::runtime_error(message), message_(std::move(message)) { rebuild(); }

Error& Error::add_context(std::string context) {
  contexts_.push_back(std::move(context));
  rebuild();
  return *this;
}

void Error::rebuild() {
  full_.clear();
  for (auto it = contexts_.rbegin(); it != contexts_.rend(); ++it) {
    full_ += *it;
    full_ += ": ";
  }
  full_ += message_;
}

namespace detail {
void throw_check_failure(const char* file, int line, const char* cond, const std::string& msg) {
  const char* base = std::strrchr(file, '/');
  base = base ? base + 1 : file;
  std::string text = msg.empty() ? std::string("check failed") : msg;
  text += concat("  [", base, ":", line, ": ", cond, "]");
  throw Error(std::move(text));
}
}  // namespace detail

}  // namespace foldcore
