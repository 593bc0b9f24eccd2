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
  EXPECT_EQ(format(l), "[quant 3/9] calibrate · calib 2/8 · 14 s elapsed · ~30 s left");
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

TEST(Progress, DurationsReadNaturally) {
  EXPECT_EQ(format_duration(0.4), "0 s");
  EXPECT_EQ(format_duration(59.4), "59 s");
  EXPECT_EQ(format_duration(185), "3 min 05 s");
  EXPECT_EQ(format_duration(3720), "1 h 02 min");
  EXPECT_EQ(format_duration(-5), "0 s");
}

}  // namespace
}  // namespace qbc::progress
