// A qlinear's second weight image (docs/quantization.md "Precision per phase"): with
// bit.prefill or bit.decode, the programs of one phase read their own codes, scales and zero
// points of the same linear, while the input quantization, the bias and everything else stay
// the node's. The image lives in the node's phase_* attributes (qbc/ir/ops.def, op.cpp): the
// phase, the weight names, and the w_bits, w_group, w_zero and w_scale_f16 it has.
// node_for_phase gives the node as one phase's programs see it, so the backend, the
// fake-quant evaluator and the verifier read the second image through the same qlinear rules
// as the first.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "qbc/ir/graph.h"
#include "qbc/support/status.h"

namespace qbc::ir {

/// The two phases of a language model's programs: a call of several tokens (the prompt) runs
/// the prefill programs, a call of one token (every generated token) the decode programs.
enum class ImagePhase { kPrefill, kDecode };

const char* image_phase_name(ImagePhase p);

/// The phase whose programs read `n`'s second image; nullopt when `n` has none.
/// kInvalidArgument (naming the node) when phase_image is neither "prefill" nor "decode".
StatusOr<std::optional<ImagePhase>> second_image_phase(const Node& n);

/// `n` as the programs of `phase` see it: for a qlinear whose second image is that phase's,
/// a qlinear over that image (operands x, phase_wq, phase_wscale, phase_wzero?, then the
/// node's bias), with its w_bits, w_group, w_zero and w_scale_f16; otherwise `n` itself. The
/// phase_* attributes are dropped either way (a node of one image).
StatusOr<Node> node_for_phase(const Node& n, ImagePhase phase);

/// The weights `n`'s second image names (empty without one), in operand order.
std::vector<std::string> second_image_weights(const Node& n);

}  // namespace qbc::ir
