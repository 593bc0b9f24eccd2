// What a qbc process does once at start-up, before any command runs.
#pragma once

namespace qbc::driver {

/// Routes libprotobuf's own log lines (a junk MBLT's invalid UTF-8) to the debug log (-vv)
/// instead of stderr, where they would stand next to the located error a command reports.
/// Idempotent.
void startup();

}  // namespace qbc::driver
