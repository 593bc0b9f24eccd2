#include "qbc/support/status.h"

namespace qbc {

std::string_view code_name(Code code) {
  switch (code) {
    case Code::kOk: return "ok";
    case Code::kInvalidArgument: return "invalid-argument";
    case Code::kNotFound: return "not-found";
    case Code::kUnimplemented: return "unimplemented";
    case Code::kFailedPrecondition: return "failed-precondition";
    case Code::kResourceExhausted: return "resource-exhausted";
    case Code::kDataLoss: return "data-loss";
    case Code::kInternal: return "internal";
  }
  return "unknown";
}

std::string Status::to_string() const {
  if (ok()) return "ok";
  return std::string(code_name(code_)) + ": " + message_;
}

}  // namespace qbc
