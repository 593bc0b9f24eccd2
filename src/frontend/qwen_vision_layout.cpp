// The host side of the Qwen2(.5)-VL vision graph (qbc/frontend/qwen_vision.h): Qwen2.5-VL's
// get_window_index (windows of window_size pixels over the merged grid, row-major, the last
// row and column of windows cut short by the image edge; Qwen2-VL has none: the identity) and
// rot_pos_emb (each patch's row and column angles), computed for one grid; and Qwen3-VL's
// fast_pos_embed_interpolate (its learned position grid sampled at the image's patches).
#include <algorithm>
#include <cmath>

#include "qbc/frontend/position_interpolation.h"
#include "qbc/frontend/qwen_vision.h"

namespace qbc::frontend {

StatusOr<QwenVisionLayout> qwen_vision_layout(const VisionConfig& vc, const VisionGrid& grid) {
  const int64_t m = vc.merge, hd = vc.heads > 0 ? vc.width / vc.heads : 0;
  if (m <= 0 || grid.t <= 0 || grid.h <= 0 || grid.w <= 0 || grid.h % m != 0 || grid.w % m != 0) {
    return invalid_argument("vision grid ", grid.t, "x", grid.h, "x", grid.w,
                            ": the sides must be positive multiples of spatial_merge_size ", m);
  }
  if (hd <= 0 || hd % 4 != 0 || hd * vc.heads != vc.width) {
    return invalid_argument("vision hidden_size ", vc.width, " / num_heads ", vc.heads,
                            " must be a head_dim that is a multiple of 4 (2-D rotary)");
  }
  const bool windows = vc.tower == VisionTower::kQwen25Vit;
  const int64_t gh = grid.h / m, gw = grid.w / m;
  // Merged groups per window side; Qwen2-VL: one window over the whole frame.
  const int64_t win = windows ? vc.window_size / m / vc.patch_size : std::max(gh, gw);
  if (win <= 0) {
    return invalid_argument("vision window_size ", vc.window_size, " is smaller than one merged ",
                            "group of ", m * vc.patch_size, " pixels");
  }
  QwenVisionLayout out;
  out.grid = grid;
  for (int64_t t = 0; t < grid.t; ++t) {
    for (int64_t wr = 0; wr < gh; wr += win) {
      for (int64_t wc = 0; wc < gw; wc += win) {
        int64_t groups = 0;
        for (int64_t r = wr; r < std::min(wr + win, gh); ++r) {
          for (int64_t c = wc; c < std::min(wc + win, gw); ++c, ++groups)
            out.window_index.push_back(t * gh * gw + r * gw + c);
        }
        if (windows) out.window_tokens.push_back(groups * m * m);
      }
    }
  }
  // Angles: inv_freq over head_dim / 2 (HF's VisionRotaryEmbedding(head_dim // 2), theta 1e4),
  // the row's angles then the column's, evaluated in float64 and rounded once.
  const int64_t quarter = hd / 4, half = hd / 2;
  std::vector<double> inv(static_cast<size_t>(quarter));
  for (int64_t i = 0; i < quarter; ++i)
    inv[static_cast<size_t>(i)] = 1.0 / std::pow(10000.0, static_cast<double>(2 * i) / half);
  const int64_t n = grid.patches();
  out.cos.resize(static_cast<size_t>(n * half));
  out.sin.resize(static_cast<size_t>(n * half));
  const int64_t per_frame_groups = gh * gw;
  int64_t row = 0;
  for (int64_t g : out.window_index) {
    const int64_t local = g % per_frame_groups;
    const int64_t br = local / gw, bc = local % gw;
    for (int64_t ir = 0; ir < m; ++ir) {
      for (int64_t ic = 0; ic < m; ++ic, ++row) {
        const double pos[2] = {static_cast<double>(br * m + ir), static_cast<double>(bc * m + ic)};
        for (int64_t k = 0; k < half; ++k) {
          const double a = pos[k / quarter] * inv[static_cast<size_t>(k % quarter)];
          out.cos[static_cast<size_t>(row * half + k)] = static_cast<float>(std::cos(a));
          out.sin[static_cast<size_t>(row * half + k)] = static_cast<float>(std::sin(a));
        }
      }
    }
  }
  return out;
}

StatusOr<std::vector<float>> qwen3_position_rows(const VisionConfig& vc, const VisionGrid& grid,
                                                 const std::vector<float>& table) {
  const int64_t width = vc.width, m = vc.merge;
  const auto side = static_cast<int64_t>(std::llround(
      std::sqrt(static_cast<double>(width > 0 ? static_cast<int64_t>(table.size()) / width : 0))));
  if (width <= 0 || side <= 0 || side * side * width != static_cast<int64_t>(table.size())) {
    return invalid_argument("visual.pos_embed.weight: ", table.size(),
                            " values are not a square grid of rows of the tower's width ", width);
  }
  if (m <= 0 || grid.h <= 0 || grid.w <= 0 || grid.h % m != 0 || grid.w % m != 0) {
    return invalid_argument("vision grid ", grid.h, "x", grid.w,
                            ": the sides must be positive multiples of spatial_merge_size ", m);
  }
  // The grid's rows in row-major order, then put in merge-group order (HF's view(t, h/m, m,
  // w/m, m, C).permute(0, 1, 3, 2, 4, 5)), every frame the same.
  QBC_ASSIGN_OR_RETURN(const std::vector<float> grid_rows,
                       linspace_bilinear_position_rows(table, side, width, grid.h, grid.w));
  std::vector<float> out(static_cast<size_t>(grid.patches() * width));
  int64_t row = 0;
  for (int64_t t = 0; t < grid.t; ++t) {
    for (int64_t br = 0; br < grid.h / m; ++br) {
      for (int64_t bc = 0; bc < grid.w / m; ++bc) {
        for (int64_t ir = 0; ir < m; ++ir) {
          for (int64_t ic = 0; ic < m; ++ic, ++row) {
            const int64_t src = (br * m + ir) * grid.w + bc * m + ic;
            std::copy(grid_rows.begin() + src * width, grid_rows.begin() + (src + 1) * width,
                      out.begin() + row * width);
          }
        }
      }
    }
  }
  return out;
}

std::vector<float> qwen_window_rows(const std::vector<float>& rows, int64_t width, int64_t group,
                                    const std::vector<int64_t>& order, bool inverse) {
  std::vector<float> out(rows.size());
  const size_t block = static_cast<size_t>(width * group);
  for (size_t k = 0; k < order.size(); ++k) {
    const size_t src = inverse ? k : static_cast<size_t>(order[k]);
    const size_t dst = inverse ? static_cast<size_t>(order[k]) : k;
    std::copy(rows.begin() + static_cast<std::ptrdiff_t>(src * block),
              rows.begin() + static_cast<std::ptrdiff_t>((src + 1) * block),
              out.begin() + static_cast<std::ptrdiff_t>(dst * block));
  }
  return out;
}

}  // namespace qbc::frontend
