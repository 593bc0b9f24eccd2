// A qlinear's second weight image (see qbc/ir/phase_image.h).
#include "qbc/ir/phase_image.h"

#include "qbc/ir/op.h"

namespace qbc::ir {
namespace {

const char* const kPhaseAttrs[] = {"phase_image",  "phase_wq",         "phase_wscale",
                                   "phase_wzero",  "phase_w_bits",     "phase_w_group",
                                   "phase_w_zero", "phase_w_scale_f16"};

/// `n` without its phase_* attributes.
Node without_phase_attrs(const Node& n) {
  Node out = n;
  for (const char* p : kPhaseAttrs) out.attrs.erase(p);
  return out;
}

}  // namespace

const char* image_phase_name(ImagePhase p) {
  return p == ImagePhase::kPrefill ? "prefill" : "decode";
}

StatusOr<std::optional<ImagePhase>> second_image_phase(const Node& n) {
  if (n.op != Op::kQLinear || !n.attrs.has("phase_image")) return std::optional<ImagePhase>();
  const std::string p = n.attrs.get_string("phase_image");
  if (p == "prefill") return std::optional<ImagePhase>(ImagePhase::kPrefill);
  if (p == "decode") return std::optional<ImagePhase>(ImagePhase::kDecode);
  return invalid_argument(describe(n), ": phase_image '", p.substr(0, 32),
                          "' is neither prefill nor decode");
}

std::vector<std::string> second_image_weights(const Node& n) {
  if (n.op != Op::kQLinear || !n.attrs.has("phase_image")) return {};
  std::vector<std::string> out;
  for (const char* k : {"phase_wq", "phase_wscale"}) out.push_back(n.attrs.get_string(k, ""));
  if (n.attrs.get_int("phase_w_zero", 0) == 1) out.push_back(n.attrs.get_string("phase_wzero", ""));
  return out;
}

StatusOr<Node> node_for_phase(const Node& n, ImagePhase phase) {
  QBC_ASSIGN_OR_RETURN(const std::optional<ImagePhase> own, second_image_phase(n));
  Node out = without_phase_attrs(n);
  if (!own || *own != phase) return out;
  for (const char* k : {"phase_wq", "phase_wscale", "phase_w_bits"}) {
    if (!n.attrs.has(k)) return invalid_argument(describe(n), ": phase_image without ", k);
  }
  if (n.attrs.get_int("w_min", 0) != 0)
    return invalid_argument(describe(n), ": a second image of a node with float offsets (w_min)");
  const bool zero = n.attrs.get_int("phase_w_zero", 0) == 1;
  if (zero && !n.attrs.has("phase_wzero"))
    return invalid_argument(describe(n), ": phase_w_zero = 1 without phase_wzero");
  // The node's bias follows its scale, zero points and offsets.
  const size_t bias_at = 3 + (n.attrs.get_int("w_zero", 0) == 1 ? 1 : 0);
  std::vector<Operand> ops = {n.operands.at(0), Operand::of_weight(n.attrs.get_string("phase_wq")),
                              Operand::of_weight(n.attrs.get_string("phase_wscale"))};
  if (zero) ops.push_back(Operand::of_weight(n.attrs.get_string("phase_wzero")));
  if (n.operands.size() > bias_at) ops.push_back(n.operands[bias_at]);
  out.operands = std::move(ops);
  out.attrs.set("w_bits", n.attrs.get_int("phase_w_bits"));
  for (const char* k : {"w_group", "w_zero", "w_scale_f16"}) {
    const int64_t v = n.attrs.get_int(std::string("phase_") + k, 0);
    if (v != 0) {
      out.attrs.set(k, v);
    } else {
      out.attrs.erase(k);
    }
  }
  return out;
}

}  // namespace qbc::ir
