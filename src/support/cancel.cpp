#include "qbc/support/cancel.h"

#include <atomic>
#include <csignal>
#include <string>

namespace qbc::cancel {
namespace {

// Lock-free atomics are async-signal-safe; the handler touches nothing else.
std::atomic<int> g_signal{0};
std::atomic<bool> g_requested{false};
static_assert(std::atomic<int>::is_always_lock_free && std::atomic<bool>::is_always_lock_free,
              "the signal handler needs lock-free atomics");

constexpr int kSignals[] = {SIGINT, SIGTERM};
struct sigaction g_saved[2];
bool g_installed[2] = {false, false};

extern "C" void on_signal(int sig) { request(sig); }

}  // namespace

bool requested() { return g_requested.load(std::memory_order_relaxed); }

void request(int signal) {
  if (signal != 0) g_signal.store(signal, std::memory_order_relaxed);
  g_requested.store(true, std::memory_order_relaxed);
}

void reset() {
  g_requested.store(false, std::memory_order_relaxed);
  g_signal.store(0, std::memory_order_relaxed);
}

int signal_number() { return g_signal.load(std::memory_order_relaxed); }

int exit_code() { return 128 + (signal_number() != 0 ? signal_number() : SIGINT); }

Status check(std::string_view where) {
  if (!requested()) return ok_status();
  return failed_precondition("interrupted at ", where);
}

SignalScope::SignalScope() {
  for (int i = 0; i < 2; ++i) {
    struct sigaction now {};
    if (sigaction(kSignals[i], nullptr, &now) != 0 || now.sa_handler == SIG_IGN) continue;
    struct sigaction sa {};
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    // SA_RESETHAND: a second signal takes the default action and ends the process at once.
    // SA_RESTART: a read or write in flight resumes instead of failing with EINTR.
    sa.sa_flags = SA_RESETHAND | SA_RESTART;
    g_installed[i] = sigaction(kSignals[i], &sa, &g_saved[i]) == 0;
  }
}

SignalScope::~SignalScope() {
  for (int i = 0; i < 2; ++i) {
    if (g_installed[i]) sigaction(kSignals[i], &g_saved[i], nullptr);
    g_installed[i] = false;
  }
}

}  // namespace qbc::cancel
