// The live progress line's text: pipeline step, counted work, elapsed and remaining time.
#include "qbc/support/progress.h"

#include <gtest/gtest.h>

namespace qbc::progress {
namespace {

TEST(Progress, FormatsStepWorkElapsedAndRemaining) {
  Line l;
  l.stage = "quant";
  l.step = 3;
  l.steps = 9;
  l.pass = "calibrate";
  l.unit = "calib";
  l.done = 2;
  l.total = 8;
  l.step_seconds = 10;
  l.seconds = 14;
  EXPECT_DOUBLE_EQ(remaining_seconds(l), 30.0);  // 10 s for 2 of 8: 6 more at 5 s each
  EXPECT_DOUBLE_EQ(rate(l), 0.2);
  EXPECT_EQ(format(l), "[quant 3/9] calibrate · calib 2/8 · 5 s each · 14 s elapsed · ~30 s left");
}

TEST(Progress, UnknownRemainingIsLeftOutAndOutsideAPipelineOnlyTheWorkShows) {
  Line l;
  l.unit = "eval";
  l.total = 5;
  l.seconds = 3;
  EXPECT_LT(remaining_seconds(l), 0);  // nothing done yet
  EXPECT_EQ(format(l), "eval 0/5 · 3 s elapsed");
  l.done = 6;  // more than the total: no estimate
  EXPECT_LT(remaining_seconds(l), 0);
}

TEST(Progress, RatesReadAsPerSecondWhenFastAndAsTimeEachWhenSlow) {
  Line l;
  l.unit = "calib";
  l.total = 768;
  EXPECT_LT(rate(l), 0);  // nothing done
  EXPECT_EQ(format_rate(rate(l)), "");
  l.done = 300;
  EXPECT_LT(rate(l), 0);  // no time elapsed
  l.step_seconds = 60;
  EXPECT_DOUBLE_EQ(rate(l), 5.0);
  EXPECT_EQ(format_rate(rate(l)), "5.0/s");
  EXPECT_EQ(format_rate(0.25), "4 s each");
  EXPECT_EQ(format_rate(1.0 / 150), "2 min 30 s each");
  l.seconds = 75;
  EXPECT_EQ(format(l), "calib 300/768 · 5.0/s · 1 min 15 s elapsed · ~1 min 34 s left");
}

// The heartbeat's schedule on a fake clock: due `interval` after work began, then
// `interval` after each line; never when off.
TEST(Progress, HeartbeatIsDueOneIntervalAfterWorkBeganAndAfterEachLine) {
  Heartbeat hb(30.0);
  hb.restart(100.0);  // work began at t = 100 s
  EXPECT_FALSE(hb.due(100.0));
  EXPECT_FALSE(hb.due(129.9));
  EXPECT_DOUBLE_EQ(hb.wait(110.0, 1.0), 20.0);
  EXPECT_TRUE(hb.due(130.0));
  EXPECT_DOUBLE_EQ(hb.wait(131.0, 1.0), 0.0);
  hb.restart(131.0);  // printed late (the ticker woke at 131): the next is 30 s after that
  EXPECT_FALSE(hb.due(160.0));
  EXPECT_TRUE(hb.due(161.0));
  // Over a minute-long run, a line at least every interval: 2 lines in 60 s of work.
  Heartbeat minute(30.0);
  minute.restart(0.0);
  int lines = 0;
  for (double t = 0; t <= 60.0; t += 0.5) {
    if (minute.due(t)) {
      ++lines;
      minute.restart(t);
    }
  }
  EXPECT_EQ(lines, 2);

  Heartbeat off(0.0);
  off.restart(0.0);
  EXPECT_FALSE(off.due(1e9));
  EXPECT_DOUBLE_EQ(off.wait(5.0, 1.0), 1.0);
}

TEST(Progress, DurationsReadNaturally) {
  EXPECT_EQ(format_duration(0.4), "0 s");
  EXPECT_EQ(format_duration(59.4), "59 s");
  EXPECT_EQ(format_duration(185), "3 min 05 s");
  EXPECT_EQ(format_duration(3720), "1 h 02 min");
  EXPECT_EQ(format_duration(-5), "0 s");
}

}  // namespace
}  // namespace qbc::progress
