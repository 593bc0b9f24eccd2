// The plan verifier (qbc/npu/plan.h, docs/npu.md "The plan verifier"): the numbered
// invariants P1..P9 on one plan and P10 on two plans of one graph at two cache lengths.
// Each check returns the first violation, its message starting with the invariant and
// naming the node, value, stage or buffer with the numbers at fault. P1 is kInvalidArgument
// (the plan is malformed, so no later check may index it blindly), the others
// kFailedPrecondition. The backend runs it after every pass (Context::verify), so a pass
// that leaves a broken plan is an internal error naming the pass.
#include <algorithm>
#include <string>
#include <vector>

#include "qbc/npu/plan.h"

namespace qbc::npu {
namespace {

int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }
int64_t align_up(int64_t v, int64_t a) { return (v + a - 1) / a * a; }

std::string node(const Plan& p, size_t i) {
  return "node %" + std::to_string(i) + " '" + p.nodes[i].name + "'";
}
std::string buffer(const Plan& p, int32_t b) {
  return "buffer #" + std::to_string(b) + " '" + p.buffers[static_cast<size_t>(b)].name + "'";
}

template <class... Parts>
Status fail(const char* inv, const Parts&... parts) {
  return failed_precondition(inv, ": ", parts...);
}

bool in_range(int64_t i, size_t n) { return i >= 0 && i < static_cast<int64_t>(n); }
int32_t stages_of(NodeKind k) {
  return k == NodeKind::kAttention ? 2 : (k == NodeKind::kInput || k == NodeKind::kSlice) ? 0 : 1;
}

// ---- P1: well-formed ----------------------------------------------------------------------

constexpr const char* kP1 = "P1 (well-formed)";

Status p1_header(const Plan& p) {
  if (p.cores < 1 || p.sram_budget < 1 || p.dma_align < 1 || p.batch < 1 || p.chunk < 1 ||
      p.max_cache < p.chunk) {
    return invalid_argument(kP1, ": header: cores ", p.cores, ", SRAM ", p.sram_budget, ", align ",
                            p.dma_align, ", batch ", p.batch, ", chunk ", p.chunk, ", cache ",
                            p.max_cache, " (each at least 1, the chunk at most the cache)");
  }
  std::vector<int32_t> inputs = {p.embeds, p.positions};
  if (p.features()) inputs = p.feature_inputs;  // a feature graph: its row inputs
  for (int32_t id : inputs) {
    if (!in_range(id, p.nodes.size()))
      return invalid_argument(kP1, ": input node %", id, " of ", p.nodes.size());
  }
  if (!in_range(p.output, p.nodes.size()))
    return invalid_argument(kP1, ": output node %", p.output, " of ", p.nodes.size());
  for (int32_t id : p.extra_outputs) {
    if (!in_range(id, p.nodes.size()) || id == p.output)
      return invalid_argument(kP1, ": output node %", id, " of ", p.nodes.size());
  }
  for (int32_t id : inputs) {
    if (p.nodes[static_cast<size_t>(id)].kind != NodeKind::kInput)
      return invalid_argument(kP1, ": ", node(p, static_cast<size_t>(id)), " is not an input");
  }
  if ((p.rope_cos >= 0) != (p.rope_sin >= 0))
    return invalid_argument(kP1, ": rope_cos %", p.rope_cos, " without rope_sin %", p.rope_sin);
  for (int32_t id : {p.rope_cos, p.rope_sin}) {
    if (id < 0) continue;
    if (!in_range(id, p.nodes.size()) || p.nodes[static_cast<size_t>(id)].kind != NodeKind::kInput)
      return invalid_argument(kP1, ": rope table input %", id, " is not an input node");
  }
  return ok_status();
}

Status p1_node(const Plan& p, size_t i) {
  const NodePlan& n = p.nodes[i];
  if (n.name.empty()) return invalid_argument(kP1, ": node %", i, " has no name");
  if (n.stage >= 0) {
    const int32_t k = stages_of(n.kind);
    if (k == 0 || !in_range(n.stage + k - 1, p.stages.size()))
      return invalid_argument(kP1, ": ", node(p, i), ": stage ", n.stage, " of ", p.stages.size());
    for (int32_t s = n.stage; s < n.stage + k; ++s) {
      if (p.stages[static_cast<size_t>(s)].node != static_cast<int32_t>(i))
        return invalid_argument(kP1, ": ", node(p, i), ": stage s", s, " belongs to another node");
    }
  }
  if (n.row_div < 1 || p.chunk % n.row_div != 0)
    return invalid_argument(kP1, ": ", node(p, i), ": row_div ", n.row_div, " does not divide the ",
                            p.chunk, " rows of a call");
  if (n.rope >= 0 && n.op != "rope")
    return invalid_argument(kP1, ": ", node(p, i), ": a rope table");
  if (!p.placed) return ok_status();
  const size_t nb = p.buffers.size();
  for (int32_t b : {n.place.buf, n.norm_weight, n.linear.buf, n.second.buf, n.attention.params,
                    n.attention.kcache, n.attention.vcache}) {
    if (b < -1 || b >= static_cast<int32_t>(nb))
      return invalid_argument(kP1, ": ", node(p, i), ": buffer #", b, " of ", nb);
  }
  if (n.alias >= static_cast<int32_t>(i) || n.alias < -1 ||
      (n.alias >= 0) != (n.kind == NodeKind::kSlice))
    return invalid_argument(kP1, ": ", node(p, i), ": alias %", n.alias);
  if (n.last_use < -1 || n.last_use >= static_cast<int32_t>(p.nodes.size()))
    return invalid_argument(kP1, ": ", node(p, i), ": last use %", n.last_use);
  return ok_status();
}

Status p1(const Plan& p) {
  QBC_RETURN_IF_ERROR(p1_header(p));
  for (size_t i = 0; i < p.nodes.size(); ++i) QBC_RETURN_IF_ERROR(p1_node(p, i));
  for (size_t s = 0; s < p.stages.size(); ++s) {
    if (!in_range(p.stages[s].node, p.nodes.size()))
      return invalid_argument(kP1, ": stage s", s, " of node %", p.stages[s].node);
  }
  if (!p.placed) return ok_status();
  const auto nb = static_cast<int32_t>(p.buffers.size());
  const bool input_ok = p.features() ? p.input == -1 : p.input >= 0 && p.input < nb;
  if (!input_ok || p.logits < 0 || p.logits >= nb || p.scratch < -1 || p.scratch >= nb)
    return invalid_argument(kP1, ": io buffers #", p.input, ", #", p.logits, ", scratch #",
                            p.scratch, " of ", nb);
  if ((p.rope_cos >= 0) != (p.cos_buf >= 0) || (p.rope_sin >= 0) != (p.sin_buf >= 0) ||
      p.cos_buf < -1 || p.cos_buf >= nb || p.sin_buf < -1 || p.sin_buf >= nb)
    return invalid_argument(kP1, ": rope table io buffers #", p.cos_buf, ", #", p.sin_buf, " of ",
                            nb, " for inputs %", p.rope_cos, ", %", p.rope_sin);
  for (int32_t id : p.deepstack) {
    if (!in_range(id, p.nodes.size()) || p.nodes[static_cast<size_t>(id)].kind != NodeKind::kInput)
      return invalid_argument(kP1, ": DeepStack input %", id, " is not an input node of the ",
                              p.nodes.size());
  }
  if (p.deepstack_bufs.size() != p.deepstack.size())
    return invalid_argument(kP1, ": ", p.deepstack_bufs.size(), " io buffers for ",
                            p.deepstack.size(), " DeepStack inputs");
  for (int32_t b : p.deepstack_bufs)
    if (b < 0 || b >= nb) return invalid_argument(kP1, ": DeepStack io buffer #", b, " of ", nb);
  if (p.feature_bufs.size() != p.feature_inputs.size())
    return invalid_argument(kP1, ": ", p.feature_bufs.size(), " io buffers for ",
                            p.feature_inputs.size(), " feature inputs");
  for (int32_t b : p.feature_bufs) {
    if (b < 0 || b >= nb) return invalid_argument(kP1, ": feature input buffer #", b, " of ", nb);
  }
  return ok_status();
}

// ---- P2: every node that needs tiles has them --------------------------------------------

constexpr const char* kP2 = "P2 (tiles)";

Status p2(const Plan& p) {
  for (size_t i = 0; i < p.nodes.size(); ++i) {
    const NodePlan& n = p.nodes[i];
    const bool staged = stages_of(n.kind) > 0;
    if (staged != (n.stage >= 0))
      return fail(kP2, node(p, i), (staged ? " has no SRAM stage" : " has a stage but no work"));
    if (n.kind == NodeKind::kLinear) {
      for (const LinearPlan* lp : {&n.linear, n.has_second() ? &n.second : nullptr}) {
        if (lp == nullptr) continue;
        const LinearPlan& l = *lp;
        if (l.t.nt < 1 || l.t.kt < 1 || l.t.mt < 1 || l.ntiles < 1 || l.ktiles < 1)
          return fail(kP2, node(p, i), lp == &n.second ? ": its second image's" : ":",
                      " qlinear tiles nt ", l.t.nt, " kt ", l.t.kt, " mt ", l.t.mt, " (", l.ntiles,
                      " x ", l.ktiles, ")");
      }
    } else if (n.kind == NodeKind::kAttention) {
      const AttentionPlan& a = n.attention;
      if (a.t.br < 1 || a.t.bc < 1 || a.append_mt < 1)
        return fail(kP2, node(p, i), ": attention tiles br ", a.t.br, " bc ", a.t.bc,
                    ", append rows ", a.append_mt);
    } else if (n.kind == NodeKind::kRows && n.rows_mt < 1) {
      return fail(kP2, node(p, i), ": row tile ", n.rows_mt);
    }
  }
  return ok_status();
}

// ---- P3: tiles cover the shape ------------------------------------------------------------

constexpr const char* kP3 = "P3 (tiles cover the shape)";

Status p3_blocks(const Plan& p, const std::string& who, const LinearPlan& l) {
  if (l.buf < 0 || l.buf >= static_cast<int32_t>(p.buffers.size()))
    return fail(kP3, who, ": weight buffer #", l.buf, " of ", p.buffers.size());
  const int64_t A = p.dma_align;
  const size_t sblocks = static_cast<size_t>(l.ntiles * (l.group > 0 ? l.ktiles : 1));
  if (l.w_off.size() != static_cast<size_t>(l.ntiles * l.ktiles) || l.ws_off.size() != sblocks ||
      l.wz_off.size() != (l.zero ? sblocks : 0) || l.wm_off.size() != (l.min ? sblocks : 0) ||
      l.b_off.size() != static_cast<size_t>(l.ntiles))
    return fail(kP3, who, ": block tables of ", l.w_off.size(), ", ", l.ws_off.size(), ", ",
                l.wz_off.size(), ", ", l.b_off.size(), " entries for ", l.ntiles, " x ", l.ktiles,
                " tiles");
  if (l.w_bytes < l.t.nt * isa::dtype_bytes(isa::code_type(l.w_bits), l.t.kt))
    return fail(kP3, who, ": a weight tile of ", l.w_bytes, " bytes");
  const int64_t size = p.buffers[static_cast<size_t>(l.buf)].bytes;
  const int64_t bblk = align_up(l.t.nt * 4, A);
  const auto inside = [&](const std::vector<int64_t>& offs, int64_t bytes) {
    return std::all_of(offs.begin(), offs.end(),
                       [&](int64_t o) { return o >= 0 && o + bytes <= size; });
  };
  if (!inside(l.w_off, l.w_bytes) || !inside(l.ws_off, l.ws_bytes) ||
      !inside(l.wz_off, l.wz_bytes) || !inside(l.wm_off, l.ws_bytes) || !inside(l.b_off, bblk))
    return fail(kP3, who, ": a weight block outside ", buffer(p, l.buf), " (", size, " bytes)");
  return ok_status();
}

/// `l`: node i's linear plan, or its second image's (bit.prefill / bit.decode: `second`).
Status p3_linear(const Plan& p, size_t i, const LinearPlan& l, bool second) {
  const std::string who = node(p, i) + (second ? ", its second weight image" : "");
  const LinearTiles& t = l.t;
  const int64_t yb = l.out_fp16 ? 2 : 4;
  if (l.n < 1 || l.k < 1 || l.ntiles != cdiv(l.n, t.nt) || l.ktiles != cdiv(l.k, t.kt) ||
      t.kt > l.k || t.mt > p.rows(i))
    return fail(kP3, who, ": [", l.n, " x ", l.k, "] in tiles nt ", t.nt, " kt ", t.kt, " mt ",
                t.mt, " counted ", l.ntiles, " x ", l.ktiles, " (", p.rows(i), " rows per call)");
  if ((t.nt * yb) % p.dma_align != 0)
    return fail(kP3, who, ": channel tiles of ", t.nt * yb, " output bytes are not a ",
                "multiple of the DMA alignment ", p.dma_align);
  const int64_t gt = l.group > 0 ? cdiv(t.kt, l.group) : 1;
  if (l.gt != gt || (l.group > 0 && t.kt % l.group != 0 && t.kt != l.k))
    return fail(kP3, who, ": K tile ", t.kt, " with ", l.gt, " groups of ", l.group);
  if (l.min && l.group == 0) return fail(kP3, who, ": float offsets without groups");
  return p.placed ? p3_blocks(p, who, l) : ok_status();
}

Status p3_attention(const Plan& p, size_t i) {
  const AttentionPlan& a = p.nodes[i].attention;
  if (a.kv_heads < 1 || a.head_dim < 1 || a.heads % a.kv_heads != 0)
    return fail(kP3, node(p, i), ": ", a.heads, " heads over ", a.kv_heads, " KV heads of ",
                a.head_dim);
  if (a.t.br > p.chunk || a.append_mt > p.chunk)
    return fail(kP3, node(p, i), ": ", a.t.br, " query rows, ", a.append_mt,
                " append rows per tile for a chunk of ", p.chunk);
  // A ring holds window + chunk positions; a packed one (isa::AttnDesc::packed) more, in whole
  // cache chunks, or the cache.
  const int64_t cap = a.window > 0 ? std::min(p.max_cache, a.window + p.chunk) : p.max_cache;
  const bool packed_ring = a.window > 0 && a.capacity > cap && a.capacity <= p.max_cache &&
                           a.t.bc > 0 && (a.capacity % a.t.bc == 0 || a.capacity == p.max_cache);
  if (a.capacity != cap && !packed_ring)
    return fail(kP3, node(p, i), ": capacity ", a.capacity, " for window ", a.window, ", chunk ",
                p.chunk, " and cache ", p.max_cache, " (expected ", cap,
                a.window > 0 ? ", or more in whole cache chunks up to the cache" : "", ")");
  return ok_status();
}

Status p3(const Plan& p) {
  for (size_t i = 0; i < p.nodes.size(); ++i) {
    const NodePlan& n = p.nodes[i];
    if (n.kind == NodeKind::kLinear) QBC_RETURN_IF_ERROR(p3_linear(p, i, n.linear, false));
    if (n.kind == NodeKind::kLinear && n.has_second())
      QBC_RETURN_IF_ERROR(p3_linear(p, i, n.second, true));
    if (n.kind == NodeKind::kAttention) QBC_RETURN_IF_ERROR(p3_attention(p, i));
    if (n.kind == NodeKind::kRows && n.rows_mt > p.rows(i))
      return fail(kP3, node(p, i), ": ", n.rows_mt, " rows per tile for ", p.rows(i),
                  " rows per call");
  }
  return ok_status();
}

// ---- P4: every stage fits SRAM ------------------------------------------------------------

Status p4(const Plan& p) {
  for (size_t s = 0; s < p.stages.size(); ++s) {
    const StagePlan& st = p.stages[s];
    if (st.planned < 1 || st.planned > p.sram_budget || st.used > p.sram_budget)
      return fail("P4 (stage fits SRAM)", "stage s", s, " '", st.name, "' of ",
                  node(p, static_cast<size_t>(st.node)), ": planned ", st.planned, ", used ",
                  st.used, " bytes, budget ", p.sram_budget);
  }
  return ok_status();
}

// ---- P5: every value has exactly one place ------------------------------------------------

constexpr const char* kP5 = "P5 (one place per value)";

/// The buffer value `i` must live in.
Status p5_buffer(const Plan& p, size_t i) {
  const NodePlan& n = p.nodes[i];
  const ValueLoc& v = n.place;
  const auto id = static_cast<int32_t>(i);
  int32_t want = id == p.embeds     ? p.input
                 : id == p.output   ? p.logits
                 : id == p.rope_cos ? p.cos_buf
                 : id == p.rope_sin ? p.sin_buf
                                    : -1;
  for (size_t k = 0; k < p.feature_inputs.size() && k < p.feature_bufs.size(); ++k) {
    if (p.feature_inputs[k] == id) want = p.feature_bufs[k];
  }
  for (size_t k = 0; k < p.deepstack.size() && k < p.deepstack_bufs.size(); ++k) {
    if (p.deepstack[k] == id) want = p.deepstack_bufs[k];
  }
  for (int32_t out : p.extra_outputs) {
    if (out == id) want = p.logits;
  }
  if (want >= 0 && v.buf != want)
    return fail(kP5, "value %", n.name, " is in buffer #", v.buf, ", not ", buffer(p, want));
  if (n.kind == NodeKind::kSlice && n.op == "merge_rows") {
    const NodePlan& from = p.nodes[static_cast<size_t>(n.alias)];
    const ValueLoc& src = from.place;
    const int64_t f = n.row_div / from.row_div;
    if (f * from.row_div != n.row_div || v.buf != src.buf || v.col != src.col ||
        v.type != src.type || src.stride != isa::dtype_bytes(src.type, src.width) ||
        v.stride != f * src.stride || v.width != f * src.width)
      return fail(kP5, "merge_rows %", n.name, " (", v.width, " columns ", v.stride,
                  " bytes apart, row_div ", n.row_div, ") is not ", f, " dense rows of %",
                  from.name, " (", src.width, " columns ", src.stride, " bytes apart, row_div ",
                  from.row_div, ")");
  } else if (n.kind == NodeKind::kSlice) {
    const ValueLoc& src = p.nodes[static_cast<size_t>(n.alias)].place;
    const int64_t end = v.col + isa::dtype_bytes(v.type, v.width);
    if (v.buf != src.buf || v.stride != src.stride || v.type != src.type || v.col < src.col ||
        end > src.col + isa::dtype_bytes(src.type, src.width))
      return fail(kP5, "slice %", n.name, " is not inside the rows of %",
                  p.nodes[static_cast<size_t>(n.alias)].name);
  } else if (want < 0 &&
             p.buffers[static_cast<size_t>(v.buf)].purpose != isa::Purpose::kActivations) {
    return fail(kP5, "value %", n.name, " is in ", buffer(p, v.buf), ", not an activation buffer");
  }
  return ok_status();
}

Status p5(const Plan& p) {
  for (size_t i = 0; i < p.nodes.size(); ++i) {
    const NodePlan& n = p.nodes[i];
    const ValueLoc& v = n.place;
    if (static_cast<int32_t>(i) == p.positions) {
      if (v.buf >= 0) return fail(kP5, "the positions input %", n.name, " has a DRAM place");
      continue;
    }
    if (v.buf < 0) return fail(kP5, "value %", n.name, " has no place");
    QBC_RETURN_IF_ERROR(p5_buffer(p, i));
    const int64_t row = isa::dtype_bytes(v.type, v.width);
    const int64_t size = p.buffers[static_cast<size_t>(v.buf)].bytes;
    if (v.width != n.width || v.stride < row || v.col < 0 ||
        (n.kind != NodeKind::kSlice && v.col + (p.rows(i) - 1) * v.stride + row > size))
      return fail(kP5, "value %", n.name, ": width ", v.width, " (the node's ", n.width,
                  "), rows of ", row, " bytes ", v.stride, " apart from ", v.col, ", ", p.rows(i),
                  " rows in ", buffer(p, v.buf), " of ", size, " bytes");
  }
  return ok_status();
}

// ---- P6: values alive at once do not share bytes -----------------------------------------

Status p6(const Plan& p) {
  std::vector<size_t> act;  // activation values in node order
  for (size_t i = 0; i < p.nodes.size(); ++i) {
    const ValueLoc& v = p.nodes[i].place;
    if (p.nodes[i].kind == NodeKind::kSlice || v.buf < 0) continue;
    if (p.buffers[static_cast<size_t>(v.buf)].purpose == isa::Purpose::kActivations)
      act.push_back(i);
  }
  for (size_t x = 0; x < act.size(); ++x) {
    const size_t a = act[x];
    const NodePlan& na = p.nodes[a];
    const int64_t end = std::max<int64_t>(na.last_use, static_cast<int64_t>(a));
    for (size_t y = x + 1; y < act.size() && static_cast<int64_t>(act[y]) <= end; ++y) {
      const NodePlan& nb = p.nodes[act[y]];
      if (nb.place.buf != na.place.buf) continue;
      const int64_t a0 = na.place.col, a1 = a0 + p.rows(a) * na.place.stride;
      const int64_t b0 = nb.place.col, b1 = b0 + p.rows(act[y]) * nb.place.stride;
      if (a0 < b1 && b0 < a1)
        return fail("P6 (live values disjoint)", "value %", na.name, " (live to %", end,
                    ") at bytes [", a0, ", ", a1, ") and value %", nb.name, " at [", b0, ", ", b1,
                    ") of ", buffer(p, na.place.buf));
    }
  }
  return ok_status();
}

// ---- P7: DRAM buffers disjoint and inside the device --------------------------------------

constexpr const char* kP7 = "P7 (DRAM disjoint)";

Status p7_disjoint(const Plan& p, std::vector<int32_t> ids, int64_t lo, int64_t hi,
                   const char* region) {
  std::sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) {
    return p.buffers[static_cast<size_t>(a)].offset < p.buffers[static_cast<size_t>(b)].offset;
  });
  int64_t top = lo;
  int32_t prev = -1;
  for (int32_t id : ids) {
    const DramBuffer& b = p.buffers[static_cast<size_t>(id)];
    if (b.offset < top || b.bytes < 1 || b.offset + b.bytes > hi)
      return fail(kP7, buffer(p, id), " at [", b.offset, ", ", b.offset + b.bytes, ") overlaps ",
                  prev >= 0 ? buffer(p, prev) : "nothing", " or leaves the ", region, " [", lo,
                  ", ", hi, ")");
    top = b.offset + b.bytes;
    prev = id;
  }
  return ok_status();
}

Status p7(const Plan& p) {
  std::vector<int32_t> shared, slot;
  int64_t base = INT64_MAX, stride = 0, end = 0;
  for (size_t i = 0; i < p.buffers.size(); ++i) {
    const DramBuffer& b = p.buffers[i];
    const bool weights = b.purpose == isa::Purpose::kWeights;
    if (weights != (b.slot_stride == 0))
      return fail(kP7, buffer(p, static_cast<int32_t>(i)),
                  weights ? " holds weights per slot" : " is shared by the slots");
    (weights ? shared : slot).push_back(static_cast<int32_t>(i));
    if (!weights) {
      if (stride != 0 && b.slot_stride != stride)
        return fail(kP7, buffer(p, static_cast<int32_t>(i)), ": slot stride ", b.slot_stride,
                    ", others ", stride);
      stride = b.slot_stride;
      base = std::min(base, b.offset);
    }
    end =
        std::max(end, b.offset + b.bytes + (b.slot_stride > 0 ? (p.batch - 1) * b.slot_stride : 0));
  }
  QBC_RETURN_IF_ERROR(p7_disjoint(p, shared, 0, p.regions.weights, "weight region"));
  if (!slot.empty()) {
    if (base < p.regions.weights)
      return fail(kP7, "the slot region starts at ", base, ", inside the weights (",
                  p.regions.weights, " bytes)");
    QBC_RETURN_IF_ERROR(p7_disjoint(p, slot, base, base + stride, "first slot"));
  }
  if (p.fit_checked && end > p.dram_bytes)
    return fail(kP7, "the buffers end at ", end, " bytes with ", p.batch,
                " slots, past the device's ", p.dram_bytes);
  return ok_status();
}

// ---- P8: regions are the sums of their buffers --------------------------------------------

Status p8(const Plan& p) {
  isa::DramPlan sum;
  for (const DramBuffer& b : p.buffers) {
    const int64_t per = b.slot_stride > 0 ? p.batch * b.bytes : b.bytes;
    switch (b.purpose) {
      case isa::Purpose::kWeights:
        sum.weights += per;
        break;
      case isa::Purpose::kKv:
        sum.kv += per;
        break;
      case isa::Purpose::kActivations:
        sum.activations += per;
        break;
      case isa::Purpose::kScratch:
        sum.scratch += per;
        break;
      case isa::Purpose::kIo:
        sum.io += per;
        break;
      default:
        return fail("P8 (regions)", "DRAM buffer '", b.name, "' of purpose ",
                    isa::purpose_name(b.purpose));
    }
  }
  sum.reserve = p.dram_reserve;
  const isa::DramPlan& r = p.regions;
  if (sum.weights != r.weights || sum.kv != r.kv || sum.activations != r.activations ||
      sum.scratch != r.scratch || sum.io != r.io || sum.reserve != r.reserve)
    return fail("P8 (regions)", "the regions weights ", r.weights, ", kv ", r.kv, ", activations ",
                r.activations, ", scratch ", r.scratch, ", io ", r.io, ", reserve ", r.reserve,
                " are not the buffers' ", sum.weights, ", ", sum.kv, ", ", sum.activations, ", ",
                sum.scratch, ", ", sum.io, ", ", sum.reserve);
  return ok_status();
}

// ---- P9: only KV buffers grow with the cache ----------------------------------------------

constexpr const char* kP9 = "P9 (only KV grows)";

Status p9(const Plan& p) {
  for (size_t i = 0; i < p.buffers.size(); ++i) {
    const DramBuffer& b = p.buffers[i];
    const bool kv_of_cache =
        b.purpose == isa::Purpose::kKv && b.shape.size() == 3 && b.shape[1] == p.max_cache;
    if (b.grows != kv_of_cache)
      return fail(kP9, buffer(p, static_cast<int32_t>(i)), " (", isa::purpose_name(b.purpose),
                  ", shape [", b.shape.size() == 3 ? b.shape[1] : -1, " positions]) is ",
                  b.grows ? "" : "not ", "tagged as growing with the cache of ", p.max_cache);
  }
  for (size_t i = 0; i < p.nodes.size(); ++i) {
    if (p.nodes[i].kind != NodeKind::kAttention) continue;
    const AttentionPlan& a = p.nodes[i].attention;
    for (int which = 0; which < 2; ++which) {
      const int32_t id = which == 0 ? a.kcache : a.vcache;
      const int64_t row = which == 0 ? a.krow : a.vrow;
      const DramBuffer* b = id >= 0 ? &p.buffers[static_cast<size_t>(id)] : nullptr;
      if (b == nullptr || b->purpose != isa::Purpose::kKv ||
          b->shape != std::vector<int64_t>{a.kv_heads, a.capacity, a.head_dim} ||
          b->bytes < a.kv_heads * a.capacity * row)
        return fail(kP9, node(p, i), ": its ", which == 0 ? "K" : "V",
                    " cache is not a KV buffer of ", a.kv_heads, " x ", a.capacity, " rows of ",
                    row, " bytes");
    }
  }
  return ok_status();
}

}  // namespace

Status verify_plan(const Plan& p) {
  if (!p.tiled) return ok_status();
  QBC_RETURN_IF_ERROR(p1(p));
  QBC_RETURN_IF_ERROR(p2(p));
  QBC_RETURN_IF_ERROR(p3(p));
  QBC_RETURN_IF_ERROR(p4(p));
  if (!p.placed) return ok_status();
  QBC_RETURN_IF_ERROR(p5(p));
  QBC_RETURN_IF_ERROR(p6(p));
  QBC_RETURN_IF_ERROR(p7(p));
  QBC_RETURN_IF_ERROR(p8(p));
  return p9(p);
}

Status verify_plan_context(const Plan& a, const Plan& b) {
  constexpr const char* kP10 = "P10 (independent of the cache)";
  if (a.nodes.size() != b.nodes.size() || a.stages.size() != b.stages.size() ||
      a.buffers.size() != b.buffers.size())
    return fail(kP10, a.nodes.size(), " nodes, ", a.stages.size(), " stages, ", a.buffers.size(),
                " buffers vs ", b.nodes.size(), ", ", b.stages.size(), ", ", b.buffers.size());
  for (size_t i = 0; i < a.nodes.size(); ++i) {
    const NodePlan &x = a.nodes[i], &y = b.nodes[i];
    const LinearTiles &lx = x.linear.t, &ly = y.linear.t;
    const LinearTiles &sx = x.second.t, &sy = y.second.t;
    const AttnTiles &ax = x.attention.t, &ay = y.attention.t;
    if (lx.nt != ly.nt || lx.kt != ly.kt || lx.mt != ly.mt || sx.nt != sy.nt || sx.kt != sy.kt ||
        sx.mt != sy.mt || ax.br != ay.br || ax.bc != ay.bc ||
        x.attention.append_mt != y.attention.append_mt || x.rows_mt != y.rows_mt)
      return fail(kP10, node(a, i), ": its tiles differ at caches ", a.max_cache, " and ",
                  b.max_cache);
  }
  for (size_t s = 0; s < a.stages.size(); ++s) {
    const StagePlan &x = a.stages[s], &y = b.stages[s];
    if (x.planned != y.planned || x.used != y.used)
      return fail(kP10, "stage s", s, " '", x.name, "': ", x.planned, " planned, ", x.used,
                  " used bytes at cache ", a.max_cache, ", ", y.planned, " and ", y.used, " at ",
                  b.max_cache);
  }
  for (size_t i = 0; i < a.buffers.size(); ++i) {
    const DramBuffer &x = a.buffers[i], &y = b.buffers[i];
    if (x.name != y.name || (!x.grows && x.bytes != y.bytes))
      return fail(kP10, buffer(a, static_cast<int32_t>(i)), " (", x.bytes, " bytes, ",
                  x.grows ? "growing" : "fixed", ") is '", y.name, "' of ", y.bytes,
                  " bytes at cache ", b.max_cache);
  }
  return ok_status();
}

}  // namespace qbc::npu
