// FakeQuantSession: interprets an MBLT graph node by node (batch 1) with the
// numerics of docs/numerics.md; the per-op arithmetic lives in qbc_numerics (qbc/numerics/).
// Values between nodes are [s, width] rows of floats that hold fp16 values (body)
// or fp32 values (the head's outputs).
#include "qbc/quant/fakequant.h"

#include <cmath>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "qbc/ir/builder.h"
#include "qbc/ir/verifier.h"
#include "qbc/numerics/attention.h"
#include "qbc/numerics/elementwise.h"
#include "qbc/numerics/fp16.h"
#include "qbc/numerics/linear.h"
#include "qbc/numerics/norm.h"
#include "qbc/numerics/quantizer.h"
#include "qbc/numerics/rope.h"

namespace qbc::quant {
namespace {

using ir::Node;
using ir::Op;

std::string node_label(const Node& n) {
  return "node '" + n.name + "' (" + std::string(ir::op_info(n.op).name) + ")";
}

/// A node prepared for execution: operands resolved, attributes decoded once.
struct Step {
  const Node* node = nullptr;
  std::vector<int> inputs;  // value operands, in order
  int64_t width = 0;        // last dim of the result
  bool fp16 = true;         // round the result to fp16
  std::vector<float> w, bias;
  numerics::QLinear ql;
  double eps = 0.0, unit_offset = 0.0;
  int64_t group = 0, start = 0, end = 0;
  numerics::Rope rope;
  numerics::Attention attn;
  int cache = -1;
  bool gelu = false;
  float factor = 1.0f;  // scale factor / softcap cap
};

/// Decodes a rope node's parameters (ir::rope_params_of checks them).
Status decode_rope(const Node& n, numerics::Rope* out) {
  QBC_ASSIGN_OR_RETURN(const ir::RopeParams p, ir::rope_params_of(n));
  numerics::Rope& r = *out;
  r.heads = p.num_heads;
  r.head_dim = p.head_dim;
  r.rotary_dim = p.rotary_dim;
  r.inv_freq = p.inv_freq;
  r.long_inv_freq = p.long_inv_freq;
  r.attention_factor = p.attention_factor;
  r.dynamic_factor = p.dynamic_factor;
  r.original_max_positions = p.original_max_positions;
  r.theta = p.theta;
  return ok_status();
}

/// Decodes the quantized-KV attributes of an attention node.
Status decode_kv_quant(const Node& n, numerics::Attention* a) {
  const ir::Attrs& at = n.attrs;
  a->quantized = true;
  a->k_bits = static_cast<int>(at.get_int("k_bits"));
  a->v_bits = static_cast<int>(at.get_int("v_bits"));
  a->p_bits = static_cast<int>(at.get_int("p_bits"));
  a->q_dynamic = at.has("q_dynamic") && at.get_int("q_dynamic") != 0;
  const std::pair<const char*, std::vector<float>*> lists[] = {
      {"q_scale", &a->q_scale}, {"k_scale", &a->k_scale}, {"v_scale", &a->v_scale}};
  for (const auto& [key, dst] : lists) {
    for (double s : at.get_floats(key)) {
      const float f = static_cast<float>(s);
      if (!(f > 0.0f) || !std::isfinite(f)) {
        return invalid_argument(node_label(n), ": ", key, " holds ", s,
                                "; scales must be positive and finite");
      }
      dst->push_back(f);
    }
  }
  const size_t width = a->k_scale.size();
  for (const auto& [key, dst] :
       {std::pair<const char*, std::vector<float>*>{"k_offset", &a->k_offset},
        {"v_offset", &a->v_offset}}) {
    dst->assign(width, 0.0f);
    if (!at.has(key)) continue;
    const std::vector<double> offsets = at.get_floats(key);
    for (size_t i = 0; i < offsets.size() && i < width; ++i) {
      if (!std::isfinite(offsets[i])) {
        return invalid_argument(node_label(n), ": ", key, " holds ", offsets[i],
                                "; offsets must be finite");
      }
      (*dst)[i] = static_cast<float>(offsets[i]);
    }
  }
  return ok_status();
}

}  // namespace

struct FakeQuantSession::Impl {
  ir::Graph graph;
  std::vector<Step> steps;
  std::vector<numerics::KvCache> caches;
  std::vector<float> host_embedding;  // fp32 [embed_rows, hidden]
  int embeds_id = -1;
  int positions_id = -1;
  int output_id = -1;
  int64_t position = 0;
  int64_t vocab = 0;
  int64_t embed_rows = 0;
  int64_t hidden = 0;
  bool keep = false;
  std::map<std::string, std::pair<std::vector<float>, std::vector<int64_t>>> kept;

  Status prepare();
  Status prepare_step(Step& st);
  Status load(const ir::WeightReader& reader);
  Status load_qlinear(Step& st, const std::map<std::string, std::vector<float>>& by_name);
  Status run(const std::vector<float>& x, int64_t s, std::vector<float>* logits);
  void exec(Step& st, std::vector<std::vector<float>>& values, int64_t s);
  Status check_tokens(const std::vector<int32_t>& tokens) const;
};

Status FakeQuantSession::Impl::prepare_step(Step& st) {
  const Node& n = *st.node;
  const ir::Attrs& at = n.attrs;
  // The head keeps fp32 (logits leave unrounded); rms_norm runs on the vector unit in
  // fp16 in/out wherever it sits.
  st.fp16 = n.part == ir::Part::kBody || n.op == Op::kRmsNorm;
  switch (n.op) {
    case Op::kInput:
    case Op::kLinear:
    case Op::kAdd:
      break;
    case Op::kQLinear:
      st.ql.in_scale = static_cast<float>(at.get_float("in_scale"));
      st.ql.in_bits = static_cast<int>(at.get_int("in_bits"));
      st.ql.out_fp16 = at.get_int("out_fp16") != 0;
      st.ql.in_dynamic = at.has("in_dynamic") && at.get_int("in_dynamic") != 0;
      st.ql.in_asym = at.get_int("in_asym", 0) == 1;
      st.ql.in_zero =
          st.ql.in_asym && !st.ql.in_dynamic ? static_cast<int32_t>(at.get_int("in_zero")) : 0;
      st.ql.group = at.get_int("w_group", 0);
      if (!(st.ql.in_scale > 0.0f) || !std::isfinite(st.ql.in_scale)) {
        return invalid_argument(node_label(n), ": in_scale ", at.get_float("in_scale"),
                                " is not a positive finite fp32 value");
      }
      break;
    case Op::kRmsNorm:
      st.eps = at.get_float("eps");
      st.unit_offset = static_cast<double>(at.get_int("unit_offset"));
      st.group = at.get_int("group");
      if (st.group < 0 || (st.group > 0 && st.width % st.group != 0)) {
        return invalid_argument(node_label(n), ": group ", st.group, " does not divide ", st.width);
      }
      break;
    case Op::kSlice:
      st.start = at.get_int("start");
      st.end = at.get_int("end");
      break;
    case Op::kRope:
      QBC_RETURN_IF_ERROR(decode_rope(n, &st.rope));
      break;
    case Op::kAttention: {
      numerics::Attention& a = st.attn;
      a.heads = at.get_int("num_heads");
      a.kv_heads = at.get_int("num_kv_heads");
      a.head_dim = at.get_int("head_dim");
      a.scale = at.get_float("scale");
      a.softcap = at.get_float("softcap");
      a.window = at.get_int("window");
      a.max_cache = at.get_int("max_cache");
      if (a.kv_heads <= 0 || a.heads % a.kv_heads != 0 || a.max_cache <= 0) {
        return invalid_argument(node_label(n), ": num_heads ", a.heads,
                                " is not a multiple of num_kv_heads ", a.kv_heads, " or max_cache ",
                                a.max_cache, " is not positive");
      }
      if (at.has("k_bits")) QBC_RETURN_IF_ERROR(decode_kv_quant(n, &a));
      if (a.quantized && at.has("k_rot_offset")) {  // the K producer's RoPE rotates the offsets too
        const Node& k = graph.node(n.operands[1].value);
        if (k.op != Op::kRope)
          return invalid_argument(node_label(n), ": k_rot_offset needs K from a rope node");
        QBC_RETURN_IF_ERROR(decode_rope(k, &a.k_rope));
        const std::vector<double> m = at.get_floats("k_rot_offset");
        if (m.size() != a.k_scale.size()) {
          return invalid_argument(node_label(n), ": k_rot_offset has ", m.size(), " values, K has ",
                                  a.k_scale.size(), " channels");
        }
        for (double v : m) {
          if (!std::isfinite(v)) return invalid_argument(node_label(n), ": k_rot_offset holds ", v);
          a.k_rot_offset.push_back(static_cast<float>(v));
        }
      }
      st.cache = static_cast<int>(caches.size());
      caches.emplace_back();
      break;
    }
    case Op::kGatedAct: {
      const std::string act = at.get_string("act");
      if (act != "silu" && act != "gelu_tanh") {
        return unimplemented(node_label(n), ": activation '", act,
                             "' (supported: silu, gelu_tanh)");
      }
      st.gelu = act == "gelu_tanh";
      break;
    }
    case Op::kScale:
      st.factor = static_cast<float>(at.get_float("factor"));
      break;
    case Op::kSoftcap:
      st.factor = static_cast<float>(at.get_float("cap"));
      break;
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
      if (!op.is_weight()) st.inputs.push_back(op.value);
    }
    if (n.op == Op::kInput && n.type.dtype == ir::DType::kI64) {
      positions_id = static_cast<int>(i);
      st.width = 1;
    } else {
      st.width = n.type.rank() > 0 ? n.type.dim(-1) : 0;
      if (st.width <= 0) {
        return invalid_argument(node_label(n), ": last dimension of ", n.type.to_string(),
                                " must be static");
      }
      if (n.op == Op::kInput) {
        embeds_id = static_cast<int>(i);
        hidden = st.width;
      }
    }
    QBC_RETURN_IF_ERROR(prepare_step(st));
    steps.push_back(std::move(st));
  }
  if (embeds_id < 0 || positions_id < 0) {
    return invalid_argument("graph '", graph.name(),
                            "' needs inputs inputs_embeds (f32) and positions (i64)");
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
  const int w_bits = static_cast<int>(n.attrs.get_int("w_bits"));
  const double hi = static_cast<double>(numerics::quant_max(w_bits));
  const std::vector<float>& codes = by_name.at(wq->name);
  p.wq.resize(codes.size());
  for (size_t i = 0; i < codes.size(); ++i) {
    const double c = codes[i];
    if (c != std::nearbyint(c) || c < -hi - 1.0 || c > hi) {
      return invalid_argument(node_label(n), ": weight '", wq->name, "' element ", i, " is ", c,
                              ", not an integer in [", -hi - 1.0, ", ", hi, "] for w_bits ",
                              w_bits);
    }
    p.wq[i] = static_cast<int32_t>(c);
  }
  p.wscale = by_name.at(n.operands[2].weight);
  for (float s : p.wscale) {  // negative: the extreme weight sits on the long end (numerics.md)
    if (!(std::fabs(s) >= 1e-8f) || !std::isfinite(s)) {
      return invalid_argument(node_label(n), ": weight scale '", n.operands[2].weight, "' holds ",
                              s, "; weight scales must be finite with |s| >= 1e-8");
    }
  }
  size_t bias_at = 3;
  if (n.attrs.get_int("w_zero", 0) == 1) {  // ŵ = s·(q − z): the zero points share the codes' range
    bias_at = 4;
    const std::vector<float>& zeros = by_name.at(n.operands[3].weight);
    if (zeros.size() != p.wscale.size()) {
      return invalid_argument(node_label(n), ": ", zeros.size(), " zero points for ",
                              p.wscale.size(), " scales");
    }
    p.wzero.resize(zeros.size());
    for (size_t i = 0; i < zeros.size(); ++i) {
      const double z = zeros[i];
      if (z != std::nearbyint(z) || z < -hi - 1.0 || z > hi) {
        return invalid_argument(node_label(n), ": zero point '", n.operands[3].weight, "' element ",
                                i, " is ", z, ", not an integer in [", -hi - 1.0, ", ", hi,
                                "] for w_bits ", w_bits);
      }
      p.wzero[i] = static_cast<int32_t>(z);
    }
  }
  if (n.operands.size() > bias_at) p.bias = by_name.at(n.operands[bias_at].weight);
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
  if (host_embedding.empty())
    return invalid_argument("graph '", graph.name(), "' has no host embedding weight");
  for (Step& st : steps) {
    const Node& n = *st.node;
    if (n.op == Op::kQLinear) {
      QBC_RETURN_IF_ERROR(load_qlinear(st, by_name));
      continue;
    }
    int nw = 0;
    for (const ir::Operand& op : n.operands) {
      if (!op.is_weight()) continue;
      auto it = by_name.find(op.weight);
      if (it == by_name.end())
        return invalid_argument(node_label(n), ": unknown weight '", op.weight, "'");
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
  out.assign(static_cast<size_t>(s * st.width), 0.0f);
  const int64_t count = s * st.width;
  switch (n.op) {
    case Op::kInput:
      break;
    case Op::kQLinear:
      numerics::qlinear(in(0), s, st.ql, out.data());
      break;
    case Op::kLinear:
      numerics::linear(in(0), s, st.w, st.bias, st.width, in_width(0), st.fp16, out.data());
      break;
    case Op::kRmsNorm:
      numerics::rms_norm(in(0), s, st.width, st.w, st.eps, st.unit_offset, st.group, out.data());
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
                          out.data());
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
  }
}

Status FakeQuantSession::Impl::run(const std::vector<float>& x, int64_t s,
                                   std::vector<float>* logits) {
  if (s <= 0) return invalid_argument("forward: no tokens");
  for (const Step& st : steps) {
    if (st.cache < 0) continue;
    if (position + s > st.attn.max_cache) {
      return resource_exhausted(node_label(*st.node), ": KV cache overflow: ", position,
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
  for (Step& st : steps) exec(st, values, s);
  position += s;
  kept.clear();
  if (keep) {
    for (size_t i = 0; i < steps.size(); ++i) {
      std::vector<int64_t> shape = {1, s};
      if (static_cast<int>(i) != positions_id) shape.push_back(steps[i].width);
      kept[steps[i].node->name] = {values[i], std::move(shape)};
    }
  }
  if (logits != nullptr) *logits = std::move(values[static_cast<size_t>(output_id)]);
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

void FakeQuantSession::reset() {
  impl_->position = 0;
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
  if (!keep) impl_->kept.clear();
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
