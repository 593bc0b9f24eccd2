// Cancellation of long work: Ctrl-C (SIGINT) and SIGTERM.
//
// A signal handler may only set a flag, so the handler of a SignalScope does just that,
// and long loops poll the flag at safe points (a calibration sample, a block, a pass, a
// section of the MXQ writer) with cancel::check(), which turns it into an error Status.
// That status unwinds like any error: the RAII owners of temporary folders and partial
// outputs remove them on the way up. The CLI treats any failure once cancellation was
// requested as the interruption: it prints "interrupted" and exits 128 + the signal's
// number (130 for Ctrl-C, 143 for SIGTERM), whatever error a cut-short step reported.
#pragma once

#include <string_view>

#include "qbc/support/status.h"

namespace qbc::cancel {

/// Whether cancellation was requested (a signal under a SignalScope, or request()).
bool requested();
/// Requests cancellation, as the signal handler does; `signal` is what the CLI's exit code
/// reports (0: none, exit 130). Async-signal-safe.
void request(int signal = 0);
/// Forgets a request (for tests and for a process that goes on after a cancelled job).
void reset();
/// The signal that requested cancellation, or 0.
int signal_number();
/// The process exit code of an interrupted command: 128 + the signal (SIGINT when none).
int exit_code();

/// A safe point: an error naming `where` ("interrupted at calibration sample 3") once
/// cancellation was requested, OK otherwise. Cheap (one relaxed atomic load). Its code
/// (kFailedPrecondition) is only what a caller that ignores requested() would see.
Status check(std::string_view where);

/// While alive, SIGINT and SIGTERM request cancellation instead of ending the process. A
/// second signal ends it at once (the handler is reset to the default after the first).
/// A signal that was ignored when the scope began (a job started with `&` by a
/// non-interactive shell, `nohup`-like launchers) stays ignored. Scopes do not nest.
class SignalScope {
 public:
  SignalScope();
  ~SignalScope();
  SignalScope(const SignalScope&) = delete;
  SignalScope& operator=(const SignalScope&) = delete;
};

}  // namespace qbc::cancel
