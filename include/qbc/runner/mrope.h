// M-RoPE host glue (Qwen2-VL, Qwen2.5-VL, Qwen3-VL): the 3-stream positions of a prompt with
// images, as transformers' `get_rope_index` computes them, and the rope_cos / rope_sin tables the
// language graph takes as inputs (docs/multimodal.md, "The language graph"). IR-free, so the float
// runtime, the compiler and the runtime that knows only the MXQ file share it.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "qbc/support/status.h"

namespace qbc::runner {

/// What the host needs to compute the rope tables of an M-RoPE graph.
struct MRopeSpec {
  int64_t head_dim = 0;
  double theta = 10000.0;
  /// Rotary frequencies per stream (temporal, height, width), in frequency order; the three sum
  /// to head_dim / 2 (config.json `rope_scaling.mrope_section`).
  std::array<int64_t, 3> section{};
  /// Qwen3-VL (`rope_scaling.mrope_interleaved`): the streams take the frequencies in turn
  /// instead of in sections. Frequency i follows height when i % 3 == 1 and i < 3 · section[1],
  /// width when i % 3 == 2 and i < 3 · section[2], else time (transformers'
  /// Qwen3VLTextRotaryEmbedding.apply_interleaved_mrope).
  bool interleaved = false;
};

/// The position stream (0 temporal, 1 height, 2 width) rotary frequency `i` follows.
int64_t mrope_stream(const MRopeSpec& spec, int64_t i);

/// The spec a language graph records in its metadata (`mrope.section`, `mrope.theta`,
/// `mrope.head_dim`, and `mrope.interleaved` = "1" when set); kNotFound when the graph has no
/// M-RoPE, kInvalidArgument naming the key when a value is malformed.
StatusOr<MRopeSpec> mrope_spec_from_metadata(const std::map<std::string, std::string>& metadata);

/// One image's grid as the language model sees it: HF's `image_grid_thw` with h and w divided
/// by the vision config's spatial_merge_size. One token per cell.
struct LlmGrid {
  int64_t t = 1, h = 0, w = 0;
};

/// A prompt's positions, stream-major: positions[s * n + i] is stream s (0 temporal, 1 height,
/// 2 width) of token i.
struct MRopePositions {
  std::vector<int64_t> positions;
  /// HF's `rope_deltas`: max position + 1 - n. A token generated after the prompt at sequence
  /// index j >= n has position j + delta in all three streams.
  int64_t delta = 0;
};

/// HF `get_rope_index` for a prompt whose images are `images`, in order. Image k occupies the
/// first run of `image_token_id` at or after the end of image k - 1, exactly h·w tokens; the
/// text before it continues from the previous chunk's largest position + 1 (0 at the start) in
/// all three streams; its cell (r, c) gets (base, base + r, base + c), base = the position the
/// next text token would have had. kInvalidArgument when the placeholder runs do not match the
/// grids (naming the token index); kUnimplemented for t > 1 (video).
StatusOr<MRopePositions> mrope_positions(const std::vector<int32_t>& tokens, int32_t image_token_id,
                                         const std::vector<LlmGrid>& images);

/// Text tokens only, sequence indices first .. first + n - 1 shifted by `delta`: all three
/// streams equal (the decode steps after a prompt, or a prompt without images, delta 0).
std::vector<int64_t> mrope_text_positions(int64_t first, int64_t n, int64_t delta);

/// cos / sin tables [n, head_dim / 2] for `positions` (stream-major [3, n]): frequency i, in
/// stream s(i) = mrope_stream(spec, i), has angle positions[s(i)][t] · theta^(-2i / head_dim),
/// computed in float64 (transformers' Qwen2_5_VLRotaryEmbedding + apply_multimodal_rotary_pos_emb,
/// whose `mrope_section * 2` split picks the same stream for i and i + head_dim / 2).
void mrope_tables(const MRopeSpec& spec, const std::vector<int64_t>& positions,
                  std::vector<double>* cos, std::vector<double>* sin);

/// The tables of one forward call of `n` tokens at sequence index `first`: from `given`
/// (stream-major, 3 streams of n) when set, else from the text positions shifted by `*delta`.
/// With `given`, `*delta` becomes HF's `rope_deltas` afterwards, so later text continues after
/// the largest position. kInvalidArgument when `given` does not hold 3·n values.
Status mrope_call_tables(const MRopeSpec& spec, int64_t first, int64_t n,
                         const std::vector<int64_t>* given, int64_t* delta,
                         std::vector<double>* cos, std::vector<double>* sin);

}  // namespace qbc::runner
