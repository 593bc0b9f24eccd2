// rope's frequency position (docs/numerics.md "rope"): a call split into row tiles rotates
// exactly as the whole call when each tile names the call's last position, and the default
// (-1) is the call's own last position.
#include "qbc/numerics/rope.h"

#include <gtest/gtest.h>

#include <vector>

#include "qbc/numerics/fp16.h"

namespace qbc::numerics {
namespace {

/// Two heads of dim 8, rotary dim 6, with LongRoPE frequencies past 4 positions.
Rope long_rope() {
  Rope r;
  r.heads = 2;
  r.head_dim = 8;
  r.rotary_dim = 6;
  r.inv_freq = {1.0, 0.1, 0.01};
  r.long_inv_freq = {0.5, 0.05, 0.005};
  r.original_max_positions = 4;
  return r;
}

std::vector<float> rows(int64_t s, int64_t width) {
  std::vector<float> x(static_cast<size_t>(s * width));
  for (size_t i = 0; i < x.size(); ++i) x[i] = round_fp16(0.37 * static_cast<double>(i % 11) - 1.3);
  return x;
}

TEST(NumericsRope, TilesNamingTheCallsLastPositionEqualTheWholeCall) {
  const Rope r = long_rope();
  const int64_t s = 6, w = 16;
  const std::vector<float> x = rows(s, w);
  std::vector<float> whole(x.size()), tiled(x.size()), plain(x.size());
  rope(x.data(), s, 0, r, whole.data());  // last position 5: long frequencies
  rope(x.data(), 3, 0, r, tiled.data(), 5);
  rope(x.data() + 3 * w, 3, 3, r, tiled.data() + 3 * w, 5);
  EXPECT_EQ(whole, tiled);
  // The first tile alone (last position 2) uses the short frequencies: different bits.
  rope(x.data(), 3, 0, r, plain.data());
  EXPECT_NE(std::vector<float>(whole.begin(), whole.begin() + 3 * w),
            std::vector<float>(plain.begin(), plain.begin() + 3 * w));
  // -1 and the call's own last position are the same call.
  std::vector<float> own(x.size());
  rope(x.data(), 3, 0, r, own.data(), 2);
  EXPECT_EQ(std::vector<float>(own.begin(), own.begin() + 3 * w),
            std::vector<float>(plain.begin(), plain.begin() + 3 * w));
}

}  // namespace
}  // namespace qbc::numerics
