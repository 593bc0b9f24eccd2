// QBC_CHECK: internal invariants only. Never use it on anything derived from
// input files, configs or command lines; those return a Status.
#pragma once

#include <sstream>

namespace qbc::internal {

/// Prints "internal error at file:line: check `cond` failed: <message>" and
/// aborts. Used by QBC_CHECK; do not call directly.
[[noreturn]] void check_failed(const char* file, int line, const char* cond, const std::string& msg);

/// Collects the streamed message of a failing QBC_CHECK and aborts in its destructor.
class CheckFailure {
 public:
  CheckFailure(const char* file, int line, const char* cond) : file_(file), line_(line), cond_(cond) {}
  ~CheckFailure() { check_failed(file_, line_, cond_, os_.str()); }
  template <typename T>
  CheckFailure& operator<<(const T& v) {
    os_ << v;
    return *this;
  }

 private:
  const char* file_;
  int line_;
  const char* cond_;
  std::ostringstream os_;
};

}  // namespace qbc::internal

/// Aborts with exit code 70 and a message when `cond` is false; always on.
#define QBC_CHECK(cond) \
  if (cond) {           \
  } else                \
    ::qbc::internal::CheckFailure(__FILE__, __LINE__, #cond)
