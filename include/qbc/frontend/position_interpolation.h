// A learned position table resampled to another patch grid, as transformers' CLIP and SigLIP
// `interpolate_pos_encoding` do it: the table's square grid of rows as a [width, side, side]
// image through torch.nn.functional.interpolate(mode="bicubic", align_corners=False), then
// back to rows (docs/multimodal.md, "Other image sizes for CLIP").
#pragma once

#include <cstdint>
#include <vector>

#include "qbc/support/status.h"

namespace qbc::frontend {

/// `table` [side · side, width] (row-major grid rows) resampled to [out_h · out_w, width] with
/// PyTorch's bicubic rule (align_corners = False, A = −0.75, source index scale · (i + 0.5) −
/// 0.5 with scale = side / out, the four taps clamped to the grid), evaluated in float64 and
/// rounded once. kInvalidArgument when the table is not side² rows of `width`, or a size is
/// not positive.
StatusOr<std::vector<float>> bicubic_position_rows(const std::vector<float>& table, int64_t side,
                                                   int64_t width, int64_t out_h, int64_t out_w);

}  // namespace qbc::frontend
