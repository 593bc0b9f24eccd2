// The executor's bundle checks (see validate.h).
#include "validate.h"

#include <algorithm>
#include <string>
#include <type_traits>
#include <variant>
#include <vector>

#include "interpreter.h"

namespace qbc::runtime {
namespace {

constexpr int32_t kMaxLoopVars = 1024;
constexpr int64_t kMaxBytes = int64_t{1} << 48;  // far above any device; keeps sums exact

bool code_bits(int bits) { return bits == 4 || bits == 8 || bits == 16; }

template <class M>
constexpr bool is_int() {
  return std::is_integral_v<M> && !std::is_same_v<M, bool>;
}

/// Checks one instruction of stream `core` with the loop variables `active` bound; the
/// instruction table (qbc/isa/ops.h) says which fields are references, expressions, indices
/// and sizes.
class InstrChecker {
 public:
  InstrChecker(const isa::Bundle& b, int32_t core, const std::vector<bool>& active)
      : b_(b), core_(core), active_(active) {}

  Status expr(const isa::Expr& e, const char* what) const {
    const auto& nodes = e.nodes();
    if (nodes.empty()) return invalid_argument(what, ": empty expression");
    for (size_t i = 0; i < nodes.size(); ++i) {
      const isa::Expr::Node& n = nodes[i];
      switch (n.op) {
        case isa::Expr::Op::kConst:
          if (n.a != -1 || n.b != -1)
            return invalid_argument(what, ": malformed expression (node ", i, ")");
          break;
        case isa::Expr::Op::kSym:
          if (n.value < 0 || n.value >= isa::kNumSyms || n.a != -1 || n.b != -1)
            return invalid_argument(what, ": unknown runtime value ", n.value);
          break;
        case isa::Expr::Op::kLoop:
          if (n.value < 0 || n.value >= static_cast<int64_t>(active_.size()) ||
              !active_[static_cast<size_t>(n.value)]) {
            return invalid_argument(what, ": ", e.to_string(), " reads loop variable i", n.value,
                                    " outside its loop");
          }
          break;
        case isa::Expr::Op::kFloorDiv:
        case isa::Expr::Op::kCeilDiv:
        case isa::Expr::Op::kMod:
        case isa::Expr::Op::kAdd:
        case isa::Expr::Op::kSub:
        case isa::Expr::Op::kMul:
        case isa::Expr::Op::kMin:
        case isa::Expr::Op::kMax: {
          const int64_t ii = static_cast<int64_t>(i);
          if (n.a < 0 || n.a >= ii || n.b < 0 || n.b >= ii)
            return invalid_argument(what, ": malformed expression (node ", i, ")");
          const bool div = n.op == isa::Expr::Op::kFloorDiv || n.op == isa::Expr::Op::kCeilDiv ||
                           n.op == isa::Expr::Op::kMod;
          const isa::Expr::Node& d = nodes[static_cast<size_t>(n.b)];
          if (div && (d.op != isa::Expr::Op::kConst || d.value <= 0)) {
            return invalid_argument(what, ": ", e.to_string(),
                                    " divides by something other than a positive constant");
          }
          break;
        }
      }
    }
    return ok_status();
  }

  /// A ref of a compute instruction: absent, or in this core's SRAM.
  Status sram(const isa::Ref& r, const char* what) const {
    QBC_RETURN_IF_ERROR(index(r, what));
    if (!r.valid()) return ok_status();
    const isa::Buffer& buf = b_.buffers[static_cast<size_t>(r.buffer)];
    if (buf.space != isa::Space::kSram || buf.core != core_) {
      return invalid_argument(what, ": buffer '", buf.name, "' is not in the SRAM of core ", core_,
                              " (compute instructions work on their core's SRAM)");
    }
    return expr(r.offset, what);
  }

  /// Checks `op`: its operands as its table row describes them (indices, references,
  /// expressions, sizes), then what the kernels implement.
  template <class T>
  Status operator()(const T& op) const {
    QBC_RETURN_IF_ERROR(indices(op));
    QBC_RETURN_IF_ERROR(operands(op));
    QBC_RETURN_IF_ERROR(supported(op));
    QBC_RETURN_IF_ERROR(sizes(op));
    const std::string rule = isa::op_rules(op);
    if (!rule.empty()) return invalid_argument(isa::OpRow<T>::kName, ": ", rule);
    return ok_status();
  }

 private:
  /// Attention, rope and KV-head fields name existing tables and heads.
  template <class T>
  Status indices(const T& op) const {
    Status st;
    int64_t attn = -1;
    isa::for_each_field(op, [&](const auto& f, const auto& v) {
      if constexpr (is_int<std::decay_t<decltype(v)>>()) {
        if (!st.ok()) return;
        if (f.spec.kind == isa::FieldKind::kAttn) {
          attn = v;
          if (v < 0 || static_cast<size_t>(v) >= b_.attentions.size())
            st = invalid_argument("attention ", v, " does not exist (", b_.attentions.size(), ")");
        } else if (f.spec.kind == isa::FieldKind::kRope) {
          if (v < 0 || static_cast<size_t>(v) >= b_.ropes.size())
            st = invalid_argument("rope table ", v, " does not exist (", b_.ropes.size(), ")");
        }
      }
    });
    if (!st.ok()) return st;
    isa::for_each_field(op, [&](const auto& f, const auto& v) {
      if constexpr (is_int<std::decay_t<decltype(v)>>()) {
        if (st.ok() && f.spec.kind == isa::FieldKind::kKvHead &&
            (v < 0 || attn < 0 || v >= b_.attentions[static_cast<size_t>(attn)].kv_heads))
          st = invalid_argument(f.spec.name, " ", v, " out of range");
      }
    });
    return st;
  }

  /// References name existing buffers (required ones are set), compute instructions work on
  /// their core's SRAM, DMAs connect DRAM and it; expressions are well-formed.
  template <class T>
  Status operands(const T& op) const {
    if constexpr (std::is_same_v<T, isa::Dma>) QBC_RETURN_IF_ERROR(dma_sides(op));
    Status st;
    isa::for_each_field(op, [&](const auto& f, const auto& v) {
      using M = std::decay_t<decltype(v)>;
      if (!st.ok()) return;
      if constexpr (std::is_same_v<M, isa::Ref>) {
        constexpr bool compute = isa::OpRow<T>::kQueue == isa::QueueClass::kCompute;
        st = index(v, f.spec.name);
        if (st.ok() && !v.valid() && f.required(op))
          st = invalid_argument(f.spec.name, ": not set");
        if (st.ok() && v.valid()) st = compute ? sram(v, f.spec.name) : expr(v.offset, f.spec.name);
      } else if constexpr (std::is_same_v<M, isa::Expr>) {
        st = expr(v, f.spec.name);
      }
    });
    return st;
  }

  /// Sizes and counts are not negative; those the row wants positive are positive.
  template <class T>
  Status sizes(const T& op) const {
    Status st;
    isa::for_each_field(op, [&](const auto& f, const auto& v) {
      using M = std::decay_t<decltype(v)>;
      if constexpr (is_int<M>()) {
        if (!st.ok() || f.spec.kind != isa::FieldKind::kInt) return;
        if (!f.spec.accepts(v)) {
          st = invalid_argument(isa::OpRow<T>::kName, " with ", f.spec.name, " ", v,
                                " (not supported)");
          return;
        }
        if (f.spec.lo == isa::kNoBound && f.lo_of == nullptr) return;
        const int64_t lo = f.spec.lo >= 1 ? 1 : 0;
        if (v < lo) st = invalid_argument(isa::OpRow<T>::kName, " with ", f.spec.name, " ", v);
      }
    });
    return st;
  }

  Status dma_sides(const isa::Dma& d) const {
    QBC_RETURN_IF_ERROR(index(d.src, "src"));
    QBC_RETURN_IF_ERROR(index(d.dst, "dst"));
    if (!d.src.valid() || !d.dst.valid()) return invalid_argument("dma needs src and dst");
    const isa::Buffer& s = b_.buffers[static_cast<size_t>(d.src.buffer)];
    const isa::Buffer& t = b_.buffers[static_cast<size_t>(d.dst.buffer)];
    const bool load = s.space == isa::Space::kDram;
    const isa::Buffer& on_chip = load ? t : s;
    if ((s.space == isa::Space::kDram) == (t.space == isa::Space::kDram) || on_chip.core != core_) {
      return invalid_argument("dma from '", s.name, "' to '", t.name,
                              "' is not between DRAM and the SRAM of core ", core_);
    }
    return ok_status();
  }

  /// The element types the kernels implement (exec_linear.cpp, exec_vector.cpp).
  template <class T>
  Status supported(const T& op) const {
    if constexpr (std::is_same_v<T, isa::MatMul>) {
      if ((op.xtype != isa::DType::kI8 && op.xtype != isa::DType::kI16) ||
          (op.wtype != isa::DType::kI8 && op.wtype != isa::DType::kI4) ||
          (op.acctype != isa::DType::kI32 && op.acctype != isa::DType::kI64)) {
        return invalid_argument("matmul of ", isa::dtype_name(op.xtype), " x ",
                                isa::dtype_name(op.wtype), " -> ", isa::dtype_name(op.acctype),
                                " (supported: i8/i16 x i8/i4 -> i32/i64)");
      }
    } else if constexpr (std::is_same_v<T, isa::Requant>) {
      if ((op.acctype != isa::DType::kI32 && op.acctype != isa::DType::kI64) ||
          (op.ytype != isa::DType::kF16 && op.ytype != isa::DType::kF32)) {
        return invalid_argument("requant of ", isa::dtype_name(op.acctype), " to ",
                                isa::dtype_name(op.ytype), " (supported: i32/i64 to f16/f32)");
      }
    } else {
      // The other ops' enum fields: the values their rows accept.
      Status st;
      isa::for_each_field(op, [&](const auto& f, const auto& v) {
        if constexpr (std::is_enum_v<std::decay_t<decltype(v)>>) {
          if (st.ok() && !f.spec.accepts(static_cast<int64_t>(v)))
            st = invalid_argument(isa::OpRow<T>::kName, " with ", f.spec.name, " ",
                                  static_cast<int>(v), " (not supported)");
        }
      });
      return st;
    }
    return ok_status();
  }

  Status index(const isa::Ref& r, const char* what) const {
    if (r.buffer < -1 || r.buffer >= static_cast<int32_t>(b_.buffers.size()))
      return invalid_argument(what, ": buffer ", r.buffer, " does not exist");
    return ok_status();
  }

  const isa::Bundle& b_;
  int32_t core_;
  const std::vector<bool>& active_;
};

/// Checks one core's stream: loop nesting and variables, then every instruction.
Status check_stream(const isa::Bundle& b, const isa::Program& p, size_t ci, int32_t* loop_vars) {
  const isa::CoreProgram& cp = p.cores[ci];
  std::vector<bool> active(kMaxLoopVars, false);
  struct Open {
    int32_t var;
    size_t end;
  };
  std::vector<Open> open;
  const InstrChecker check(b, cp.core, active);
  for (size_t pc = 0; pc < cp.code.size(); ++pc) {
    while (!open.empty() && pc == open.back().end) {
      active[static_cast<size_t>(open.back().var)] = false;
      open.pop_back();
    }
    const isa::Instr& in = cp.code[pc];
    Status s = std::visit(check, in.op);
    if (const auto* q = std::get_if<isa::KvQuant>(&in.op); s.ok() && q != nullptr) {
      // Packed records only into a cache its descriptor declares packed (MXQ feature bit 8).
      if (q->head_stride > 0 && !b.attentions[static_cast<size_t>(q->attn)].packed)
        s = invalid_argument("kv_quant writes packed records (head_stride ", q->head_stride,
                             ") of attention #", q->attn, ", which is not packed");
    }
    if (s.ok()) {
      if (const auto* l = std::get_if<isa::Loop>(&in.op)) {
        const size_t limit = open.empty() ? cp.code.size() : open.back().end;
        if (l->var < 0 || l->var >= kMaxLoopVars || active[static_cast<size_t>(l->var)]) {
          s = invalid_argument("loop variable i", l->var, " is out of range or already in use");
        } else if (l->body < 0 || pc + 1 + static_cast<size_t>(l->body) > limit) {
          s = invalid_argument("loop body of ", l->body, " instructions leaves its enclosing body");
        } else {
          open.push_back(Open{l->var, pc + 1 + static_cast<size_t>(l->body)});
          active[static_cast<size_t>(l->var)] = true;
          *loop_vars = std::max(*loop_vars, l->var + 1);
        }
      }
    }
    if (!s.ok()) return s.with_context(instr_label(b, p, ci, pc));
  }
  return ok_status();
}

Status check_program(const isa::Bundle& b, const isa::Mode& m, const isa::Program& p,
                     isa::Phase phase, int32_t* loop_vars) {
  const std::string where = std::string(isa::phase_name(phase)) + " program";
  if (p.phase != phase) return invalid_argument(where, ": holds phase ", isa::phase_name(p.phase));
  if (p.max_seq < 1) return invalid_argument(where, ": max_seq ", p.max_seq);
  if (p.cores.empty() || static_cast<int32_t>(p.cores.size()) > m.cores_per_instance) {
    return invalid_argument(where, ": ", p.cores.size(), " core streams for ", m.cores_per_instance,
                            " cores per instance");
  }
  std::vector<bool> seen(static_cast<size_t>(m.cores_per_instance), false);
  for (const isa::CoreProgram& cp : p.cores) {
    if (cp.core < 0 || cp.core >= m.cores_per_instance || seen[static_cast<size_t>(cp.core)]) {
      return invalid_argument(where, ": core stream ", cp.core, " is out of range or repeated");
    }
    seen[static_cast<size_t>(cp.core)] = true;
  }
  for (size_t ci = 0; ci < p.cores.size(); ++ci)
    QBC_RETURN_IF_ERROR(check_stream(b, p, ci, loop_vars));
  return ok_status();
}

Status check_tables(const isa::Bundle& b) {
  for (size_t i = 0; i < b.ropes.size(); ++i) {
    const isa::RopeDesc& r = b.ropes[i];
    const size_t half = static_cast<size_t>(r.rotary_dim / 2);
    if (r.heads < 0 || r.head_dim < 0 || r.rotary_dim < 0 || r.rotary_dim % 2 != 0 ||
        r.rotary_dim > r.head_dim || r.inv_freq.size() < half ||
        (!r.long_inv_freq.empty() && r.long_inv_freq.size() < half)) {
      return invalid_argument("rope table ", i, ": heads ", r.heads, ", head_dim ", r.head_dim,
                              ", rotary_dim ", r.rotary_dim, ", ", r.inv_freq.size(),
                              " frequencies are inconsistent");
    }
  }
  for (size_t i = 0; i < b.attentions.size(); ++i) {
    const isa::AttnDesc& a = b.attentions[i];
    if (a.heads <= 0 || a.kv_heads <= 0 || a.heads % a.kv_heads != 0 || a.head_dim <= 0 ||
        !code_bits(a.k_bits) || !code_bits(a.v_bits) || a.p_bits < 1 || a.p_bits > 16 ||
        a.window < 0) {
      return invalid_argument("attention ", i, ": heads ", a.heads, ", kv_heads ", a.kv_heads,
                              ", head_dim ", a.head_dim, ", bits k", a.k_bits, " v", a.v_bits, " p",
                              a.p_bits, " are not supported");
    }
    if ((a.k_bits == 4 || a.v_bits == 4) && a.head_dim % 2 != 0)
      return invalid_argument("attention ", i, ": 4-bit codes need an even head_dim");
    if (const std::string why = isa::kv4_fields_problem(a); !why.empty())
      return invalid_argument("attention ", i, ": the KV4 rules: ", why);
    if (a.rotating) {
      if (a.k_rope < 0 || static_cast<size_t>(a.k_rope) >= b.ropes.size())
        return invalid_argument("attention ", i, ": rotating offsets without K's rope table");
      const isa::RopeDesc& r = b.ropes[static_cast<size_t>(a.k_rope)];
      if (r.heads != a.kv_heads || r.head_dim != a.head_dim) {
        return invalid_argument("attention ", i, ": K's rope table has ", r.heads, " heads of ",
                                r.head_dim, ", K has ", a.kv_heads, " of ", a.head_dim);
      }
    }
  }
  return ok_status();
}

}  // namespace

StatusOr<BundleLayout> validate_bundle(const isa::Bundle& b, const isa::Mode& m) {
  if (m.cores_per_instance < 1 || m.instances < 1)
    return invalid_argument("mode ", isa::scheme_name(m.scheme), ": ", m.instances,
                            " instances of ", m.cores_per_instance, " cores");
  if (b.target_cores > 0 && int64_t{m.cores_per_instance} * m.instances > int64_t{b.target_cores}) {
    return invalid_argument("mode ", isa::scheme_name(m.scheme), ": ", m.instances, " x ",
                            m.cores_per_instance, " cores exceed the target's ", b.target_cores);
  }
  if (b.sram_bytes < 0 || b.sram_bytes > kMaxBytes || b.dram_bytes < 0 || b.max_cache < 1 ||
      b.chunk < 1) {
    return invalid_argument("bundle: sram_bytes ", b.sram_bytes, ", dram_bytes ", b.dram_bytes,
                            ", max_cache ", b.max_cache, ", chunk ", b.chunk);
  }
  BundleLayout layout;
  for (const isa::Buffer& buf : b.buffers) {
    if (buf.offset < 0 || buf.bytes < 0 || buf.slot_stride < 0 || buf.offset > kMaxBytes ||
        buf.bytes > kMaxBytes || buf.slot_stride > kMaxBytes ||
        static_cast<int>(buf.purpose) >= kNumPurposes) {
      return invalid_argument("buffer '", buf.name, "': offset ", buf.offset, ", bytes ", buf.bytes,
                              ", slot_stride ", buf.slot_stride);
    }
    if (buf.space == isa::Space::kSram) {
      if (buf.core < 0 || buf.offset + buf.bytes > b.sram_bytes) {
        return invalid_argument("buffer '", buf.name, "': SRAM bytes [", buf.offset, ", ",
                                buf.offset + buf.bytes, ") of core ", buf.core,
                                " outside the core's ", b.sram_bytes, " bytes");
      }
      continue;
    }
    const int64_t end = buf.offset + (m.instances - 1) * buf.slot_stride + buf.bytes;
    if (end > kMaxBytes) return invalid_argument("buffer '", buf.name, "' ends at ", end);
    layout.dram_size = std::max(layout.dram_size, end);
  }
  if (b.image_base < 0 || b.image_base > kMaxBytes)
    return invalid_argument("bundle: image_base ", b.image_base);
  layout.dram_size = std::max(layout.dram_size, b.image_base + b.image_size());
  if (b.dram_bytes > 0 && layout.dram_size > b.dram_bytes) {
    return resource_exhausted("bundle: DRAM buffers and image end at ", layout.dram_size,
                              " bytes, beyond the device's ", b.dram_bytes);
  }
  for (int32_t io : {b.input, b.output}) {
    if (io < -1 || io >= static_cast<int32_t>(b.buffers.size()) ||
        (io >= 0 && b.buffers[static_cast<size_t>(io)].space != isa::Space::kDram)) {
      return invalid_argument("bundle: io buffer ", io, " is not a DRAM buffer");
    }
  }
  QBC_RETURN_IF_ERROR(check_tables(b));
  QBC_RETURN_IF_ERROR(check_program(b, m, m.prefill, isa::Phase::kPrefill, &layout.loop_vars[0]));
  QBC_RETURN_IF_ERROR(check_program(b, m, m.decode, isa::Phase::kDecode, &layout.loop_vars[1]));
  if (m.has_span()) {
    if (b.kind != isa::BundleKind::kDecoder || m.span.max_seq != m.prefill.max_seq)
      return invalid_argument("span program: max_seq ", m.span.max_seq, " (the prefill's ",
                              m.prefill.max_seq, ") in a ",
                              b.kind == isa::BundleKind::kDecoder ? "decoder" : "feature bundle");
    QBC_RETURN_IF_ERROR(check_program(b, m, m.span, isa::Phase::kSpan, &layout.loop_vars[2]));
  }
  return layout;
}

}  // namespace qbc::runtime
