// A learned position table resampled to another patch grid: as transformers' CLIP and SigLIP
// `interpolate_pos_encoding` do it (the table's square grid of rows as a [width, side, side]
// image through torch.nn.functional.interpolate(mode="bicubic", align_corners=False), then
// back to rows; docs/multimodal.md, "Other image sizes for CLIP"), or as Qwen3-VL's
// `fast_pos_embed_interpolate` samples it (bilinear at linspace points; "The Qwen3-VL tower").
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

/// `table` [side · side, width] sampled bilinearly at torch.linspace(0, side − 1, out_h) x
/// linspace(0, side − 1, out_w) (HF's fast_pos_embed_interpolate: the lower index truncated, the
/// upper one clipped to the last row), rows in row-major order [out_h · out_w, width], evaluated
/// in float64 and rounded once. kInvalidArgument as bicubic_position_rows.
StatusOr<std::vector<float>> linspace_bilinear_position_rows(const std::vector<float>& table,
                                                             int64_t side, int64_t width,
                                                             int64_t out_h, int64_t out_w);

}  // namespace qbc::frontend
