// FakeQuantSession: interprets an MBLT graph node by node (batch 1) with the
// numerics of docs/numerics.md; the per-op arithmetic lives in qbc_numerics (qbc/numerics/).
// Values between nodes are [s, width] rows of floats that hold fp16 values (body)
// or fp32 values (the head's outputs).
#include "qbc/quant/fakequant.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "qbc/ir/host_inputs.h"
#include "qbc/ir/op_params.h"
#include "qbc/ir/phase_image.h"
#include "qbc/ir/verifier.h"
#include "qbc/numerics/attention.h"
#include "qbc/numerics/elementwise.h"
#include "qbc/numerics/fp16.h"
#include "qbc/numerics/linear.h"
#include "qbc/numerics/norm.h"
#include "qbc/numerics/pool.h"
#include "qbc/numerics/quantizer.h"
#include "qbc/numerics/rope.h"
#include "qbc/quant/embedding_i8.h"
#include "qbc/runner/mrope.h"

namespace qbc::quant {
namespace {

using ir::Node;
using ir::Op;

/// A node prepared for execution: operands resolved, attributes decoded once.
struct Step {
  const Node* node = nullptr;
  std::vector<int> inputs;  // value operands, in order
  int64_t width = 0;        // last dim of the result
  bool fp16 = true;         // round the result to fp16
  std::vector<float> w, bias;
  numerics::QLinear ql;
  int w_bits = 8;       // qlinear: the weight codes' width
  bool w_zero = false;  // qlinear: operand 3 holds zero points
  size_t min_at = 0;    // qlinear: the offsets' operand (w_min), or 0
  size_t bias_at = 3;   // qlinear: the bias operand
  double eps = 0.0, unit_offset = 0.0;
  int64_t group = 0, start = 0, end = 0;
  numerics::Rope rope;
  numerics::Attention attn;
  int cache = -1;
  bool gelu = false;
  bool gelu_tanh = false;           // gelu {approx: tanh}
  int64_t grid_w = 0, kernel = 0;   // avg_pool
  float factor = 1.0f;              // scale factor / softcap cap
  int64_t div = 1;                  // the graph's rows over this value's rows (merge_rows upstream)
  int64_t heads = 0, head_dim = 0;  // rope_table
  ir::FullAttentionParams full;     // full_attention
  // qlinear with a second weight image (qbc/ir/phase_image.h): the node as that phase's
  // programs see it, and its prepared step; calls of that phase use second->ql.
  std::unique_ptr<Node> second_node;
  std::unique_ptr<Step> second;
  ir::ImagePhase second_phase = ir::ImagePhase::kPrefill;
};

}  // namespace

struct FakeQuantSession::Impl {
  ir::Graph graph;
  std::vector<Step> steps;
  std::vector<numerics::KvCache> caches;
  std::vector<float> host_embedding;  // fp32 [embed_rows, hidden]
  int embeds_id = -1;
  int positions_id = -1;
  int rope_cos_id = -1, rope_sin_id = -1;     // M-RoPE graphs: host tables (runner/mrope.h)
  std::vector<int> deepstack_ids;             // Qwen3-VL: inputs deepstack.J, in order
  std::vector<std::vector<float>> deepstack;  // rows for the next call (empty: zeros)
  std::optional<runner::MRopeSpec> mrope;
  int64_t rope_delta = 0;      // M-RoPE: text positions are the cache position plus this
  std::vector<int> input_ids;  // every graph input, in order (feature graphs: forward_inputs)
  bool feature_graph = false;  // no token positions: a vision tower
  int output_id = -1;
  int64_t position = 0;
  int64_t vocab = 0;
  int64_t embed_rows = 0;
  int64_t hidden = 0;
  bool keep = false;
  bool span = false;  ///< the current call is one bidirectional span (forward_embeds_span)
  /// The current call's phase: one token runs the decode programs (and their weight image),
  /// more tokens (or a span) the prefill programs, as the NPU runtime chooses.
  ir::ImagePhase call_phase = ir::ImagePhase::kPrefill;
  std::map<std::string, std::pair<std::vector<float>, std::vector<int64_t>>> kept;
  std::set<std::string> keep_only;  // keep_activations_of's nodes; empty: every node

  Status prepare();
  Status prepare_step(Step& st);
  Status load(const ir::WeightReader& reader);
  Status load_qlinear(Step& st, const std::map<std::string, std::vector<float>>& by_name);
  Status run(const std::vector<float>& x, int64_t s, std::vector<float>* logits,
             const std::vector<int64_t>* mrope_positions = nullptr);
  Status set_rope_tables(std::vector<std::vector<float>>& values, int64_t s,
                         const std::vector<int64_t>* mrope_positions);
  Status run_features(const std::vector<std::vector<float>>& inputs, std::vector<float>* out);
  void keep_values(const std::vector<std::vector<float>>& values, int64_t s);
  void exec(Step& st, std::vector<std::vector<float>>& values, int64_t s);
  Status check_tokens(const std::vector<int32_t>& tokens) const;
};

Status FakeQuantSession::Impl::prepare_step(Step& st) {
  const Node& n = *st.node;
  // The head keeps fp32 (logits leave unrounded); the norms run on the vector unit in
  // fp16 in/out wherever they sit.
  st.fp16 = n.part == ir::Part::kBody || n.op == Op::kRmsNorm || n.op == Op::kLayerNorm;
  switch (n.op) {
    case Op::kInput:
    case Op::kLinear:
    case Op::kAdd:
      break;
    case Op::kQLinear: {
      QBC_ASSIGN_OR_RETURN(ir::QLinearParams q, ir::qlinear_params(n));
      st.ql = std::move(q.linear);
      st.w_bits = q.w_bits;
      st.w_zero = q.w_zero;
      st.min_at = q.w_min ? q.min_at : 0;
      st.bias_at = q.bias_at;
      QBC_ASSIGN_OR_RETURN(const std::optional<ir::ImagePhase> phase, ir::second_image_phase(n));
      if (phase && st.second_node == nullptr) {
        QBC_ASSIGN_OR_RETURN(Node view, ir::node_for_phase(n, *phase));
        st.second_node = std::make_unique<Node>(std::move(view));
        st.second = std::make_unique<Step>();
        st.second->node = st.second_node.get();
        st.second->width = st.width;
        st.second_phase = *phase;
        QBC_RETURN_IF_ERROR(prepare_step(*st.second));
      }
      break;
    }
    case Op::kRmsNorm: {
      QBC_ASSIGN_OR_RETURN(st.eps, ir::required_float(n, "eps"));
      QBC_ASSIGN_OR_RETURN(const int64_t unit_offset, ir::required_int(n, "unit_offset"));
      QBC_ASSIGN_OR_RETURN(st.group, ir::required_int(n, "group"));
      st.unit_offset = static_cast<double>(unit_offset);
      if (st.group < 0 || (st.group > 0 && st.width % st.group != 0)) {
        return invalid_argument(ir::describe(n), ": group ", st.group, " does not divide ",
                                st.width);
      }
      break;
    }
    case Op::kLayerNorm: {
      QBC_ASSIGN_OR_RETURN(st.eps, ir::required_float(n, "eps"));
      break;
    }
    case Op::kSlice: {
      QBC_ASSIGN_OR_RETURN(st.start, ir::required_int(n, "start"));
      QBC_ASSIGN_OR_RETURN(st.end, ir::required_int(n, "end"));
      break;
    }
    case Op::kRope: {
      QBC_ASSIGN_OR_RETURN(st.rope, ir::rope_params(n));
      break;
    }
    case Op::kAttention: {
      QBC_ASSIGN_OR_RETURN(st.attn, ir::attention_params(n));
      if (!st.attn.k_rot_offset.empty()) {  // the K producer's RoPE rotates the offsets too
        const Node& k = graph.node(n.operands[1].value);
        if (k.op != Op::kRope)
          return invalid_argument(ir::describe(n), ": k_rot_offset needs K from a rope node");
        QBC_ASSIGN_OR_RETURN(st.attn.k_rope, ir::rope_params(k));
      }
      st.cache = static_cast<int>(caches.size());
      caches.emplace_back();
      break;
    }
    case Op::kGatedAct: {
      QBC_ASSIGN_OR_RETURN(const std::string act, ir::required_string(n, "act"));
      if (act != "silu" && act != "gelu_tanh") {
        return unimplemented(ir::describe(n), ": activation '", act,
                             "' (supported: silu, gelu_tanh)");
      }
      st.gelu = act == "gelu_tanh";
      break;
    }
    case Op::kScale:
    case Op::kSoftcap: {
      QBC_ASSIGN_OR_RETURN(const double f,
                           ir::required_float(n, n.op == Op::kScale ? "factor" : "cap"));
      st.factor = static_cast<float>(f);
      break;
    }
    case Op::kGelu:  // approx absent: erf; "quick" or "tanh" (the verifier allows no other)
      st.gelu_tanh = n.attrs.has("approx") && n.attrs.get_string("approx") == "tanh";
      st.gelu = n.attrs.has("approx") && !st.gelu_tanh;
      break;
    case Op::kRopeTable: {
      QBC_ASSIGN_OR_RETURN(st.heads, ir::required_int(n, "num_heads"));
      QBC_ASSIGN_OR_RETURN(st.head_dim, ir::required_int(n, "head_dim"));
      break;
    }
    case Op::kFullAttention: {
      QBC_ASSIGN_OR_RETURN(st.full, ir::full_attention_params(n));
      break;
    }
    case Op::kMergeRows: {
      QBC_ASSIGN_OR_RETURN(const int64_t f, ir::required_int(n, "factor"));
      st.div *= f;
      break;
    }
    case Op::kAvgPool: {
      QBC_ASSIGN_OR_RETURN(st.grid_w, ir::required_int(n, "grid_w"));
      QBC_ASSIGN_OR_RETURN(st.kernel, ir::required_int(n, "kernel"));
      st.div *= st.kernel * st.kernel;
      break;
    }
  }
  return ok_status();
}

Status FakeQuantSession::Impl::prepare() {
  const auto& nodes = graph.nodes();
  steps.reserve(nodes.size());
  for (size_t i = 0; i < nodes.size(); ++i) {
    const Node& n = nodes[i];
    Step st;
    st.node = &n;
    for (const ir::Operand& op : n.operands) {
      if (op.is_weight()) continue;
      st.inputs.push_back(op.value);
      st.div = std::max(st.div, steps[static_cast<size_t>(op.value)].div);
    }
    if (n.op == Op::kInput && n.type.dtype == ir::DType::kI64) {
      positions_id = static_cast<int>(i);
      st.width = 1;
    } else {
      st.width = n.type.rank() > 0 ? n.type.dim(-1) : 0;
      if (st.width <= 0) {
        return invalid_argument(ir::describe(n), ": last dimension of ", n.type.to_string(),
                                " must be static");
      }
      if (n.op == Op::kInput && ir::is_deepstack_input(n.name)) {
        deepstack_ids.push_back(static_cast<int>(i));
      } else if (n.op == Op::kInput) {
        if (embeds_id < 0) embeds_id = static_cast<int>(i);
        if (embeds_id == static_cast<int>(i)) hidden = st.width;
      }
    }
    if (n.op == Op::kInput) input_ids.push_back(static_cast<int>(i));
    if (n.op == Op::kInput && (n.name == "rope_cos" || n.name == "rope_sin"))
      (n.name == "rope_cos" ? rope_cos_id : rope_sin_id) = static_cast<int>(i);
    QBC_RETURN_IF_ERROR(prepare_step(st));
    steps.push_back(std::move(st));
  }
  // A graph without token positions, rope or a KV cache (a vision tower) takes its inputs
  // through forward_inputs, as in ref::Session.
  feature_graph = positions_id < 0 && !input_ids.empty() &&
                  std::none_of(steps.begin(), steps.end(), [](const Step& st) {
                    return st.node->op == Op::kRope || st.node->op == Op::kAttention;
                  });
  if (!feature_graph && (embeds_id < 0 || positions_id < 0)) {
    return invalid_argument("graph '", graph.name(),
                            "' needs inputs inputs_embeds (f32) and positions (i64)");
  }
  if (!feature_graph && (rope_cos_id >= 0 || rope_sin_id >= 0)) {
    if (rope_cos_id < 0 || rope_sin_id < 0)
      return invalid_argument("graph '", graph.name(), "' has only one of rope_cos and rope_sin");
    StatusOr<runner::MRopeSpec> spec = runner::mrope_spec_from_metadata(graph.metadata);
    if (!spec.ok()) return spec.status().with_context("graph '", graph.name(), "'");
    mrope = *spec;
    if (embeds_id == rope_cos_id || embeds_id == rope_sin_id)
      return invalid_argument("graph '", graph.name(), "': inputs_embeds must come first");
  }
  if (graph.outputs().empty()) return invalid_argument("graph '", graph.name(), "' has no output");
  output_id = graph.outputs().front();
  return ok_status();
}

Status FakeQuantSession::Impl::load_qlinear(
    Step& st, const std::map<std::string, std::vector<float>>& by_name) {
  const Node& n = *st.node;
  const ir::Weight* wq = graph.find_weight(n.operands[1].weight);
  numerics::QLinear& p = st.ql;
  p.out = wq->type.dims[0];
  p.in = wq->type.dims[1];
  const int w_bits = st.w_bits;
  const double hi = static_cast<double>(numerics::quant_max(w_bits));
  const std::vector<float>& codes = by_name.at(wq->name);
  p.wq.resize(codes.size());
  for (size_t i = 0; i < codes.size(); ++i) {
    const double c = codes[i];
    if (c != std::nearbyint(c) || c < -hi - 1.0 || c > hi) {
      return invalid_argument(ir::describe(n), ": weight '", wq->name, "' element ", i, " is ", c,
                              ", not an integer in [", -hi - 1.0, ", ", hi, "] for w_bits ",
                              w_bits);
    }
    p.wq[i] = static_cast<int32_t>(c);
  }
  p.wscale = by_name.at(n.operands[2].weight);
  for (float s : p.wscale) {  // negative: the extreme weight sits on the long end (numerics.md)
    if (!(std::fabs(s) >= 1e-8f) || !std::isfinite(s)) {
      return invalid_argument(ir::describe(n), ": weight scale '", n.operands[2].weight, "' holds ",
                              s, "; weight scales must be finite with |s| >= 1e-8");
    }
  }
  if (st.w_zero) {  // ŵ = s·(q − z): the zero points share the codes' range
    const std::vector<float>& zeros = by_name.at(n.operands[3].weight);
    if (zeros.size() != p.wscale.size()) {
      return invalid_argument(ir::describe(n), ": ", zeros.size(), " zero points for ",
                              p.wscale.size(), " scales");
    }
    p.wzero.resize(zeros.size());
    for (size_t i = 0; i < zeros.size(); ++i) {
      const double z = zeros[i];
      if (z != std::nearbyint(z) || z < -hi - 1.0 || z > hi) {
        return invalid_argument(ir::describe(n), ": zero point '", n.operands[3].weight,
                                "' element ", i, " is ", z, ", not an integer in [", -hi - 1.0,
                                ", ", hi, "] for w_bits ", w_bits);
      }
      p.wzero[i] = static_cast<int32_t>(z);
    }
  }
  if (st.min_at > 0) {  // ŵ = s·(q − z) + m: finite offsets, one per scale
    p.wmin = by_name.at(n.operands[st.min_at].weight);
    if (p.wmin.size() != p.wscale.size()) {
      return invalid_argument(ir::describe(n), ": offsets '", n.operands[st.min_at].weight,
                              "' hold ", p.wmin.size(), " values for ", p.wscale.size(), " scales");
    }
    for (size_t i = 0; i < p.wmin.size(); ++i) {
      if (!std::isfinite(p.wmin[i])) {
        return invalid_argument(ir::describe(n), ": offsets '", n.operands[st.min_at].weight,
                                "' element ", i, " is ", p.wmin[i]);
      }
    }
  }
  if (n.operands.size() > st.bias_at) p.bias = by_name.at(n.operands[st.bias_at].weight);
  return ok_status();
}

Status FakeQuantSession::Impl::load(const ir::WeightReader& reader) {
  std::map<std::string, std::vector<float>> by_name;
  for (const auto& [name, w] : graph.weights()) {
    const int64_t expected = w.type.num_elements();
    if (expected <= 0)
      return invalid_argument("weight '", name, "': no static shape (", w.type.to_string(), ")");
    std::vector<float> data;
    QBC_RETURN_IF_ERROR(
        reader(w, &data).with_context("weight '", name, "' (tensor '", w.tensor, "')"));
    if (static_cast<int64_t>(data.size()) != expected) {
      return invalid_argument("weight '", name, "' (tensor '", w.tensor, "'): read ", data.size(),
                              " values, expected ", expected, " for ", w.type.to_string());
    }
    if (w.role == ir::WeightRole::kHostEmbedding) {
      if (w.type.rank() != 2)
        return invalid_argument("host embedding '", name, "' must be 2-D, is ", w.type.to_string());
      host_embedding = std::move(data);
      embed_rows = w.type.dims[0];
      vocab = embed_rows;
      if (w.type.dims[1] != hidden) {
        return invalid_argument("host embedding '", name, "' width ", w.type.dims[1],
                                " != hidden size ", hidden);
      }
    } else {
      by_name[name] = std::move(data);
    }
  }
  if (host_embedding.empty() && !feature_graph)
    return invalid_argument("graph '", graph.name(), "' has no host embedding weight");
  QBC_RETURN_IF_ERROR(embedding_as_i8(graph, hidden, &host_embedding));
  for (Step& st : steps) {
    const Node& n = *st.node;
    if (n.op == Op::kQLinear) {
      QBC_RETURN_IF_ERROR(load_qlinear(st, by_name));
      if (st.second) {
        QBC_RETURN_IF_ERROR(
            load_qlinear(*st.second, by_name)
                .with_context("its ", ir::image_phase_name(st.second_phase), " image"));
      }
      continue;
    }
    int nw = 0;
    for (const ir::Operand& op : n.operands) {
      if (!op.is_weight()) continue;
      auto it = by_name.find(op.weight);
      if (it == by_name.end())
        return invalid_argument(ir::describe(n), ": unknown weight '", op.weight, "'");
      (nw++ == 0 ? st.w : st.bias) = it->second;
    }
  }
  const Node& out = graph.node(output_id);
  if (out.type.dim(-1) > 0) vocab = out.type.dim(-1);
  return ok_status();
}

void FakeQuantSession::Impl::exec(Step& st, std::vector<std::vector<float>>& values, int64_t s) {
  const Node& n = *st.node;
  auto in = [&](size_t i) { return values[static_cast<size_t>(st.inputs[i])].data(); };
  auto in_width = [&](size_t i) { return steps[static_cast<size_t>(st.inputs[i])].width; };
  std::vector<float>& out = values[static_cast<size_t>(&st - steps.data())];
  if (n.op == Op::kInput) return;  // set by run()
  s /= st.div;  // this value's rows (merge_rows reads its input's rows as its own, widened)
  out.assign(static_cast<size_t>(s * st.width), 0.0f);
  const int64_t count = s * st.width;
  switch (n.op) {
    case Op::kInput:
      break;
    case Op::kQLinear:
      numerics::qlinear(
          in(0), s, st.second && st.second_phase == call_phase ? st.second->ql : st.ql, out.data());
      break;
    case Op::kLinear:
      numerics::linear(in(0), s, st.w, st.bias, st.width, in_width(0), st.fp16, out.data());
      break;
    case Op::kRmsNorm:
      numerics::rms_norm(in(0), s, st.width, st.w, st.eps, st.unit_offset, st.group, out.data());
      break;
    case Op::kLayerNorm:
      numerics::layer_norm(in(0), s, st.width, st.w.data(),
                           st.bias.empty() ? nullptr : st.bias.data(), st.eps, out.data());
      break;
    case Op::kSlice: {
      const int64_t w = in_width(0);
      for (int64_t t = 0; t < s; ++t) {
        for (int64_t i = st.start; i < st.end; ++i)
          out[t * st.width + i - st.start] = in(0)[t * w + i];
      }
      break;
    }
    case Op::kRope:
      numerics::rope(in(0), s, position, st.rope, out.data());
      break;
    case Op::kAttention:
      numerics::attention(in(0), in(1), in(2), s, st.attn, caches[static_cast<size_t>(st.cache)],
                          out.data(), span);
      break;
    case Op::kGatedAct:
      numerics::gated_act(in(0), in(1), count, st.gelu, st.fp16, out.data());
      break;
    case Op::kAdd:
      numerics::add(in(0), in(1), count, st.fp16, out.data());
      break;
    case Op::kScale:
      numerics::scale(in(0), count, st.factor, st.fp16, out.data());
      break;
    case Op::kSoftcap:
      numerics::softcap(in(0), count, st.factor, st.fp16, out.data());
      break;
    case Op::kGelu:
      if (st.gelu_tanh) {
        numerics::gelu_tanh(in(0), count, st.fp16, out.data());
      } else {
        numerics::gelu(in(0), count, st.fp16, out.data(), st.gelu);
      }
      break;
    case Op::kRopeTable:
      numerics::rope_table(in(0), in(1), in(2), s, st.heads, st.head_dim, out.data());
      break;
    case Op::kFullAttention:
      numerics::full_attention(in(0), in(1), in(2), s, st.full.attention, st.full.segments,
                               out.data());
      break;
    case Op::kMergeRows:  // a reshape of the row-major buffer: the same values, bit for bit
      out = values[static_cast<size_t>(st.inputs[0])];
      break;
    case Op::kAvgPool: {  // s output rows from s·k² input rows of a grid grid_w wide
      const int64_t in_rows = s * st.kernel * st.kernel;
      numerics::avg_pool(in(0), in_rows / st.grid_w, st.grid_w, st.width, st.kernel, st.fp16,
                         out.data());
      break;
    }
  }
}

// M-RoPE graphs: rope_cos / rope_sin [s, head_dim/2] from the given 3-stream positions, or,
// without them, from text positions (cache position + rope_delta in every stream): fp64, the
// graph's f32 inputs, then fp16 at the NPU boundary like every input.
Status FakeQuantSession::Impl::set_rope_tables(std::vector<std::vector<float>>& values, int64_t s,
                                               const std::vector<int64_t>* mrope_positions) {
  if (!mrope) {
    if (mrope_positions != nullptr)
      return failed_precondition("graph '", graph.name(),
                                 "' has no M-RoPE inputs (rope_cos, rope_sin)");
    return ok_status();
  }
  std::vector<double> c, sn;
  QBC_RETURN_IF_ERROR(
      runner::mrope_call_tables(*mrope, position, s, mrope_positions, &rope_delta, &c, &sn));
  for (const auto& [id, table] : {std::pair{rope_cos_id, &c}, std::pair{rope_sin_id, &sn}}) {
    std::vector<float>& v = values[static_cast<size_t>(id)];
    v.resize(table->size());
    for (size_t i = 0; i < v.size(); ++i)
      v[i] = numerics::round_fp16(static_cast<float>((*table)[i]));
  }
  return ok_status();
}

Status FakeQuantSession::Impl::run(const std::vector<float>& x, int64_t s,
                                   std::vector<float>* logits,
                                   const std::vector<int64_t>* mrope_positions) {
  // set_deepstack's rows are this call's, whichever way it returns.
  const std::vector<std::vector<float>> rows = std::move(deepstack);
  deepstack.clear();
  if (feature_graph) {
    return failed_precondition("graph '", graph.name(),
                               "' has no token positions: use forward_inputs");
  }
  if (s <= 0) return invalid_argument("forward: no tokens");
  for (const Step& st : steps) {
    if (st.cache < 0) continue;
    if (position + s > st.attn.max_cache) {
      return resource_exhausted(ir::describe(*st.node), ": KV cache overflow: ", position,
                                " cached + ", s, " new tokens exceed max_cache ",
                                st.attn.max_cache);
    }
  }
  std::vector<std::vector<float>> values(steps.size());
  std::vector<float>& embeds = values[static_cast<size_t>(embeds_id)];
  embeds.resize(x.size());
  // NPU input buffer: fp16.
  for (size_t i = 0; i < x.size(); ++i) embeds[i] = numerics::round_fp16(x[i]);
  std::vector<float>& pos = values[static_cast<size_t>(positions_id)];
  for (int64_t t = 0; t < s; ++t) pos.push_back(static_cast<float>(position + t));
  QBC_RETURN_IF_ERROR(set_rope_tables(values, s, mrope_positions));
  for (size_t j = 0; j < deepstack_ids.size(); ++j) {
    std::vector<float>& v = values[static_cast<size_t>(deepstack_ids[j])];
    v.assign(static_cast<size_t>(s * hidden), 0.0f);
    if (rows.empty()) continue;
    if (static_cast<int64_t>(rows[j].size()) != s * hidden)
      return invalid_argument(graph.node(deepstack_ids[j]).name, ": ", rows[j].size(),
                              " values for ", s, " tokens of hidden size ", hidden);
    for (size_t i = 0; i < v.size(); ++i) v[i] = numerics::round_fp16(rows[j][i]);
  }
  call_phase = s == 1 && !span ? ir::ImagePhase::kDecode : ir::ImagePhase::kPrefill;
  for (Step& st : steps) exec(st, values, s);
  position += s;
  keep_values(values, s);
  if (logits != nullptr) *logits = std::move(values[static_cast<size_t>(output_id)]);
  return ok_status();
}

void FakeQuantSession::Impl::keep_values(const std::vector<std::vector<float>>& values, int64_t s) {
  kept.clear();
  if (!keep) return;
  for (size_t i = 0; i < steps.size(); ++i) {
    if (!keep_only.empty() && keep_only.count(steps[i].node->name) == 0) continue;
    std::vector<int64_t> shape = {1, s / steps[i].div};
    if (static_cast<int>(i) != positions_id) shape.push_back(steps[i].width);
    kept[steps[i].node->name] = {values[i], std::move(shape)};
  }
}

Status FakeQuantSession::Impl::run_features(const std::vector<std::vector<float>>& inputs,
                                            std::vector<float>* out) {
  if (!feature_graph) {
    return failed_precondition("graph '", graph.name(),
                               "' has token positions: use forward or forward_embeds");
  }
  if (inputs.size() != input_ids.size()) {
    return invalid_argument("forward_inputs: ", inputs.size(), " inputs for graph '", graph.name(),
                            "' with ", input_ids.size());
  }
  std::vector<std::vector<float>> values(steps.size());
  int64_t s = -1;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Step& st = steps[static_cast<size_t>(input_ids[i])];
    const int64_t n = static_cast<int64_t>(inputs[i].size());
    if (n == 0 || n % st.width != 0 || (s >= 0 && n / st.width != s)) {
      return invalid_argument("forward_inputs: input '", st.node->name, "' has ", n,
                              " values, not rows of ", st.width,
                              s >= 0 ? " matching the other inputs' rows" : "");
    }
    s = n / st.width;
    const ir::TensorType& type = st.node->type;
    if (type.rank() >= 2 && type.dim(-2) != ir::kDynamic && type.dim(-2) != s) {
      return invalid_argument("forward_inputs: input '", st.node->name, "' has ", s,
                              " rows, the graph fixes ", type.dim(-2));
    }
    std::vector<float>& v = values[static_cast<size_t>(input_ids[i])];
    v.resize(inputs[i].size());
    // NPU input buffers: fp16.
    for (size_t j = 0; j < v.size(); ++j) v[j] = numerics::round_fp16(inputs[i][j]);
  }
  for (const Step& st : steps) {
    if (st.div > 1 && s % st.div != 0) {
      return invalid_argument("forward_inputs: ", s, " rows are not a multiple of ", st.div, " (",
                              ir::describe(*st.node), ")");
    }
  }
  for (Step& st : steps) exec(st, values, s);
  keep_values(values, s);
  if (out == nullptr) return ok_status();
  if (graph.outputs().size() == 1) {
    *out = std::move(values[static_cast<size_t>(output_id)]);
    return ok_status();
  }
  // Several outputs (Qwen3-VL's features and DeepStack features): side by side per row.
  int64_t rows = -1, width = 0;
  for (ir::ValueId id : graph.outputs()) {
    const std::vector<float>& v = values[static_cast<size_t>(id)];
    const int64_t w = graph.node(id).type.dim(-1);
    if (w <= 0 || v.size() % static_cast<size_t>(w) != 0 ||
        (rows >= 0 && static_cast<int64_t>(v.size()) / w != rows))
      return internal_error("forward_inputs: the outputs of graph '", graph.name(),
                            "' differ in rows");
    rows = static_cast<int64_t>(v.size()) / w;
    width += w;
  }
  out->assign(static_cast<size_t>(rows * width), 0.0f);
  int64_t col = 0;
  for (ir::ValueId id : graph.outputs()) {
    const std::vector<float>& v = values[static_cast<size_t>(id)];
    const int64_t w = graph.node(id).type.dim(-1);
    for (int64_t r = 0; r < rows; ++r)
      std::copy(v.begin() + r * w, v.begin() + (r + 1) * w, out->begin() + r * width + col);
    col += w;
  }
  return ok_status();
}

Status FakeQuantSession::Impl::check_tokens(const std::vector<int32_t>& tokens) const {
  return runner::check_token_ids(tokens, embed_rows);
}

FakeQuantSession::FakeQuantSession() : impl_(std::make_unique<Impl>()) {}
FakeQuantSession::~FakeQuantSession() = default;

StatusOr<std::unique_ptr<FakeQuantSession>> FakeQuantSession::create(
    const ir::Graph& g, const ir::WeightReader& weights) {
  QBC_RETURN_IF_ERROR(ir::verify(g));
  std::unique_ptr<FakeQuantSession> s(new FakeQuantSession());
  Impl& im = *s->impl_;
  im.graph = g;  // steps point into this copy
  QBC_RETURN_IF_ERROR(im.prepare());
  QBC_RETURN_IF_ERROR(im.load(weights));
  return s;
}

Status FakeQuantSession::forward(const std::vector<int32_t>& tokens, std::vector<float>* logits) {
  if (tokens.empty()) return invalid_argument("forward: no tokens");
  std::vector<float> x;
  QBC_RETURN_IF_ERROR(embed(tokens, &x));
  return impl_->run(x, static_cast<int64_t>(tokens.size()), logits);
}

Status FakeQuantSession::forward_embeds(const std::vector<float>& embeds, int64_t seq,
                                        std::vector<float>* logits) {
  if (seq <= 0 || static_cast<int64_t>(embeds.size()) != seq * impl_->hidden) {
    return invalid_argument("forward_embeds: ", embeds.size(), " values for ", seq,
                            " tokens of hidden size ", impl_->hidden);
  }
  return impl_->run(embeds, seq, logits);
}

Status FakeQuantSession::forward_embeds_span(const std::vector<float>& embeds, int64_t seq,
                                             std::vector<float>* logits) {
  if (seq <= 0 || static_cast<int64_t>(embeds.size()) != seq * impl_->hidden) {
    return invalid_argument("forward_embeds_span: ", embeds.size(), " values for ", seq,
                            " tokens of hidden size ", impl_->hidden);
  }
  impl_->span = true;
  const Status s = impl_->run(embeds, seq, logits);
  impl_->span = false;
  return s;
}

Status FakeQuantSession::forward_embeds_mrope(const std::vector<float>& embeds, int64_t seq,
                                              const std::vector<int64_t>& positions,
                                              std::vector<float>* logits) {
  if (seq <= 0 || static_cast<int64_t>(embeds.size()) != seq * impl_->hidden) {
    return invalid_argument("forward_embeds_mrope: ", embeds.size(), " values for ", seq,
                            " tokens of hidden size ", impl_->hidden);
  }
  return impl_->run(embeds, seq, logits, &positions);
}

Status FakeQuantSession::set_deepstack(std::vector<std::vector<float>> rows) {
  if (rows.size() != impl_->deepstack_ids.size())
    return invalid_argument("graph '", impl_->graph.name(), "' takes ", impl_->deepstack_ids.size(),
                            " DeepStack inputs, got ", rows.size());
  impl_->deepstack = std::move(rows);
  return ok_status();
}

Status FakeQuantSession::forward_inputs(const std::vector<std::vector<float>>& inputs,
                                        std::vector<float>* out) {
  return impl_->run_features(inputs, out);
}

void FakeQuantSession::reset() {
  impl_->position = 0;
  impl_->rope_delta = 0;
  impl_->deepstack.clear();
  for (numerics::KvCache& c : impl_->caches) c = numerics::KvCache();
}

int64_t FakeQuantSession::position() const { return impl_->position; }
int64_t FakeQuantSession::vocab_size() const { return impl_->vocab; }
int64_t FakeQuantSession::hidden_size() const { return impl_->hidden; }

Status FakeQuantSession::embed(const std::vector<int32_t>& tokens, std::vector<float>* out) const {
  return runner::embed_tokens(impl_->host_embedding.data(), impl_->embed_rows, impl_->hidden,
                              tokens, out);
}

void FakeQuantSession::set_keep_activations(bool keep) {
  impl_->keep = keep;
  impl_->keep_only.clear();
  if (!keep) impl_->kept.clear();
}

Status FakeQuantSession::keep_activations_of(std::set<std::string> nodes) {
  if (nodes.empty()) return invalid_argument("keep_activations_of: no nodes named");
  for (const std::string& n : nodes)
    if (impl_->graph.find(n) < 0)
      return not_found("keep_activations_of: graph '", impl_->graph.name(), "' has no node '", n,
                       "'");
  impl_->keep = true;
  impl_->keep_only = std::move(nodes);
  impl_->kept.clear();
  return ok_status();
}

Status FakeQuantSession::activation(const std::string& node, std::vector<float>* out,
                                    std::vector<int64_t>* shape) const {
  auto it = impl_->kept.find(node);
  if (it == impl_->kept.end()) {
    return not_found("no activation for node '", node, "' (keep_activations off, or no such node)");
  }
  *out = it->second.first;
  if (shape != nullptr) *shape = it->second.second;
  return ok_status();
}

Status FakeQuantSession::kv_cache(const std::string& node, KvCacheSnapshot* out) const {
  for (const Step& st : impl_->steps) {
    if (st.node->name != node) continue;
    if (st.cache < 0) return not_found("node '", node, "' is not an attention node");
    const numerics::KvCache& c = impl_->caches[static_cast<size_t>(st.cache)];
    *out = KvCacheSnapshot();
    out->quantized = st.attn.quantized;
    out->tokens = c.tokens;
    out->kv_heads = st.attn.kv_heads;
    out->head_dim = st.attn.head_dim;
    out->k_codes = c.k_codes;
    out->v_codes = c.v_codes;
    out->k_values = c.k_values;
    out->v_values = c.v_values;
    return ok_status();
  }
  return not_found("no node '", node, "'");
}

}  // namespace qbc::quant
