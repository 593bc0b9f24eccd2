#include "qbc/support/exit_codes.h"

namespace qbc {

int exit_code_for(const Status& status) {
  switch (status.code()) {
    case Code::kOk: return kExitOk;
    case Code::kInvalidArgument:
    case Code::kNotFound:
    case Code::kFailedPrecondition:
    case Code::kDataLoss: return kExitBadInput;
    case Code::kUnimplemented: return kExitUnsupported;
    case Code::kResourceExhausted: return kExitDoesNotFit;
    case Code::kInternal: return kExitInternal;
  }
  return kExitInternal;
}

}  // namespace qbc
