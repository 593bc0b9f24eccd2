// Cancellation: the flag and its safe points, the exit code, and the signal scope (a real
// SIGINT / SIGTERM raised in this process sets the flag instead of ending it).
#include "qbc/support/cancel.h"

#include <gtest/gtest.h>

#include <csignal>

#include "qbc/support/exit_codes.h"

namespace qbc::cancel {
namespace {

struct CancelTest : ::testing::Test {
  void SetUp() override { reset(); }
  void TearDown() override { reset(); }
};

TEST_F(CancelTest, SafePointIsOkUntilRequestedThenNamesWhereItStopped) {
  EXPECT_FALSE(requested());
  EXPECT_TRUE(check("calibration sample 0").ok());
  request(SIGINT);
  EXPECT_TRUE(requested());
  EXPECT_EQ(signal_number(), SIGINT);
  const Status s = check("calibration sample 3");
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.message(), "interrupted at calibration sample 3");
  EXPECT_EQ(exit_code(), kExitInterrupted);
  EXPECT_EQ(kExitInterrupted, 128 + SIGINT);
  request(SIGTERM);
  EXPECT_EQ(exit_code(), 143);
  reset();
  request();  // no signal (a caller's own request): reported as Ctrl-C
  EXPECT_EQ(exit_code(), 130);
  reset();
  EXPECT_FALSE(requested());
  EXPECT_EQ(signal_number(), 0);
  EXPECT_TRUE(check("anywhere").ok());
}

TEST_F(CancelTest, SignalsUnderTheScopeRequestCancellationAndTheOldHandlerComesBack) {
  struct sigaction before {};
  ASSERT_EQ(sigaction(SIGINT, nullptr, &before), 0);
  {
    SignalScope scope;
    ASSERT_EQ(std::raise(SIGINT), 0);  // would end the test binary without the scope
    EXPECT_TRUE(requested());
    EXPECT_EQ(signal_number(), SIGINT);
  }
  struct sigaction after {};
  ASSERT_EQ(sigaction(SIGINT, nullptr, &after), 0);
  EXPECT_EQ(after.sa_handler, before.sa_handler);
  reset();
  {
    SignalScope scope;
    ASSERT_EQ(std::raise(SIGTERM), 0);
    EXPECT_TRUE(requested());
    EXPECT_EQ(signal_number(), SIGTERM);
  }
}

// A second signal is not caught: the handler resets to the default after the first, so a
// user who presses Ctrl-C twice ends the process at once.
TEST_F(CancelTest, TheHandlerIsResetAfterTheFirstSignal) {
  SignalScope scope;
  ASSERT_EQ(std::raise(SIGINT), 0);
  struct sigaction now {};
  ASSERT_EQ(sigaction(SIGINT, nullptr, &now), 0);
  EXPECT_EQ(now.sa_handler, SIG_DFL);
}

// A signal ignored when the scope begins (a background job of a non-interactive shell)
// stays ignored: the scope does not make it cancel the work.
TEST_F(CancelTest, AnIgnoredSignalStaysIgnored) {
  struct sigaction ignore {};
  struct sigaction saved {};
  ignore.sa_handler = SIG_IGN;
  sigemptyset(&ignore.sa_mask);
  ASSERT_EQ(sigaction(SIGINT, &ignore, &saved), 0);
  {
    SignalScope scope;
    ASSERT_EQ(std::raise(SIGINT), 0);
    EXPECT_FALSE(requested());
  }
  struct sigaction now {};
  ASSERT_EQ(sigaction(SIGINT, &saved, &now), 0);
  EXPECT_EQ(now.sa_handler, SIG_IGN);
}

}  // namespace
}  // namespace qbc::cancel
