// foldcore::Error: the one exception type. Carries a message and a stack of context lines
// ("while reading file X", "in layer Y") added as it propagates.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace foldcore {

class Error : public std::runtime_error {
 public:
  explicit Error(std::string message);

  // Adds an outer context line; what() shows contexts outermost first.
  Error& add_context(std::string context);
  const std::string& message() const { return message_; }
  const std::vector<std::string>& contexts() const { return contexts_; }
  const char* what() const noexcept override { return full_.c_str(); }

 private:
  void rebuild();
  std::string message_;
  std::vector<std::string> contexts_;
  std::string full_;
};

// An allocation the allocator could not satisfy even after giving its cache back (device or host
// memory): an Error whose type says so, for callers that can trade memory back (the trainer names
// the setting that kept activations, recompute_keep_blocks).
class OutOfMemoryError : public Error {
 public:
  using Error::Error;
};

namespace detail {
template <typename... Args> std::string concat(Args&&... args) {
  std::ostringstream os;
  (os << ... << std::forward<Args>(args));
  return os.str();
}
[[noreturn]] void throw_check_failure(const char* file, int line, const char* cond, const std::string& msg);
}  // namespace detail

// Runs `fn`; if it throws foldcore::Error, adds `context` and rethrows.
template <typename Fn> decltype(auto) with_context(const std::string& context, Fn&& fn) {
  try {
    return fn();
  } catch (Error& e) {
    e.add_context(context);
    throw;
  }
}

}  // namespace foldcore

// FC_CHECK(cond, parts...): throws foldcore::Error("<parts>  [file:line: cond]") when cond is false.
#define FC_CHECK(cond, ...)                                                                        \
  do {                                                                                             \
    if (!(cond))                                                                                   \
      ::foldcore::detail::throw_check_failure(__FILE__, __LINE__, #cond,                           \
                                              ::foldcore::detail::concat("" __VA_OPT__(, ) __VA_ARGS__)); \
  } while (0)

#define FC_THROW(...) throw ::foldcore::Error(::foldcore::detail::concat(__VA_ARGS__))
