// isa::verify: the numbered invariants of docs/npu.md ("Verifier"). The checks run in the
// order V8 (header), V1, V8, V2, V3, V4, V7, V6, V5, each relying on the ones before it (the
// later ones evaluate expressions and call accesses(), which V1 and V8 make safe). The
// replay checks V6 and V5 are in verify_replay.cpp.
#include "qbc/isa/verify.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "op_fields.h"
#include "qbc/isa/domain.h"
#include "qbc/support/parallel.h"
#include "verify_internal.h"

namespace qbc::isa {
namespace {

std::string num(int64_t v) { return std::to_string(v); }

bool in_range(int64_t v, int64_t lo, int64_t hi) { return v >= lo && v <= hi; }

/// One program and what the checks compute once for it.
struct Checked {
  ProgramRef pr;
  std::vector<StreamShape> shapes;
  std::vector<std::vector<std::vector<Access>>> accs;  ///< [stream][instr]
};

std::string instr_at(const Checked& c, int s, int i) { return where(c.pr, s, i); }

// ---------------------------------------------------------------------------------------
// V1 on expressions: operands precede their node, symbols and loop variables exist, and
// every divisor is a positive constant (the runtime never divides by zero).
std::string check_expr(const Expr& e, const std::vector<int>& vars) {
  const std::vector<Expr::Node>& nodes = e.nodes();
  if (nodes.empty()) return "is empty";
  for (size_t i = 0; i < nodes.size(); ++i) {
    const Expr::Node& n = nodes[i];
    switch (n.op) {
      case Expr::Op::kConst:
        continue;
      case Expr::Op::kSym:
        if (n.value < 0 || n.value >= kNumSyms) return "reads an unknown symbol " + num(n.value);
        continue;
      case Expr::Op::kLoop:
        if (std::find(vars.begin(), vars.end(), n.value) == vars.end()) {
          return "reads i" + num(n.value) + ", which no enclosing loop defines";
        }
        continue;
      case Expr::Op::kAdd:
      case Expr::Op::kSub:
      case Expr::Op::kMul:
      case Expr::Op::kFloorDiv:
      case Expr::Op::kCeilDiv:
      case Expr::Op::kMod:
      case Expr::Op::kMin:
      case Expr::Op::kMax:
        break;
      default:
        return "has an unknown operation";
    }
    if (n.a < 0 || n.b < 0 || static_cast<size_t>(n.a) >= i || static_cast<size_t>(n.b) >= i) {
      return "has a node whose operands do not precede it";
    }
    if (n.op == Expr::Op::kFloorDiv || n.op == Expr::Op::kCeilDiv || n.op == Expr::Op::kMod) {
      const Expr::Node& d = nodes[static_cast<size_t>(n.b)];
      if (d.op != Expr::Op::kConst || d.value <= 0) {
        return "divides by something other than a positive constant";
      }
    }
  }
  return "";
}

template <typename E>
bool enum_ok(E v, E last) {
  return static_cast<int>(v) <= static_cast<int>(last);
}

// ---------------------------------------------------------------------------------------
// V8 on the header, V1 on the tables.

Status check_header(const Bundle& b) {
  const auto bad = [](const std::string& m) { return violation(8, "bundle header: " + m); };
  if (b.target_cores < 1 || b.target_cores > 1024) {
    return bad("target_cores " + num(b.target_cores) + " outside [1, 1024]");
  }
  if (b.sram_bytes < 0 || b.dram_bytes < 0) {
    return bad("sram_bytes " + num(b.sram_bytes) + " and dram_bytes " + num(b.dram_bytes) +
               " must not be negative");
  }
  if (!in_range(b.dma_align, 1, int64_t{1} << 20)) {
    return bad("dma_align " + num(b.dma_align) + " outside [1, 2^20]");
  }
  if (!in_range(b.max_cache, 1, kMaxField) || !in_range(b.chunk, 1, kMaxField) ||
      !in_range(b.batch, 1, kMaxField)) {
    return bad("max_cache " + num(b.max_cache) + ", chunk " + num(b.chunk) + " and batch " +
               num(b.batch) + " must be in [1, 2^40]");
  }
  if (!in_range(b.hidden, 0, kMaxField) || !in_range(b.vocab, 0, kMaxField) ||
      !in_range(b.embed_rows, 0, kMaxField)) {
    return bad("hidden " + num(b.hidden) + ", vocab " + num(b.vocab) + " and embed_rows " +
               num(b.embed_rows) + " must be in [0, 2^40]");
  }
  return ok_status();
}

}  // namespace

Status check_tables(const Bundle& b) {
  QBC_RETURN_IF_ERROR(check_header(b));
  const auto bad = [](const std::string& m) { return violation(1, m); };
  // A plan compiled from shapes only (no image, no embedding) verifies too; only the runtime
  // needs the data and refuses a bundle without it.
  const bool shape_only = b.embedding_size() == 0 && b.image_size() == 0;
  if (!shape_only && static_cast<uint64_t>(b.embed_rows) * static_cast<uint64_t>(b.hidden) !=
                         static_cast<uint64_t>(b.embedding_size())) {
    return bad("the embedding holds " + num(b.embedding_size()) + " values, not embed_rows " +
               num(b.embed_rows) + " x hidden " + num(b.hidden));
  }
  std::set<std::string> names;
  for (size_t i = 0; i < b.buffers.size(); ++i) {
    const Buffer& buf = b.buffers[i];
    const std::string at = "buffer #" + num(static_cast<int64_t>(i)) + " '" + buf.name + "'";
    if (buf.name.empty()) return bad("buffer #" + num(static_cast<int64_t>(i)) + " has no name");
    if (!names.insert(buf.name).second) return bad(at + ": the name is used twice");
    if (!enum_ok(buf.space, Space::kSram) || !enum_ok(buf.purpose, Purpose::kSram) ||
        !enum_ok(buf.dtype, DType::kF32)) {
      return bad(at + ": space, purpose or dtype out of range");
    }
    if (buf.space == Space::kSram) {
      if (buf.core < 0 || buf.core >= b.target_cores) {
        return bad(at + ": an SRAM buffer of core " + num(buf.core) + ", outside [0, " +
                   num(b.target_cores) + ")");
      }
      if (buf.purpose != Purpose::kSram) {
        return bad(at + ": an SRAM buffer must have purpose sram, not " +
                   purpose_name(buf.purpose));
      }
      if (buf.slot_stride != 0) return bad(at + ": an SRAM buffer has a slot_stride");
    } else {
      if (buf.core != -1) return bad(at + ": a DRAM buffer has core " + num(buf.core) + ", not -1");
      if (buf.purpose == Purpose::kSram) return bad(at + ": a DRAM buffer has purpose sram");
    }
  }
  for (size_t i = 0; i < b.attentions.size(); ++i) {
    const AttnDesc& a = b.attentions[i];
    const std::string at = "attention #" + num(static_cast<int64_t>(i));
    if (!in_range(a.heads, 1, 1 << 20) || !in_range(a.kv_heads, 1, 1 << 20) ||
        !in_range(a.head_dim, 1, 1 << 20) || a.heads % a.kv_heads != 0) {
      return bad(at + ": heads " + num(a.heads) + ", kv_heads " + num(a.kv_heads) +
                 " and head_dim " + num(a.head_dim) +
                 " must be in [1, 2^20] with heads a multiple of kv_heads");
    }
    if (a.k_rope < -1 || a.k_rope >= static_cast<int64_t>(b.ropes.size()) ||
        (a.rotating && a.k_rope < 0)) {
      return bad(at + ": k_rope " + num(a.k_rope) + " is not a rope table of " +
                 num(static_cast<int64_t>(b.ropes.size())) +
                 (a.rotating ? " (rotating key offsets need one)" : ""));
    }
  }
  for (size_t i = 0; i < b.ropes.size(); ++i) {
    const RopeDesc& r = b.ropes[i];
    const std::string at = "rope #" + num(static_cast<int64_t>(i));
    if (!in_range(r.heads, 1, 1 << 20) || !in_range(r.head_dim, 1, 1 << 20) ||
        !in_range(r.rotary_dim, 1, r.head_dim) || r.rotary_dim % 2 != 0) {
      return bad(at + ": heads " + num(r.heads) + ", head_dim " + num(r.head_dim) +
                 " and rotary_dim " + num(r.rotary_dim) +
                 " must be positive, with an even rotary_dim <= head_dim");
    }
    const size_t half = static_cast<size_t>(r.rotary_dim / 2);
    if (r.inv_freq.size() != half || (!r.long_inv_freq.empty() && r.long_inv_freq.size() != half)) {
      return bad(at + ": inv_freq has " + num(static_cast<int64_t>(r.inv_freq.size())) +
                 " and long_inv_freq " + num(static_cast<int64_t>(r.long_inv_freq.size())) +
                 " entries, not rotary_dim / 2 = " + num(static_cast<int64_t>(half)));
    }
  }
  const RopeInputs& ri = b.rope_inputs;
  if (ri.present() && (ri.head_dim < 2 || ri.head_dim % 2 != 0 || ri.sin < 0))
    return bad("rope_inputs: head_dim " + num(ri.head_dim) + " (even, at least 2) and buffers #" +
               num(ri.cos) + ", #" + num(ri.sin));
  for (const auto& [name, id] :
       {std::pair{"input", b.input}, std::pair{"output", b.output},
        std::pair{"rope_inputs cos", ri.cos}, std::pair{"rope_inputs sin", ri.sin}}) {
    if (id < -1 || id >= static_cast<int64_t>(b.buffers.size())) {
      return bad(std::string(name) + " buffer #" + num(id) + " does not exist");
    }
    if (id >= 0 && b.buffers[static_cast<size_t>(id)].space != Space::kDram) {
      return bad(std::string(name) + " buffer " + buffer_name(b, id) + " is not in DRAM");
    }
  }
  for (size_t k = 0; k < b.deepstack.size(); ++k) {
    const int32_t id = b.deepstack[k];
    const std::string what = "deepstack input " + num(static_cast<int64_t>(k));
    if (id < 0 || id >= static_cast<int64_t>(b.buffers.size()))
      return bad(what + ": buffer #" + num(id) + " does not exist");
    const Buffer& buf = b.buffers[static_cast<size_t>(id)];
    if (buf.space != Space::kDram || buf.purpose != Purpose::kIo)
      return bad(what + ": buffer " + buffer_name(b, id) + " is not an io buffer in DRAM");
    for (size_t j = 0; j < k; ++j) {
      if (b.deepstack[j] == id)
        return bad(what + ": buffer " + buffer_name(b, id) + " is also deepstack input " +
                   num(static_cast<int64_t>(j)));
    }
    if (id == b.input || id == b.output || id == ri.cos || id == ri.sin)
      return bad(what + ": buffer " + buffer_name(b, id) + " is also another io buffer");
  }
  for (size_t m = 0; m < b.modes.size(); ++m) {
    const Mode& mode = b.modes[m];
    const std::string at = "mode " + num(static_cast<int64_t>(m));
    if (static_cast<size_t>(mode.scheme) >= kSchemeCount) return bad(at + ": unknown scheme");
    if (!in_range(mode.cores_per_instance, 1, b.target_cores) ||
        !in_range(mode.instances, 1, 1 << 20)) {
      return bad(at + ": cores_per_instance " + num(mode.cores_per_instance) + " and instances " +
                 num(mode.instances) + " must be in [1, target_cores " + num(b.target_cores) +
                 "] and [1, 2^20]");
    }
    if (mode.prefill.phase != Phase::kPrefill || mode.decode.phase != Phase::kDecode ||
        mode.span.phase != Phase::kSpan) {
      return bad(at + ": its prefill, decode or span program has the wrong phase");
    }
    for (const Program* p : mode.programs()) {
      if (p->cores.size() != static_cast<size_t>(mode.cores_per_instance)) {
        return bad(at + " " + phase_name(p->phase) + ": " +
                   num(static_cast<int64_t>(p->cores.size())) + " streams for " +
                   num(mode.cores_per_instance) + " cores per instance");
      }
    }
  }
  return ok_status();
}

namespace {

// ---------------------------------------------------------------------------------------
// V1 on one instruction.

Status check_instr_v1(const ProgramRef& pr, int s, int i, const StreamShape& shape) {
  const Bundle& b = pr.b;
  const CoreProgram& cp = pr.p.cores[static_cast<size_t>(s)];
  const Instr& in = cp.code[static_cast<size_t>(i)];
  const auto bad = [&](const std::string& m) { return violation(1, where(pr, s, i) + ": " + m); };
  if (static_cast<int>(in.queue) >= kNumQueues) return bad("unknown queue");
  if (in.node < -1 || in.node >= static_cast<int64_t>(b.nodes.size())) {
    return bad("node " + num(in.node) + " is not in the node table of " +
               num(static_cast<int64_t>(b.nodes.size())));
  }
  if (in.pass < -1 || in.pass >= static_cast<int64_t>(b.passes.size())) {
    return bad("pass " + num(in.pass) + " is not in the pass table of " +
               num(static_cast<int64_t>(b.passes.size())));
  }
  if ((in.wait | in.signal) >> kNumChannels) return bad("token bits above the six channels");
  const bool is_loop = std::holds_alternative<Loop>(in.op);
  if (is_loop && (in.wait || in.signal)) return bad("a loop carries no tokens");
  for (int c = 0; c < kNumChannels; ++c) {
    const Channel ch = static_cast<Channel>(c);
    if ((in.wait >> c & 1) && channel_to(ch) != in.queue) {
      return bad(std::string("waits on ") + channel_name(ch) + " but runs on queue " +
                 queue_name(in.queue));
    }
    if ((in.signal >> c & 1) && channel_from(ch) != in.queue) {
      return bad(std::string("signals ") + channel_name(ch) + " but runs on queue " +
                 queue_name(in.queue));
    }
  }
  // Expressions read only the variables of enclosing loops and divide by positive constants.
  std::vector<int> vars;
  for (int32_t l : enclosing_loops(shape, i)) {
    vars.push_back(std::get<Loop>(cp.code[static_cast<size_t>(l)].op).var);
  }
  for (const ExprField& f : op_exprs(in.op)) {
    const std::string why = check_expr(*f.expr, vars);
    if (!why.empty()) return bad(std::string(f.name) + " " + f.expr->to_string() + " " + why);
  }
  // References name existing buffers; required ones are set.
  const std::vector<RefField> refs = op_refs(in.op);
  for (const RefField& f : refs) {
    const int32_t id = f.ref->buffer;
    if (id < -1 || id >= static_cast<int64_t>(b.buffers.size())) {
      return bad(std::string(f.name) + " names buffer #" + num(id) + ", not in the table of " +
                 num(static_cast<int64_t>(b.buffers.size())));
    }
    if (f.required && id < 0) return bad(std::string(f.name) + " is not set");
    if (id < 0) continue;
    const std::string why = check_expr(f.ref->offset, vars);
    if (!why.empty()) {
      return bad(std::string(f.name) + " offset " + f.ref->offset.to_string() + " " + why);
    }
  }
  const auto sram_of_core = [&](const Ref& r) {
    const Buffer& buf = b.buffers[static_cast<size_t>(r.buffer)];
    return buf.space == Space::kSram && buf.core == cp.core;
  };
  if (is_loop) return ok_status();
  if (const Dma* d = std::get_if<Dma>(&in.op)) {
    const Buffer& dst = b.buffers[static_cast<size_t>(d->dst.buffer)];
    const Buffer& src = b.buffers[static_cast<size_t>(d->src.buffer)];
    if (dst.space == src.space) {
      return bad(std::string("copies ") +
                 (dst.space == Space::kDram ? "DRAM to DRAM" : "SRAM to SRAM") + " (" +
                 buffer_name(b, d->src.buffer) + " to " + buffer_name(b, d->dst.buffer) +
                 "); a DMA connects DRAM and one core's SRAM");
    }
    const Queue want = dst.space == Space::kSram ? Queue::kLoad : Queue::kStore;
    if (in.queue != want) {
      return bad(std::string("a DMA ") + (want == Queue::kLoad ? "DRAM -> SRAM" : "SRAM -> DRAM") +
                 " runs on queue " + queue_name(want) + ", not " + queue_name(in.queue));
    }
    const Buffer& sram = dst.space == Space::kSram ? dst : src;
    if (sram.core != cp.core) {
      return bad("its SRAM side " + sram.name + " is on core " + num(sram.core) +
                 ", not on the stream's core " + num(cp.core));
    }
    return ok_status();
  }
  if (in.queue != Queue::kCompute) {
    return bad(std::string("a ") + op_name(in.op) + " runs on queue cmp, not " +
               queue_name(in.queue));
  }
  for (const RefField& f : refs) {
    if (f.ref->buffer >= 0 && !sram_of_core(*f.ref)) {
      return bad(std::string(f.name) + " " + buffer_name(b, f.ref->buffer) +
                 " is not in the SRAM of the stream's core " + num(cp.core) +
                 " (compute reads and writes its own SRAM)");
    }
  }
  const std::string e = check_fields_v1(b, in.op);
  if (!e.empty()) return bad(e);
  if (const QkScores* qs = std::get_if<QkScores>(&in.op)) {
    if (b.attentions[static_cast<size_t>(qs->attn)].rotating && qs->q.buffer < 0) {
      return bad("q is not set, and attention " + num(qs->attn) + " has rotating key offsets");
    }
  }
  return ok_status();
}

Status check_program_v1(const ProgramRef& pr, std::vector<StreamShape>* shapes) {
  const Bundle& b = pr.b;
  shapes->assign(pr.p.cores.size(), StreamShape{});
  std::set<int32_t> cores;
  for (size_t s = 0; s < pr.p.cores.size(); ++s) {
    const CoreProgram& cp = pr.p.cores[s];
    const std::string at = where(pr) + " stream " + num(static_cast<int64_t>(s));
    if (cp.core < 0 || cp.core >= b.target_cores) {
      return violation(1,
                       at + ": core " + num(cp.core) + " outside [0, " + num(b.target_cores) + ")");
    }
    if (!cores.insert(cp.core).second) {
      return violation(1, at + ": core " + num(cp.core) + " has two streams");
    }
    if (static_cast<int64_t>(cp.code.size()) > kMaxStreamInstrs) {
      return violation(
          8, at + " (core " + num(cp.core) + "): " + num(static_cast<int64_t>(cp.code.size())) +
                 " instructions, more than the limit " + num(kMaxStreamInstrs) +
                 " (the program encodes to about " + num(program_size(pr.p).bytes) + " bytes)");
    }
    const std::string why = build_shape(cp.code, &(*shapes)[s]);
    if (!why.empty()) return violation(1, at + " (core " + num(cp.core) + "): " + why);
    for (size_t i = 0; i < cp.code.size(); ++i) {
      QBC_RETURN_IF_ERROR(
          check_instr_v1(pr, static_cast<int>(s), static_cast<int>(i), (*shapes)[s]));
    }
  }
  return ok_status();
}

// ---------------------------------------------------------------------------------------
// V8: fields in range, loop nests and expression values.

Status check_tables_v8(const Bundle& b) {
  for (size_t i = 0; i < b.attentions.size(); ++i) {
    const AttnDesc& a = b.attentions[i];
    const std::string at = "attention #" + num(static_cast<int64_t>(i));
    const auto bits_ok = [](int32_t v) { return v == 4 || v == 8 || v == 16; };
    if (!bits_ok(a.k_bits) || !bits_ok(a.v_bits) || !in_range(a.p_bits, 1, 16)) {
      return violation(8, at + ": k_bits " + num(a.k_bits) + " and v_bits " + num(a.v_bits) +
                              " must be 4, 8 or 16 and p_bits " + num(a.p_bits) + " in [1, 16]");
    }
    if (!in_range(a.window, 0, kMaxField) || !in_range(a.capacity, 0, kMaxField) ||
        !std::isfinite(a.scale) || !std::isfinite(a.softcap) || a.softcap < 0) {
      return violation(8, at + ": window " + num(a.window) + ", capacity " + num(a.capacity) +
                              ", scale and softcap out of range");
    }
    if (const std::string why = kv4_fields_problem(a); !why.empty())
      return violation(8, at + ": " + why);
  }
  for (size_t i = 0; i < b.ropes.size(); ++i) {
    const RopeDesc& r = b.ropes[i];
    bool finite = std::isfinite(r.attention_factor) && std::isfinite(r.dynamic_factor) &&
                  std::isfinite(r.theta) && r.original_max_positions >= 0;
    for (double f : r.inv_freq) finite = finite && std::isfinite(f);
    for (double f : r.long_inv_freq) finite = finite && std::isfinite(f);
    if (!finite) {
      return violation(
          8, "rope #" + num(static_cast<int64_t>(i)) + ": a frequency or factor is not finite");
    }
  }
  return ok_status();
}

Status check_program_v8(const ProgramRef& pr, const std::vector<StreamShape>& shapes) {
  const Bundle& b = pr.b;
  if (!in_range(pr.p.max_seq, 1, kMaxField)) {
    return violation(8, where(pr) + ": max_seq " + num(pr.p.max_seq) + " outside [1, 2^40]");
  }
  const std::vector<SymPoint> points = sym_vertices(b.max_cache, pr.p.max_seq, pr.instances, true);
  for (size_t s = 0; s < pr.p.cores.size(); ++s) {
    const std::vector<Instr>& code = pr.p.cores[s].code;
    const StreamShape& shape = shapes[s];
    for (size_t i = 0; i < code.size(); ++i) {
      const int si = static_cast<int>(s), ii = static_cast<int>(i);
      const Instr& in = code[i];
      if (shape.depth[i] > kMaxLoopDepth) {
        return violation(8, where(pr, si, ii) + ": nested " + num(shape.depth[i]) +
                                " loops deep, more than " + num(kMaxLoopDepth));
      }
      const std::vector<int32_t> chain = enclosing_loops(shape, ii);
      const uint64_t used = used_vars(code, shape, ii);
      int64_t combos = 1;
      for (int32_t l : chain) {
        const int var = std::get<Loop>(code[static_cast<size_t>(l)].op).var;
        if (used >> var & 1) combos *= 2 * shape.window[static_cast<size_t>(l)];
      }
      if (combos > (int64_t{1} << 16)) {
        return violation(8, where(pr, si, ii) + ": its loop nest has " + num(combos) +
                                " sample points, more than 2^16");
      }
      const std::string e = check_fields_v8(b, in.op);
      if (!e.empty()) return violation(8, where(pr, si, ii) + ": " + e);
      // Every expression evaluates at every sample point; Expr fields (FieldKind::kExpr:
      // counts and positions) are >= 0, reference offsets may be anything.
      struct ExprCheck {
        std::string name;
        const Expr* expr;
        bool non_neg;
      };
      std::vector<ExprCheck> exprs;
      for (const ExprField& f : op_exprs(in.op)) exprs.push_back({f.name, f.expr, true});
      for (const RefField& f : op_refs(in.op)) {
        if (f.ref->buffer >= 0) {
          exprs.push_back({std::string(f.name) + " offset", &f.ref->offset, false});
        }
      }
      Status st;
      for (const SymPoint& p : points) {
        Env env;
        set_syms(env, p);
        const EnvWalk w = for_each_env(code, shape, chain, used, env, [&](const Env& en) {
          for (const auto& [name, expr, non_neg] : exprs) {
            int64_t v = 0;
            if (!eval_checked(*expr, en, &v)) {
              st = violation(8, where(pr, si, ii) + ": " + name + " " + expr->to_string() +
                                    " overflows int64 at " + env_text(en, code, chain));
              return false;
            }
            if ((non_neg && v < 0) || (name == "rows" && v > kMaxField)) {
              st = violation(8, where(pr, si, ii) + ": " + name + " " + expr->to_string() + " = " +
                                    num(v) + (v < 0 ? " is negative" : " exceeds 2^40") + " at " +
                                    env_text(en, code, chain));
              return false;
            }
          }
          return true;
        });
        if (w.bad_loop >= 0) {
          return violation(
              8, where(pr, si, w.bad_loop) + ": trip " +
                     std::get<Loop>(code[static_cast<size_t>(w.bad_loop)].op).trip.to_string() +
                     " overflows int64");
        }
        if (!st.ok()) return st;
      }
    }
  }
  return ok_status();
}

// ---------------------------------------------------------------------------------------
// V2: buffers inside their space, accesses inside their buffer. V3: DMA alignment.

/// The most instances of any program that references each buffer (1 when none does).
std::vector<int64_t> buffer_instances(const Bundle& b, const ProgramRef* extra) {
  std::vector<int64_t> out(b.buffers.size(), 1);
  const auto mark = [&](const Program& p, int64_t instances) {
    for (const CoreProgram& cp : p.cores) {
      for (const Instr& in : cp.code) {
        for (const RefField& f : op_refs(in.op)) {
          if (f.ref->buffer >= 0 && static_cast<size_t>(f.ref->buffer) < out.size()) {
            out[static_cast<size_t>(f.ref->buffer)] =
                std::max(out[static_cast<size_t>(f.ref->buffer)], instances);
          }
        }
      }
    }
  };
  for (const Mode& m : b.modes) {
    for (const Program* p : m.programs()) mark(*p, m.instances);
  }
  if (extra) mark(extra->p, extra->instances);
  return out;
}

Status check_buffer_space(const Bundle& b, const std::vector<int64_t>& instances) {
  for (size_t i = 0; i < b.buffers.size(); ++i) {
    const Buffer& buf = b.buffers[i];
    // Built only for a message: a label per buffer would make this quadratic.
    const auto at_ = [&] { return "buffer " + buffer_name(b, static_cast<int32_t>(i)); };
    if (buf.offset < 0 || buf.bytes < 0 || buf.slot_stride < 0) {
      return violation(2, at_() + ": offset " + num(buf.offset) + ", bytes " + num(buf.bytes) +
                              " and slot_stride " + num(buf.slot_stride) + " must not be negative");
    }
    const __int128 slots = buf.slot_stride > 0 ? instances[i] : 1;
    const __int128 end = __int128{buf.offset} + buf.bytes + __int128{buf.slot_stride} * (slots - 1);
    const int64_t limit = buf.space == Space::kSram ? b.sram_bytes : b.dram_bytes;
    if (end > limit) {
      return violation(2, at_() + " [" + num(buf.offset) + ", +" + num(buf.bytes) + ")" +
                              (slots > 1 ? " x " + num(static_cast<int64_t>(slots)) + " slots of " +
                                               num(buf.slot_stride)
                                         : "") +
                              " ends past the " +
                              (buf.space == Space::kSram ? "SRAM of core " + num(buf.core)
                                                         : std::string("DRAM")) +
                              " (" + num(limit) + " bytes)");
    }
  }
  const __int128 image_end = __int128{b.image_base} + b.image_size();
  if (b.image_base < 0 || image_end > b.dram_bytes) {
    return violation(2, "the weight image [" + num(b.image_base) + ", +" + num(b.image_size()) +
                            ") is outside the DRAM (" + num(b.dram_bytes) + " bytes)");
  }
  const auto io = [&](int32_t id, int64_t need, const char* what) -> Status {
    if (id < 0) return ok_status();
    const Buffer& buf = b.buffers[static_cast<size_t>(id)];
    if (buf.bytes < need) {
      return violation(2, std::string(what) + " buffer " + buffer_name(b, id) + " holds " +
                              num(buf.bytes) + " bytes, less than the " + num(need) + " it needs");
    }
    return ok_status();
  };
  QBC_RETURN_IF_ERROR(io(b.input, b.chunk * b.hidden * 2, "input (fp16 [chunk, hidden])"));
  // A feature bundle's output may have fewer rows than its inputs (V10 checked how many).
  const int64_t out_rows = b.kind == BundleKind::kFeatures ? b.output_rows : b.chunk;
  QBC_RETURN_IF_ERROR(io(b.output, out_rows * b.vocab * 4, "output (fp32 [rows, vocab])"));
  for (int32_t id : {b.rope_inputs.cos, b.rope_inputs.sin})
    QBC_RETURN_IF_ERROR(
        io(id, b.chunk * b.rope_inputs.head_dim, "rope table (fp16 [chunk, head_dim/2])"));
  // DeepStack rows are DMA-aligned (the runtime writes them so).
  const int64_t align = std::max<int64_t>(1, b.dma_align);
  const int64_t ds_row = (b.hidden * 2 + align - 1) / align * align;
  for (int32_t id : b.deepstack)
    QBC_RETURN_IF_ERROR(io(id, b.chunk * ds_row, "deepstack (fp16 [chunk, hidden], aligned rows)"));
  return ok_status();
}

std::string access_text(const Bundle& b, const Access& a) {
  return std::string(a.write ? "writes " : "reads ") + buffer_name(b, a.ref.buffer) + "[+" +
         (a.ref.offset.is_const() ? "" : " ") + a.ref.offset.to_string() + "]";
}

/// Calls f(env, chain) for every sample environment of instruction i at every vertex;
/// stops at the first non-OK status.
template <typename F>
Status for_each_sample(const Checked& c, int s, int i, F&& f) {
  const std::vector<Instr>& code = c.pr.p.cores[static_cast<size_t>(s)].code;
  const StreamShape& shape = c.shapes[static_cast<size_t>(s)];
  const std::vector<int32_t> chain = enclosing_loops(shape, i);
  const uint64_t used = used_vars(code, shape, i);
  Status st;
  for (const SymPoint& p : sym_vertices(c.pr.b.max_cache, c.pr.p.max_seq, c.pr.instances, true)) {
    Env env;
    set_syms(env, p);
    for_each_env(code, shape, chain, used, env, [&](const Env& en) {
      st = f(en, chain);
      return st.ok();
    });
    if (!st.ok()) return st;
  }
  return st;
}

Status check_accesses_v2(const Checked& c) {
  const Bundle& b = c.pr.b;
  for (size_t s = 0; s < c.pr.p.cores.size(); ++s) {
    const std::vector<Instr>& code = c.pr.p.cores[s].code;
    for (size_t i = 0; i < code.size(); ++i) {
      const std::vector<Access>& accs = c.accs[s][i];
      if (accs.empty()) continue;
      const int si = static_cast<int>(s), ii = static_cast<int>(i);
      QBC_RETURN_IF_ERROR(for_each_sample(c, si, ii, [&](const Env& env, const auto& chain) {
        for (const Access& a : accs) {
          int64_t off = 0, n = 0;
          if (!eval_checked(a.ref.offset, env, &off) || !eval_checked(a.bytes, env, &n)) {
            return violation(2, instr_at(c, si, ii) + ": " + access_text(b, a) +
                                    " overflows int64 at " + env_text(env, code, chain));
          }
          if (n <= 0) continue;
          const Buffer& buf = b.buffers[static_cast<size_t>(a.ref.buffer)];
          if (off < 0 || __int128{off} + n > buf.bytes) {
            return violation(2, instr_at(c, si, ii) + ": " + access_text(b, a) + " = bytes [" +
                                    num(off) + ", " + num(off + n) + ") outside " + buf.name +
                                    " (" + num(buf.bytes) + " bytes) at " +
                                    env_text(env, code, chain));
          }
        }
        return ok_status();
      }));
    }
  }
  return ok_status();
}

Status check_alignment_v3(const Checked& c, const std::vector<int64_t>& instances) {
  const Bundle& b = c.pr.b;
  const int64_t align = b.dma_align;
  for (size_t s = 0; s < c.pr.p.cores.size(); ++s) {
    const std::vector<Instr>& code = c.pr.p.cores[s].code;
    for (size_t i = 0; i < code.size(); ++i) {
      const Dma* d = std::get_if<Dma>(&code[i].op);
      if (!d) continue;
      const int si = static_cast<int>(s), ii = static_cast<int>(i);
      const auto bad = [&](const std::string& m) {
        return violation(
            3, instr_at(c, si, ii) + ": " + m + " is not a multiple of dma_align " + num(align));
      };
      const bool dram_dst = b.buffers[static_cast<size_t>(d->dst.buffer)].space == Space::kDram;
      const Ref& dram = dram_dst ? d->dst : d->src;
      const Buffer& dbuf = b.buffers[static_cast<size_t>(dram.buffer)];
      if (d->ring_rows > 0 && d->ring_stride % align != 0) {
        return bad("ring_stride " + num(d->ring_stride));
      }
      if (dbuf.slot_stride % align != 0 && instances[static_cast<size_t>(dram.buffer)] > 1) {
        return bad("the slot_stride " + num(dbuf.slot_stride) + " of " + dbuf.name);
      }
      QBC_RETURN_IF_ERROR(for_each_sample(c, si, ii, [&](const Env& env, const auto& chain) {
        for (const Ref* r : {&d->dst, &d->src}) {
          const Buffer& buf = b.buffers[static_cast<size_t>(r->buffer)];
          if (buf.space != Space::kDram) continue;  // SRAM tiles are dense (docs/npu.md V3)
          int64_t off = 0;
          eval_checked(r->offset, env, &off);  // V2 checked it evaluates
          int64_t addr = buf.offset + off;
          if (buf.space == Space::kDram) {
            addr += env.sym[static_cast<int>(Sym::kSlot)] * buf.slot_stride;
          }
          if (addr % align != 0) {
            return bad(std::string(r == &d->dst ? "dst" : "src") + " address " + num(addr) + " (" +
                       buf.name + " at " + num(buf.offset) + " + " + r->offset.to_string() + ", " +
                       env_text(env, code, chain) + ")");
          }
        }
        int64_t rows = 0;
        eval_checked(d->rows, env, &rows);
        if (rows > 1) {
          const bool dst_ring = d->ring_rows > 0 && dram_dst;
          const bool src_ring = d->ring_rows > 0 && !dram_dst;
          if (dram_dst && !dst_ring && d->dst_stride % align != 0) {
            return bad("dst_stride " + num(d->dst_stride) + " (rows " + num(rows) + ")");
          }
          if (!dram_dst && !src_ring && d->src_stride % align != 0) {
            return bad("src_stride " + num(d->src_stride) + " (rows " + num(rows) + ")");
          }
        }
        return ok_status();
      }));
    }
  }
  return ok_status();
}

// ---------------------------------------------------------------------------------------
// V4: no overlap of live SRAM buffers of one core, no overlap of DRAM regions.

Status check_sram_overlap_v4(const Checked& c) {
  const Bundle& b = c.pr.b;
  for (size_t s = 0; s < c.pr.p.cores.size(); ++s) {
    const CoreProgram& cp = c.pr.p.cores[s];
    const size_t n = cp.code.size();
    std::map<int32_t, std::pair<int64_t, int64_t>> live;  // buffer -> [first, last]
    // An access whose size is the constant 0 (a token carrier's) references nothing.
    const auto sram_ref = [&](const Access& a) {
      return b.buffers[static_cast<size_t>(a.ref.buffer)].space == Space::kSram &&
             !(a.bytes.is_const() && a.bytes.constant() <= 0);
    };
    for (size_t i = 0; i < n; ++i) {
      for (const Access& a : c.accs[s][i]) {
        if (!sram_ref(a)) continue;
        auto [it, fresh] =
            live.try_emplace(a.ref.buffer, static_cast<int64_t>(i), static_cast<int64_t>(i));
        if (!fresh) it->second.second = static_cast<int64_t>(i);
      }
    }
    // A buffer whose first reference inside a loop body reads it may carry its value from one
    // iteration into the next: it is live over the whole loop.
    for (size_t l = 0; l < n; ++l) {
      const Loop* loop = std::get_if<Loop>(&cp.code[l].op);
      if (!loop) continue;
      const size_t end = l + static_cast<size_t>(loop->body);
      std::set<int32_t> seen;
      for (size_t i = l + 1; i <= end; ++i) {
        std::set<int32_t> here_read, here;
        for (const Access& a : c.accs[s][i]) {
          if (!sram_ref(a)) continue;
          here.insert(a.ref.buffer);
          if (!a.write) here_read.insert(a.ref.buffer);
        }
        for (int32_t id : here) {
          if (!seen.insert(id).second) continue;
          if (!here_read.count(id)) continue;
          auto& r = live[id];
          r.first = std::min<int64_t>(r.first, static_cast<int64_t>(l));
          r.second = std::max<int64_t>(r.second, static_cast<int64_t>(end));
        }
      }
    }
    std::vector<int32_t> ids;
    for (const auto& [id, range] : live) {
      if (b.buffers[static_cast<size_t>(id)].bytes > 0) ids.push_back(id);
    }
    std::sort(ids.begin(), ids.end(), [&](int32_t x, int32_t y) {
      return b.buffers[static_cast<size_t>(x)].offset < b.buffers[static_cast<size_t>(y)].offset;
    });
    for (size_t x = 0; x < ids.size(); ++x) {
      const Buffer& bx = b.buffers[static_cast<size_t>(ids[x])];
      for (size_t y = x + 1; y < ids.size(); ++y) {
        const Buffer& by = b.buffers[static_cast<size_t>(ids[y])];
        if (by.offset >= bx.offset + bx.bytes) break;
        const auto [fx, lx] = live[ids[x]];
        const auto [fy, ly] = live[ids[y]];
        if (lx < fy || ly < fx) continue;
        return violation(4, where(c.pr) + " core " + num(cp.core) + ": " + bx.name + " [" +
                                num(bx.offset) + ", " + num(bx.offset + bx.bytes) + ") and " +
                                by.name + " [" + num(by.offset) + ", " + num(by.offset + by.bytes) +
                                ") share SRAM while both are live (#" + num(fx) + "..#" + num(lx) +
                                " and #" + num(fy) + "..#" + num(ly) + ")");
      }
    }
  }
  return ok_status();
}

Status check_dram_overlap_v4(const Bundle& b, const std::vector<int64_t>& instances) {
  struct Region {
    int64_t lo, hi;
    int32_t buffer;
    int64_t slot;
  };
  std::vector<Region> regions;
  for (size_t i = 0; i < b.buffers.size(); ++i) {
    const Buffer& buf = b.buffers[i];
    if (buf.space != Space::kDram || buf.bytes <= 0) continue;
    const int64_t slots = buf.slot_stride > 0 ? instances[i] : 1;
    for (int64_t k = 0; k < slots; ++k) {
      const int64_t lo = buf.offset + k * buf.slot_stride;
      regions.push_back({lo, lo + buf.bytes, static_cast<int32_t>(i), k});
    }
  }
  std::sort(regions.begin(), regions.end(),
            [](const Region& x, const Region& y) { return x.lo < y.lo; });
  // Sorted by start, a region overlaps an earlier one iff it starts before the furthest end
  // seen so far.
  size_t furthest = 0;
  for (size_t k = 1; k < regions.size(); ++k) {
    const Region &q = regions[furthest], &r = regions[k];
    if (r.lo < q.hi) {
      const auto name = [&](const Region& x) {
        const bool slotted = b.buffers[static_cast<size_t>(x.buffer)].slot_stride > 0;
        return buffer_name(b, x.buffer) + (slotted ? " slot " + num(x.slot) : "") + " [" +
               num(x.lo) + ", " + num(x.hi) + ")";
      };
      return violation(4, "DRAM regions overlap: " + name(q) + " and " + name(r));
    }
    if (r.hi > q.hi) furthest = k;
  }
  return ok_status();
}

// ---------------------------------------------------------------------------------------
// V7: every core takes the same barriers.

Status check_barriers_v7(const Checked& c) {
  struct Taken {
    int32_t instr, id, cores;
    std::vector<const Expr*> trips;
  };
  const Program& p = c.pr.p;
  const int32_t streams = static_cast<int32_t>(p.cores.size());
  std::vector<std::vector<Taken>> seqs(p.cores.size());
  for (size_t s = 0; s < p.cores.size(); ++s) {
    const std::vector<Instr>& code = p.cores[s].code;
    for (size_t i = 0; i < code.size(); ++i) {
      const Barrier* br = std::get_if<Barrier>(&code[i].op);
      if (!br) continue;
      const int si = static_cast<int>(s), ii = static_cast<int>(i);
      if (br->cores != streams) {
        return violation(7, instr_at(c, si, ii) + ": barrier " + num(br->id) + " counts " +
                                num(br->cores) + " cores, but the program has " + num(streams) +
                                " streams");
      }
      if (!seqs[s].empty() && br->id <= seqs[s].back().id) {
        return violation(7, instr_at(c, si, ii) + ": barrier " + num(br->id) +
                                " does not follow barrier " + num(seqs[s].back().id) + " at #" +
                                num(seqs[s].back().instr) + " (ids increase along a stream)");
      }
      Taken t{ii, br->id, br->cores, {}};
      for (int32_t l : enclosing_loops(c.shapes[s], ii)) {
        t.trips.push_back(&std::get<Loop>(code[static_cast<size_t>(l)].op).trip);
      }
      seqs[s].push_back(std::move(t));
    }
  }
  for (size_t s = 1; s < seqs.size(); ++s) {
    const size_t n = std::min(seqs[0].size(), seqs[s].size());
    for (size_t k = 0; k <= n; ++k) {
      const bool end0 = k == seqs[0].size(), ends = k == seqs[s].size();
      if (end0 && ends) break;
      const int32_t c0 = p.cores[0].core, cs = p.cores[s].core;
      if (end0 || ends) {
        const Taken& t = end0 ? seqs[s][k] : seqs[0][k];
        return violation(7, where(c.pr) + ": core " + num(end0 ? cs : c0) + " takes barrier " +
                                num(t.id) + " at #" + num(t.instr) + ", core " +
                                num(end0 ? c0 : cs) + " takes only " +
                                num(static_cast<int64_t>(k)) + " barriers");
      }
      const Taken &a = seqs[0][k], &t = seqs[s][k];
      bool same = a.id == t.id && a.cores == t.cores && a.trips.size() == t.trips.size();
      for (size_t j = 0; same && j < a.trips.size(); ++j) same = *a.trips[j] == *t.trips[j];
      if (!same) {
        return violation(7, where(c.pr) + ": barrier " + num(static_cast<int64_t>(k)) +
                                " of core " + num(c0) + " is id " + num(a.id) + " at #" +
                                num(a.instr) + " in " + num(static_cast<int64_t>(a.trips.size())) +
                                " loops, of core " + num(cs) + " id " + num(t.id) + " at #" +
                                num(t.instr) + " in " + num(static_cast<int64_t>(t.trips.size())) +
                                " loops (the same ids, inside loops of the same trip counts)");
      }
    }
  }
  return ok_status();
}

std::vector<Checked> programs_of(const Bundle& b) {
  std::vector<Checked> out;
  for (size_t m = 0; m < b.modes.size(); ++m) {
    for (const Program* p : b.modes[m].programs()) {
      out.push_back(Checked{ProgramRef{b, *p, static_cast<int>(m), b.modes[m].instances}, {}, {}});
    }
  }
  return out;
}

/// V10: a feature bundle's interface (docs/npu.md "Feature bundles"): named fp16 row inputs
/// and an fp32 feature output in io DRAM buffers large enough for chunk rows, no decoder
/// input, rope tables or decode code, bidirectional attention descriptors; a decoder bundle
/// has no feature inputs and causal attention descriptors; a span program only in a decoder,
/// in every mode or none, with the prefill's max_seq, `span` on each of its qk_scores and on no
/// other program's.
Status check_features_v10(const Bundle& b) {
  const auto bad = [](const std::string& m) { return violation(10, m); };
  for (size_t m = 0; m < b.modes.size(); ++m) {
    const Mode& mode = b.modes[m];
    const std::string at =
        "mode " + num(static_cast<int64_t>(m)) + " (" + scheme_name(mode.scheme) + ")";
    if (mode.has_span() && b.kind != BundleKind::kDecoder)
      return bad(at + ": a span program in a feature bundle");
    if (mode.has_span() != b.modes.front().has_span())
      return bad(at + ": " +
                 (mode.has_span() ? "a span program, mode 0 has none"
                                  : "no span program, mode 0 has one"));
    if (mode.has_span() && mode.span.max_seq != mode.prefill.max_seq)
      return bad(at + ": span max_seq " + num(mode.span.max_seq) + " is not the prefill's " +
                 num(mode.prefill.max_seq));
    for (const Program* p : mode.programs()) {
      const bool want = p->phase == Phase::kSpan;
      for (const CoreProgram& cp : p->cores) {
        for (size_t i = 0; i < cp.code.size(); ++i) {
          const auto* q = std::get_if<QkScores>(&cp.code[i].op);
          if (q == nullptr || q->span == want) continue;
          return bad(
              at + " " + phase_name(p->phase) + " core " + num(cp.core) + " instruction " +
              num(static_cast<int64_t>(i)) + ": qk_scores " +
              (want ? "without span in a span program" : "with span outside a span program"));
        }
      }
    }
  }
  // A decoder's attention is causal, a feature bundle's (a tower's full_attention) is not.
  for (size_t i = 0; i < b.attentions.size(); ++i) {
    if (b.attentions[i].bidirectional != (b.kind == BundleKind::kFeatures))
      return bad("attention descriptor " + num(static_cast<int64_t>(i)) + " is " +
                 (b.attentions[i].bidirectional ? "bidirectional in a decoder bundle"
                                                : "causal in a feature bundle"));
  }
  if (b.kind == BundleKind::kDecoder) {
    if (!b.feature_inputs.empty())
      return bad("a decoder bundle has " + num(static_cast<int64_t>(b.feature_inputs.size())) +
                 " feature inputs");
    return ok_status();
  }
  if (b.kind != BundleKind::kFeatures) return bad("unknown bundle kind");
  if (b.input >= 0 || b.rope_inputs.present() || !b.deepstack.empty())
    return bad("a feature bundle has an inputs_embeds, rope-table or DeepStack input");
  if (b.feature_inputs.empty()) return bad("a feature bundle without inputs");
  const auto io_buffer = [&](int32_t id, int64_t need, int64_t rows,
                             const std::string& what) -> Status {
    if (id < 0 || id >= static_cast<int64_t>(b.buffers.size()))
      return bad(what + ": buffer #" + num(id) + " does not exist");
    const Buffer& buf = b.buffers[static_cast<size_t>(id)];
    if (buf.space != Space::kDram || buf.purpose != Purpose::kIo)
      return bad(what + ": buffer " + buffer_name(b, id) + " is not an io buffer in DRAM");
    if (buf.bytes < need) {
      return bad(what + ": buffer " + buffer_name(b, id) + " holds " + num(buf.bytes) +
                 " bytes, less than the " + num(need) + " of " + num(rows) + " rows");
    }
    return ok_status();
  };
  std::vector<int32_t> seen;
  for (const FeatureInput& in : b.feature_inputs) {
    const std::string what = "feature input '" + in.name + "'";
    if (in.name.empty()) return bad("a feature input without a name");
    for (const FeatureInput& other : b.feature_inputs) {
      if (&other != &in && other.name == in.name) return bad(what + " is named twice");
    }
    if (in.width < 1 || in.width > kMaxField || in.stride < 2 * in.width || in.stride > kMaxField)
      return bad(what + ": width " + num(in.width) + " and row stride " + num(in.stride) +
                 " (at least 2 * width)");
    for (int32_t id : seen) {
      if (id == in.buffer) return bad(what + " shares its buffer with another input");
    }
    seen.push_back(in.buffer);
    QBC_RETURN_IF_ERROR(
        io_buffer(in.buffer, (b.chunk - 1) * in.stride + 2 * in.width, b.chunk, what));
  }
  if (b.vocab < 1 || b.output_stride < 4 * b.vocab || b.output_stride > kMaxField)
    return bad("feature output: width " + num(b.vocab) + " and row stride " + num(b.output_stride) +
               " (at least 4 * width)");
  if (b.output_rows < 1 || b.output_rows > b.chunk || b.chunk % b.output_rows != 0)
    return bad("feature output: " + num(b.output_rows) + " rows per call, not a divisor of the " +
               num(b.chunk) + " input rows");
  QBC_RETURN_IF_ERROR(io_buffer(b.output, (b.output_rows - 1) * b.output_stride + 4 * b.vocab,
                                b.output_rows, "feature output"));
  for (size_t m = 0; m < b.modes.size(); ++m) {
    for (const CoreProgram& cp : b.modes[m].decode.cores) {
      if (!cp.code.empty())
        return bad("mode " + num(static_cast<int64_t>(m)) + " (" + scheme_name(b.modes[m].scheme) +
                   "): a feature bundle's decode program has " +
                   num(static_cast<int64_t>(cp.code.size())) + " instructions on core " +
                   num(cp.core));
    }
  }
  return ok_status();
}

Status verify_all(const Bundle& b, std::vector<Checked> programs, const ProgramRef* extra) {
  QBC_RETURN_IF_ERROR(check_tables(b));
  for (Checked& c : programs) QBC_RETURN_IF_ERROR(check_program_v1(c.pr, &c.shapes));
  QBC_RETURN_IF_ERROR(check_tables_v8(b));
  QBC_RETURN_IF_ERROR(check_features_v10(b));
  for (Checked& c : programs) QBC_RETURN_IF_ERROR(check_program_v8(c.pr, c.shapes));
  for (Checked& c : programs) {
    c.accs.resize(c.pr.p.cores.size());
    for (size_t s = 0; s < c.pr.p.cores.size(); ++s) {
      for (const Instr& in : c.pr.p.cores[s].code) c.accs[s].push_back(accesses(in, b));
    }
  }
  const std::vector<int64_t> instances = buffer_instances(b, extra);
  QBC_RETURN_IF_ERROR(check_buffer_space(b, instances));
  for (Checked& c : programs) QBC_RETURN_IF_ERROR(check_accesses_v2(c));
  for (Checked& c : programs) QBC_RETURN_IF_ERROR(check_alignment_v3(c, instances));
  QBC_RETURN_IF_ERROR(check_dram_overlap_v4(b, instances));
  QBC_RETURN_IF_ERROR(first_error_parallel(static_cast<int64_t>(programs.size()), [&](int64_t i) {
    return check_sram_overlap_v4(programs[static_cast<size_t>(i)]);
  }));
  for (Checked& c : programs) QBC_RETURN_IF_ERROR(check_barriers_v7(c));
  for (Checked& c : programs) QBC_RETURN_IF_ERROR(check_replay(c.pr, c.shapes, c.accs));
  return ok_status();
}

}  // namespace

// ---------------------------------------------------------------------------------------

Status violation(int invariant, const std::string& message) {
  static constexpr const char* kNames[] = {"",
                                           "well-formed",
                                           "bounds",
                                           "alignment",
                                           "no overlap",
                                           "ordered conflicts",
                                           "deadlock-free replay",
                                           "barriers",
                                           "sizes",
                                           "no SRAM size depends on the cache length",
                                           "feature interface"};
  const bool input =
      invariant == 1 || invariant == 2 || invariant == 3 || invariant == 8 || invariant == 10;
  return Status(input ? Code::kInvalidArgument : Code::kFailedPrecondition,
                "V" + std::to_string(invariant) + " (" + kNames[invariant] + "): " + message);
}

std::string where(const ProgramRef& pr) {
  if (pr.mode < 0) return std::string("program ") + phase_name(pr.p.phase);
  return "mode " + std::to_string(pr.mode) + " (" +
         scheme_name(pr.b.modes[static_cast<size_t>(pr.mode)].scheme) + ") " +
         phase_name(pr.p.phase);
}

std::string where(const ProgramRef& pr, int stream, int instr) {
  return where(pr) + " " + instr_where(pr, stream, instr);
}

std::string instr_where(const ProgramRef& pr, int stream, int instr) {
  const CoreProgram& cp = pr.p.cores[static_cast<size_t>(stream)];
  const Instr& in = cp.code[static_cast<size_t>(instr)];
  std::string s = "core " + std::to_string(cp.core) + " #" + std::to_string(instr) + " " +
                  (static_cast<int>(in.queue) < kNumQueues ? queue_name(in.queue) : "?") + " " +
                  op_name(in.op);
  std::string debug;
  if (in.node >= 0 && static_cast<size_t>(in.node) < pr.b.nodes.size()) {
    debug = "node '" + pr.b.nodes[static_cast<size_t>(in.node)] + "'";
  }
  if (in.pass >= 0 && static_cast<size_t>(in.pass) < pr.b.passes.size()) {
    debug += (debug.empty() ? "" : ", ") + std::string("pass '") +
             pr.b.passes[static_cast<size_t>(in.pass)] + "'";
  }
  return debug.empty() ? s : s + " (" + debug + ")";
}

std::string buffer_name(const Bundle& b, int32_t id) {
  if (id >= 0 && static_cast<size_t>(id) < b.buffers.size()) {
    return "%" + b.buffers[static_cast<size_t>(id)].name;
  }
  return "#" + std::to_string(id);
}

Status check_program_structure(const ProgramRef& pr, std::vector<StreamShape>* shapes) {
  QBC_RETURN_IF_ERROR(check_program_v1(pr, shapes));
  return check_program_v8(pr, *shapes);
}

Status verify(const Bundle& b) { return verify_all(b, programs_of(b), nullptr); }

Status verify_tables(const Bundle& b) { return check_tables(b); }

Status verify_structure(const Bundle& b, const Program& p, int instances,
                        std::vector<StreamShape>* shapes) {
  return check_program_structure(ProgramRef{b, p, -1, instances}, shapes);
}

Status verify_program(const Bundle& b, const Program& p, int instances) {
  ProgramRef pr{b, p, -1, instances};
  if (instances < 1) {
    return violation(1, where(pr) + ": " + std::to_string(instances) + " instances");
  }
  if (p.cores.empty() || p.cores.size() > static_cast<size_t>(b.target_cores)) {
    return violation(1, where(pr) + ": " + std::to_string(p.cores.size()) +
                            " streams for a target of " + std::to_string(b.target_cores) +
                            " cores");
  }
  return verify_all(b, {Checked{pr, {}, {}}}, &pr);
}

ProgramSize program_size(const Program& p) {
  ProgramSize size;
  for (const CoreProgram& cp : p.cores) {
    size.instructions += static_cast<int64_t>(cp.code.size());
    for (const Instr& in : cp.code) {
      size.bytes += static_cast<int64_t>(sizeof(Instr));
      for (const ExprField& f : op_exprs(in.op)) {
        size.bytes += static_cast<int64_t>(f.expr->nodes().size() * sizeof(Expr::Node));
      }
      for (const RefField& f : op_refs(in.op)) {
        size.bytes += static_cast<int64_t>(f.ref->offset.nodes().size() * sizeof(Expr::Node));
      }
    }
  }
  return size;
}

}  // namespace qbc::isa
