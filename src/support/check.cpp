#include "qbc/support/check.h"

#include <cstdio>
#include <cstdlib>

#include "qbc/support/exit_codes.h"

namespace qbc::internal {

void check_failed(const char* file, int line, const char* cond, const std::string& msg) {
  std::fprintf(stderr, "qbc: internal error at %s:%d: check `%s` failed%s%s\n", file, line, cond,
               msg.empty() ? "" : ": ", msg.c_str());
  std::fprintf(stderr, "qbc: this is a bug in qbc; please report it with the command line used.\n");
  std::fflush(stderr);
  std::_Exit(kExitInternal);
}

}  // namespace qbc::internal
