// Process start-up (see qbc/driver/startup.h).
#include "qbc/driver/startup.h"

#include "qbc/ir/serialize.h"

namespace qbc::driver {

void startup() { ir::route_protobuf_logs(); }

}  // namespace qbc::driver
