// ref::Session: interprets an MBLT graph node by node with LibTorch on the CPU
// (batch 1), each attention node owning a growable KV cache. The op semantics
// are those of docs/ir.md; the tensor math lives in ops.cpp.
//
// LibTorch throws c10::Error; every public method catches at this boundary and
// returns a Status naming the node at fault.
#include "qbc/ref/session.h"

#include <torch/torch.h>

#include <algorithm>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "ops.h"
#include "qbc/ir/host_inputs.h"
#include "qbc/ir/op_params.h"
#include "qbc/ir/verifier.h"
#include "qbc/runner/mrope.h"

namespace qbc::ref {
namespace {

using ir::Node;
using ir::Op;

/// One KV cache: [KV, capacity, d] tensors that grow up to max_cache tokens.
struct KvCache {
  at::Tensor k;
  at::Tensor v;
  int64_t capacity = 0;
  int64_t max_cache = 0;
  int64_t kv_heads = 0;
  int64_t head_dim = 0;
};

/// A node prepared for execution: operands resolved, attributes decoded once.
struct Step {
  const Node* node = nullptr;
  std::vector<int> inputs;      // value operands, in order
  at::Tensor w;                 // first weight operand (rms_norm, layer_norm, linear)
  at::Tensor bias;              // linear's and layer_norm's optional bias
  double f = 0.0;               // eps / factor / cap / scale (rms_norm, layer_norm: eps)
  double f2 = 0.0;              // unit_offset / softcap
  int64_t a = 0, b = 0, c = 0;  // slice start/end; rope heads/head_dim/rotary_dim; group
  int64_t kv_heads = 0, window = 0;
  int rope_table = -1;
  int cache = -1;
  bool gelu = false;
  std::vector<int64_t> segments;  // full_attention's block-diagonal runs
  std::vector<int> release;       // values whose last use is this step
};

// rms_norm's eps, unit_offset and group into the step's f, f2 and c.
Status decode_rms_norm(const Node& n, Step* st) {
  QBC_ASSIGN_OR_RETURN(st->f, ir::required_float(n, "eps"));
  QBC_ASSIGN_OR_RETURN(const int64_t unit_offset, ir::required_int(n, "unit_offset"));
  QBC_ASSIGN_OR_RETURN(st->c, ir::required_int(n, "group"));
  st->f2 = static_cast<double>(unit_offset);
  return ok_status();
}

std::string torch_message(const c10::Error& e) { return e.what_without_backtrace(); }

}  // namespace

struct Session::Impl {
  ir::Graph graph;
  SessionOptions options;
  at::ScalarType dtype = at::kFloat;
  std::vector<Step> steps;
  std::vector<numerics::Rope> rope_tables;
  std::vector<KvCache> caches;
  at::Tensor host_embedding;  // float32 [vocab, hidden]
  int embeds_id = -1;
  int positions_id = -1;
  int rope_cos_id = -1, rope_sin_id = -1;     // M-RoPE graphs: host tables (runner/mrope.h)
  std::vector<int> deepstack_ids;             // Qwen3-VL: inputs deepstack.J, in order
  std::vector<std::vector<float>> deepstack;  // rows for the next call (empty: zeros)
  std::optional<runner::MRopeSpec> mrope;
  int64_t rope_delta = 0;      // M-RoPE: text positions are cache position + rope_delta
  std::vector<int> input_ids;  // every graph input, in graph order
  bool feature_graph = false;  // no token positions: run with forward_inputs only
  int output_id = -1;
  int64_t position = 0;
  int64_t vocab = 0;       // logits width
  int64_t embed_rows = 0;  // rows of the host embedding table
  int64_t hidden = 0;
  bool keep = false;
  bool span = false;  ///< the current call is one bidirectional span (forward_embeds_span)
  std::map<std::string, at::Tensor> kept;

  Status load(const ir::WeightReader& reader);
  Status prepare();
  Status run(at::Tensor x, std::vector<float>* logits,
             const std::vector<int64_t>* mrope_positions = nullptr);
  /// forward_embeds and its span and M-RoPE forms (`what` names the call in errors).
  Status run_embeds(const char* what, const std::vector<float>& embeds, int64_t seq,
                    std::vector<float>* logits, bool as_span,
                    const std::vector<int64_t>* mrope_positions);
  Status set_rope_tables(std::vector<at::Tensor>& values, int64_t s,
                         const std::vector<int64_t>* mrope_positions);
  Status run_steps(std::vector<at::Tensor>& values, int64_t s);
  Status run_inputs(const std::vector<std::vector<float>>& inputs, std::vector<float>* out);
  Status exec(Step& st, std::vector<at::Tensor>& values, int64_t s,
              std::vector<std::pair<at::Tensor, at::Tensor>>& rope_cache);
  Status check_tokens(const std::vector<int32_t>& tokens) const;
};

Status Session::Impl::load(const ir::WeightReader& reader) {
  // Weights naming the same source tensor (tied embeddings) are read once.
  std::map<std::string, at::Tensor> by_tensor;
  std::map<std::string, at::Tensor> by_name;
  for (const auto& [name, w] : graph.weights()) {
    const int64_t expected = w.type.num_elements();
    if (expected <= 0)
      return invalid_argument("weight '", name, "': no static shape (", w.type.to_string(), ")");
    const std::string key =
        std::to_string(static_cast<int>(w.source)) + "|" + w.tensor + "|" + w.type.to_string();
    at::Tensor t;
    if (auto it = by_tensor.find(key); it != by_tensor.end()) {
      t = it->second;
    } else {
      auto data = std::make_unique<std::vector<float>>();
      QBC_RETURN_IF_ERROR(
          reader(w, data.get()).with_context("weight '", name, "' (tensor '", w.tensor, "')"));
      if (static_cast<int64_t>(data->size()) != expected) {
        return invalid_argument("weight '", name, "' (tensor '", w.tensor, "'): read ",
                                data->size(), " values, expected ", expected, " for ",
                                w.type.to_string());
      }
      // The tensor adopts the vector's buffer: no second copy of a (possibly 1 GB) weight.
      std::vector<float>* owned = data.release();
      t = torch::from_blob(
          owned->data(), w.type.dims, [owned](void*) { delete owned; }, at::kFloat);
      by_tensor[key] = t;
    }
    if (w.role == ir::WeightRole::kHostEmbedding) {
      if (w.type.rank() != 2)
        return invalid_argument("host embedding '", name, "' must be 2-D, is ", w.type.to_string());
      host_embedding = t;
      embed_rows = w.type.dims[0];
      vocab = embed_rows;
    } else {
      by_name[name] = t.to(dtype);
    }
  }
  for (Step& st : steps) {
    int nw = 0;
    for (const ir::Operand& op : st.node->operands) {
      if (!op.is_weight()) continue;
      auto it = by_name.find(op.weight);
      if (it == by_name.end())
        return invalid_argument(ir::describe(*st.node), ": unknown weight '", op.weight, "'");
      (nw++ == 0 ? st.w : st.bias) = it->second;
    }
  }
  return ok_status();
}

Status Session::Impl::prepare() {
  const auto& nodes = graph.nodes();
  std::vector<int> last_use(nodes.size(), -1);
  std::map<std::string, int> table_ids;
  for (size_t i = 0; i < nodes.size(); ++i) {
    const Node& n = nodes[i];
    Step st;
    st.node = &n;
    for (const ir::Operand& op : n.operands) {
      if (op.is_weight()) continue;
      st.inputs.push_back(op.value);
      last_use[static_cast<size_t>(op.value)] = static_cast<int>(i);
    }
    const ir::Attrs& at = n.attrs;
    if (ir::is_quantized(n)) {
      return unimplemented(ir::describe(n),
                           ": quantized node in the float reference runtime; "
                           "run quantized graphs with the fake-quant evaluator");
    }
    switch (n.op) {
      case Op::kQLinear:
        break;
      case Op::kInput:
        input_ids.push_back(static_cast<int>(i));
        if (n.name == "rope_cos" || n.name == "rope_sin") {
          (n.name == "rope_cos" ? rope_cos_id : rope_sin_id) = static_cast<int>(i);
        } else if (ir::is_deepstack_input(n.name)) {
          deepstack_ids.push_back(static_cast<int>(i));
        } else if (n.type.dtype == ir::DType::kI64) {
          positions_id = static_cast<int>(i);
        } else {
          embeds_id = static_cast<int>(i);
          hidden = n.type.dim(-1);
        }
        break;
      case Op::kRmsNorm:
        QBC_RETURN_IF_ERROR(decode_rms_norm(n, &st));
        break;
      case Op::kLayerNorm: {
        QBC_ASSIGN_OR_RETURN(st.f, ir::required_float(n, "eps"));
        break;
      }
      case Op::kLinear:
        break;
      case Op::kSlice: {
        QBC_ASSIGN_OR_RETURN(st.a, ir::required_int(n, "start"));
        QBC_ASSIGN_OR_RETURN(st.b, ir::required_int(n, "end"));
        break;
      }
      case Op::kRope: {
        QBC_ASSIGN_OR_RETURN(numerics::Rope t, ir::rope_params(n));
        st.a = t.heads;
        st.b = t.head_dim;
        st.c = t.rotary_dim;
        // Rope nodes with identical parameters share one cos/sin table per call.
        std::ostringstream key;
        key.precision(17);
        for (const auto& [k, v] : at.all()) {
          if (k == "num_heads" || k == "head_dim") continue;
          key << k << '=';
          if (const auto* d = std::get_if<double>(&v)) key << *d;
          if (const auto* x = std::get_if<int64_t>(&v)) key << *x;
          if (const auto* fs = std::get_if<std::vector<double>>(&v))
            for (double d : *fs) key << d << ',';
          key << ';';
        }
        auto [it, fresh] = table_ids.emplace(key.str(), static_cast<int>(rope_tables.size()));
        if (fresh) rope_tables.push_back(std::move(t));
        st.rope_table = it->second;
        break;
      }
      case Op::kAttention: {
        QBC_ASSIGN_OR_RETURN(const numerics::Attention p, ir::attention_params(n));
        st.a = p.heads;
        st.kv_heads = p.kv_heads;
        st.b = p.head_dim;
        st.f = p.scale;
        st.f2 = p.softcap;
        st.window = p.window;
        KvCache cache;
        cache.max_cache = p.max_cache;
        cache.kv_heads = st.kv_heads;
        cache.head_dim = st.b;
        st.cache = static_cast<int>(caches.size());
        caches.push_back(cache);
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
      case Op::kAdd:
        break;
      case Op::kScale:
      case Op::kSoftcap: {
        QBC_ASSIGN_OR_RETURN(st.f, ir::required_float(n, n.op == Op::kScale ? "factor" : "cap"));
        break;
      }
      case Op::kGelu:  // approx absent: erf (a = 0); "quick" (1) or "tanh" (2)
        st.a = !at.has("approx") ? 0 : at.get_string("approx") == "tanh" ? 2 : 1;
        break;
      case Op::kRopeTable: {
        QBC_ASSIGN_OR_RETURN(st.a, ir::required_int(n, "num_heads"));
        QBC_ASSIGN_OR_RETURN(st.b, ir::required_int(n, "head_dim"));
        break;
      }
      case Op::kFullAttention: {
        QBC_ASSIGN_OR_RETURN(st.a, ir::required_int(n, "num_heads"));
        QBC_ASSIGN_OR_RETURN(st.b, ir::required_int(n, "head_dim"));
        QBC_ASSIGN_OR_RETURN(st.f, ir::required_float(n, "scale"));
        if (at.has("segments")) st.segments = at.get_ints("segments");
        break;
      }
      case Op::kMergeRows: {
        QBC_ASSIGN_OR_RETURN(st.a, ir::required_int(n, "factor"));
        break;
      }
      case Op::kAvgPool: {
        QBC_ASSIGN_OR_RETURN(st.a, ir::required_int(n, "grid_w"));
        QBC_ASSIGN_OR_RETURN(st.b, ir::required_int(n, "kernel"));
        break;
      }
    }
    steps.push_back(std::move(st));
  }
  // A graph without token positions, rope or a KV cache (a vision tower) takes its inputs
  // through forward_inputs.
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
  }
  if (graph.outputs().empty()) return invalid_argument("graph '", graph.name(), "' has no output");
  output_id = graph.outputs().front();
  for (ir::ValueId o : graph.outputs())
    last_use[static_cast<size_t>(o)] = static_cast<int>(nodes.size());
  for (size_t v = 0; v < nodes.size(); ++v) {
    if (last_use[v] >= 0 && last_use[v] < static_cast<int>(nodes.size())) {
      steps[static_cast<size_t>(last_use[v])].release.push_back(static_cast<int>(v));
    }
  }
  return ok_status();
}

Status Session::Impl::exec(Step& st, std::vector<at::Tensor>& values, int64_t s,
                           std::vector<std::pair<at::Tensor, at::Tensor>>& rope_cache) {
  const Node& n = *st.node;
  auto in = [&](size_t i) -> const at::Tensor& {
    return values[static_cast<size_t>(st.inputs[i])];
  };
  at::Tensor out;
  switch (n.op) {
    case Op::kInput:
    case Op::kQLinear:  // rejected by prepare()
      return ok_status();
    case Op::kRmsNorm:
      out = kernels::rms_norm(in(0), st.w, st.f, st.f2, st.c);
      break;
    case Op::kLayerNorm:
      out = at::layer_norm(in(0), {in(0).size(-1)}, st.w,
                           st.bias.defined() ? c10::optional<at::Tensor>(st.bias) : c10::nullopt,
                           st.f);
      break;
    case Op::kLinear:
      out = st.bias.defined() ? at::linear(in(0), st.w, st.bias) : at::linear(in(0), st.w);
      break;
    case Op::kSlice:
      out = in(0).narrow(-1, st.a, st.b - st.a).contiguous();
      break;
    case Op::kRope: {
      auto& [cos, sin] = rope_cache[static_cast<size_t>(st.rope_table)];
      if (!cos.defined()) {
        std::vector<int64_t> pos(static_cast<size_t>(s));
        for (int64_t i = 0; i < s; ++i) pos[static_cast<size_t>(i)] = position + i;
        kernels::rope_cos_sin(rope_tables[static_cast<size_t>(st.rope_table)], pos, in(0), &cos,
                              &sin);
      }
      out = kernels::rope(in(0), cos, sin, st.a, st.b, st.c);
      break;
    }
    case Op::kAttention: {
      KvCache& c = caches[static_cast<size_t>(st.cache)];
      const int64_t needed = position + s;
      if (needed > c.capacity) {
        const int64_t cap = std::min(c.max_cache, std::max({needed, 2 * c.capacity, int64_t{256}}));
        at::Tensor k = at::zeros({c.kv_heads, cap, c.head_dim}, at::TensorOptions().dtype(dtype));
        at::Tensor v = at::zeros({c.kv_heads, cap, c.head_dim}, at::TensorOptions().dtype(dtype));
        if (position > 0) {
          k.narrow(1, 0, position).copy_(c.k.narrow(1, 0, position));
          v.narrow(1, 0, position).copy_(c.v.narrow(1, 0, position));
        }
        c.k = k;
        c.v = v;
        c.capacity = cap;
      }
      c.k.narrow(1, position, s).copy_(in(1).reshape({s, c.kv_heads, c.head_dim}).transpose(0, 1));
      c.v.narrow(1, position, s).copy_(in(2).reshape({s, c.kv_heads, c.head_dim}).transpose(0, 1));
      out = kernels::attention(in(0).reshape({1, s, st.a * st.b}), c.k, c.v, position, st.a,
                               st.kv_heads, st.b, st.f, st.f2, st.window, span);
      break;
    }
    case Op::kGatedAct:
      out = kernels::gated_act(in(0), in(1), st.gelu ? "gelu_tanh" : "silu");
      break;
    case Op::kAdd:
      out = in(0) + in(1);
      break;
    case Op::kScale:
      out = in(0) * st.f;
      break;
    case Op::kSoftcap:
      out = kernels::softcap(in(0), st.f);
      break;
    case Op::kGelu:
      out = st.a == 1   ? kernels::quick_gelu(in(0))
            : st.a == 2 ? kernels::gelu_tanh(in(0))
                        : kernels::gelu(in(0));
      break;
    case Op::kRopeTable: {
      const int64_t rows = in(0).size(1);
      out = kernels::rope(in(0), in(1).reshape({rows, st.b / 2}), in(2).reshape({rows, st.b / 2}),
                          st.a, st.b, st.b);
      break;
    }
    case Op::kFullAttention:
      out = kernels::full_attention(in(0), in(1), in(2), st.a, st.b, st.f, st.segments);
      break;
    case Op::kMergeRows: {
      const at::Tensor& x = in(0);
      out = x.reshape({x.size(0), x.size(1) / st.a, x.size(2) * st.a});
      break;
    }
    case Op::kAvgPool:
      out = kernels::avg_pool(in(0), st.a, st.b);
      break;
  }
  values[static_cast<size_t>(&st - steps.data())] = std::move(out);
  return ok_status();
}

// M-RoPE graphs: rope_cos / rope_sin [1, s, head_dim/2] from the given 3-stream positions, or,
// without them, from text positions (cache position + rope_delta in every stream).
Status Session::Impl::set_rope_tables(std::vector<at::Tensor>& values, int64_t s,
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
  const int64_t half = mrope->head_dim / 2;
  values[static_cast<size_t>(rope_cos_id)] = torch::from_blob(c.data(), {1, s, half}, at::kDouble)
                                                 .to(dtype, /*non_blocking=*/false, /*copy=*/true);
  values[static_cast<size_t>(rope_sin_id)] = torch::from_blob(sn.data(), {1, s, half}, at::kDouble)
                                                 .to(dtype, /*non_blocking=*/false, /*copy=*/true);
  return ok_status();
}

Status Session::Impl::run(at::Tensor x, std::vector<float>* logits,
                          const std::vector<int64_t>* mrope_positions) {
  // set_deepstack's rows are this call's, whichever way it returns.
  const std::vector<std::vector<float>> rows = std::move(deepstack);
  deepstack.clear();
  if (feature_graph) {
    return failed_precondition("graph '", graph.name(),
                               "' has no token positions: use forward_inputs");
  }
  const int64_t s = x.size(1);
  if (s <= 0) return invalid_argument("forward: no tokens");
  for (const Step& st : steps) {
    if (st.cache < 0) continue;
    const KvCache& c = caches[static_cast<size_t>(st.cache)];
    if (position + s > c.max_cache) {
      return resource_exhausted(ir::describe(*st.node), ": KV cache overflow: ", position,
                                " cached + ", s, " new tokens exceed max_cache ", c.max_cache);
    }
  }
  std::vector<at::Tensor> values(steps.size());
  values[static_cast<size_t>(embeds_id)] = x.to(dtype);
  values[static_cast<size_t>(positions_id)] =
      at::arange(position, position + s, at::kLong).view({1, s});
  QBC_RETURN_IF_ERROR(set_rope_tables(values, s, mrope_positions));
  for (size_t j = 0; j < deepstack_ids.size(); ++j) {
    at::Tensor& v = values[static_cast<size_t>(deepstack_ids[j])];
    if (rows.empty()) {
      v = at::zeros({1, s, hidden}, at::kFloat).to(dtype);
      continue;
    }
    if (static_cast<int64_t>(rows[j].size()) != s * hidden)
      return invalid_argument(graph.node(deepstack_ids[j]).name, ": ", rows[j].size(),
                              " values for ", s, " tokens of hidden size ", hidden);
    v = torch::from_blob(const_cast<float*>(rows[j].data()), {1, s, hidden}, at::kFloat)
            .clone()
            .to(dtype);
  }
  QBC_RETURN_IF_ERROR(run_steps(values, s));
  position += s;
  if (logits != nullptr) {
    const at::Tensor out = values[static_cast<size_t>(output_id)].to(at::kFloat).contiguous();
    logits->assign(out.data_ptr<float>(), out.data_ptr<float>() + out.numel());
  }
  return ok_status();
}

Status Session::Impl::run_steps(std::vector<at::Tensor>& values, int64_t s) {
  std::vector<std::pair<at::Tensor, at::Tensor>> rope_cache(rope_tables.size());
  kept.clear();
  for (Step& st : steps) {
    try {
      QBC_RETURN_IF_ERROR(exec(st, values, s, rope_cache));
    } catch (const c10::Error& e) {
      return internal_error(ir::describe(*st.node), ": ", torch_message(e));
    } catch (const std::exception& e) {
      return internal_error(ir::describe(*st.node), ": ", e.what());
    }
    if (keep) continue;
    for (int v : st.release) values[static_cast<size_t>(v)] = at::Tensor();
  }
  if (keep) {
    for (size_t i = 0; i < steps.size(); ++i) {
      if (values[i].defined()) kept[steps[i].node->name] = values[i];
    }
  }
  return ok_status();
}

Status Session::Impl::run_inputs(const std::vector<std::vector<float>>& inputs,
                                 std::vector<float>* out) {
  if (!feature_graph) {
    return failed_precondition("graph '", graph.name(),
                               "' takes tokens or embeddings: use forward / forward_embeds");
  }
  if (inputs.size() != input_ids.size()) {
    return invalid_argument("graph '", graph.name(), "' has ", input_ids.size(), " inputs, got ",
                            inputs.size());
  }
  std::vector<at::Tensor> values(steps.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Node& n = graph.node(input_ids[i]);
    const int64_t want = n.type.num_elements();
    if (want <= 0 || static_cast<int64_t>(inputs[i].size()) != want) {
      return invalid_argument("input '", n.name, "' ", n.type.to_string(), ": got ",
                              inputs[i].size(), " values");
    }
    values[static_cast<size_t>(input_ids[i])] =
        torch::from_blob(const_cast<float*>(inputs[i].data()), n.type.dims, at::kFloat)
            .to(dtype, /*non_blocking=*/false, /*copy=*/true);
  }
  QBC_RETURN_IF_ERROR(run_steps(values, 0));
  // Several outputs (Qwen3-VL's features and DeepStack features): side by side per row.
  std::vector<at::Tensor> outs;
  for (ir::ValueId id : graph.outputs()) outs.push_back(values[static_cast<size_t>(id)]);
  const at::Tensor o =
      (outs.size() == 1 ? outs.front() : at::cat(outs, -1)).to(at::kFloat).contiguous();
  out->assign(o.data_ptr<float>(), o.data_ptr<float>() + o.numel());
  return ok_status();
}

Status Session::Impl::check_tokens(const std::vector<int32_t>& tokens) const {
  return runner::check_token_ids(tokens, embed_rows);
}

Session::Session() : impl_(std::make_unique<Impl>()) {}
Session::~Session() = default;

StatusOr<std::unique_ptr<Session>> Session::create_in_plugin(const ir::Graph& g,
                                                             const ir::WeightReader& weights,
                                                             const SessionOptions& options) {
  QBC_RETURN_IF_ERROR(ir::verify(g));
  std::unique_ptr<Session> s(new Session());
  Impl& im = *s->impl_;
  im.graph = g;
  im.options = options;
  im.dtype = options.float64 ? at::kDouble : at::kFloat;
  try {
    if (options.threads > 0) at::set_num_threads(options.threads);
    QBC_RETURN_IF_ERROR(im.prepare());
    QBC_RETURN_IF_ERROR(im.load(weights));
  } catch (const c10::Error& e) {
    return internal_error("graph '", g.name(), "': ", torch_message(e));
  } catch (const std::exception& e) {
    return internal_error("graph '", g.name(), "': ", e.what());
  }
  // A graph without a host embedding (a calibration segment) runs from embeddings only.
  if (im.host_embedding.defined() && im.host_embedding.size(1) != im.hidden) {
    return invalid_argument("host embedding width ", im.host_embedding.size(1), " != hidden size ",
                            im.hidden);
  }
  const ir::Node& out = g.node(im.output_id);
  if (out.type.dim(-1) > 0) im.vocab = out.type.dim(-1);
  return s;
}

Status Session::forward(const std::vector<int32_t>& tokens, std::vector<float>* logits) {
  if (!impl_->host_embedding.defined()) {
    return failed_precondition("graph '", impl_->graph.name(),
                               "' has no host embedding weight: use forward_embeds");
  }
  QBC_RETURN_IF_ERROR(impl_->check_tokens(tokens));
  if (tokens.empty()) return invalid_argument("forward: no tokens");
  try {
    std::vector<int64_t> ids(tokens.begin(), tokens.end());
    const at::Tensor idx =
        torch::from_blob(ids.data(), {static_cast<int64_t>(ids.size())}, at::kLong);
    at::Tensor x = impl_->host_embedding.index_select(0, idx).unsqueeze(0);
    return impl_->run(x, logits);
  } catch (const c10::Error& e) {
    return internal_error("forward: ", torch_message(e));
  }
}

Status Session::Impl::run_embeds(const char* what, const std::vector<float>& embeds, int64_t seq,
                                 std::vector<float>* logits, bool as_span,
                                 const std::vector<int64_t>* mrope_positions) {
  if (seq <= 0 || static_cast<int64_t>(embeds.size()) != seq * hidden) {
    return invalid_argument(what, ": ", embeds.size(), " values for ", seq,
                            " tokens of hidden size ", hidden);
  }
  span = as_span;
  try {
    at::Tensor x =
        torch::from_blob(const_cast<float*>(embeds.data()), {1, seq, hidden}, at::kFloat);
    const Status s = run(x.clone(), logits, mrope_positions);
    span = false;
    return s;
  } catch (const c10::Error& e) {
    span = false;
    return internal_error(what, ": ", torch_message(e));
  }
}

Status Session::forward_embeds(const std::vector<float>& embeds, int64_t seq,
                               std::vector<float>* logits) {
  return impl_->run_embeds("forward_embeds", embeds, seq, logits, false, nullptr);
}

Status Session::forward_embeds_span(const std::vector<float>& embeds, int64_t seq,
                                    std::vector<float>* logits) {
  return impl_->run_embeds("forward_embeds_span", embeds, seq, logits, true, nullptr);
}

Status Session::forward_embeds_mrope(const std::vector<float>& embeds, int64_t seq,
                                     const std::vector<int64_t>& positions,
                                     std::vector<float>* logits) {
  return impl_->run_embeds("forward_embeds_mrope", embeds, seq, logits, false, &positions);
}

Status Session::forward_inputs(const std::vector<std::vector<float>>& inputs,
                               std::vector<float>* out) {
  try {
    return impl_->run_inputs(inputs, out);
  } catch (const c10::Error& e) {
    return internal_error("forward_inputs: ", torch_message(e));
  }
}

Status Session::set_deepstack(std::vector<std::vector<float>> rows) {
  if (rows.size() != impl_->deepstack_ids.size())
    return invalid_argument("graph '", impl_->graph.name(), "' takes ", impl_->deepstack_ids.size(),
                            " DeepStack inputs, got ", rows.size());
  impl_->deepstack = std::move(rows);
  return ok_status();
}

void Session::reset() {
  impl_->position = 0;
  impl_->rope_delta = 0;
  impl_->deepstack.clear();
}
int64_t Session::position() const { return impl_->position; }
int64_t Session::vocab_size() const { return impl_->vocab; }
int64_t Session::hidden_size() const { return impl_->hidden; }

Status Session::embed(const std::vector<int32_t>& tokens, std::vector<float>* out) const {
  if (!impl_->host_embedding.defined()) {
    return failed_precondition("graph '", impl_->graph.name(), "' has no host embedding weight");
  }
  return runner::embed_tokens(impl_->host_embedding.data_ptr<float>(), impl_->embed_rows,
                              impl_->hidden, tokens, out);
}

void Session::set_keep_activations(bool keep) {
  impl_->keep = keep;
  if (!keep) impl_->kept.clear();
}

Status Session::activation(const std::string& node, std::vector<float>* out,
                           std::vector<int64_t>* shape) const {
  auto it = impl_->kept.find(node);
  if (it == impl_->kept.end()) {
    return not_found("no activation for node '", node, "' (keep_activations off, or no such node)");
  }
  try {
    const at::Tensor t = it->second.to(at::kFloat).contiguous();
    out->assign(t.data_ptr<float>(), t.data_ptr<float>() + t.numel());
    if (shape != nullptr) shape->assign(t.sizes().begin(), t.sizes().end());
  } catch (const c10::Error& e) {
    return internal_error("activation '", node, "': ", torch_message(e));
  }
  return ok_status();
}

}  // namespace qbc::ref

// The plugin's entry point, looked up by the loader (session_loader.cpp) with dlsym.
extern "C" __attribute__((visibility("default"))) qbc::ref::Session* qbc_ref_create_session(
    const qbc::ir::Graph* g, const qbc::ir::WeightReader* weights,
    const qbc::ref::SessionOptions* options, qbc::Status* error) {
  auto s = qbc::ref::Session::create_in_plugin(*g, *weights, *options);
  if (!s.ok()) {
    *error = s.status();
    return nullptr;
  }
  return std::move(s).value().release();
}
