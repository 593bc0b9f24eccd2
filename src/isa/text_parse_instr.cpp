// One instruction line of the NPU program text form, parsed back (see text_parser.h). The
// Ref and Expr fields come from op_fields.h's lists; the scalar fields (integers, numbers,
// flags, enums, table indices) are named in ScalarLister below, the one place that maps
// the text's field names to the other fields of each op. An ISA table (issue 24,
// deliverable 4) can replace that lister with its rows.
#include <cstring>
#include <utility>

#include "op_fields.h"
#include "text_parse.h"

namespace qbc::isa::text {
namespace {

/// A scalar field: its name and how to read it into the op.
struct Scalar {
  enum Kind { kI64, kI32, kF32, kF64, kBool, kIndex, kLoopVar, kEnum };
  const char* name;
  Kind kind;
  void* ptr;
  /// kEnum: the printed name of value v (nullptr past the last value); the field is a uint8_t
  /// enum.
  const char* (*enum_name)(int v) = nullptr;
};

template <typename E, const char* (*Name)(E), int N>
const char* name_of(int v) {
  return v < N ? Name(static_cast<E>(v)) : nullptr;
}
const char* max_mode_name(int v) {
  const char* names[] = {"none", "init", "update"};
  return v < 3 ? names[v] : nullptr;
}
const char* merge_name(int v) {
  const char* names[] = {"max", "sum"};
  return v < 2 ? names[v] : nullptr;
}
constexpr auto kDType = name_of<DType, dtype_name, 8>;
constexpr auto kQuantMode = name_of<QuantMode, quant_mode_name, 4>;
constexpr auto kElt = name_of<EltOp, elt_name, 5>;

/// The scalar fields of each op, by the names text.cpp prints them with.
struct ScalarLister {
  std::vector<Scalar> out;
  void i64(const char* n, int64_t& v) { out.push_back({n, Scalar::kI64, &v}); }
  void i32(const char* n, int32_t& v) { out.push_back({n, Scalar::kI32, &v}); }
  void f32(const char* n, float& v) { out.push_back({n, Scalar::kF32, &v}); }
  void f64(const char* n, double& v) { out.push_back({n, Scalar::kF64, &v}); }
  void flag(const char* n, bool& v) { out.push_back({n, Scalar::kBool, &v}); }
  void idx(const char* n, int32_t& v) { out.push_back({n, Scalar::kIndex, &v}); }
  template <typename E>
  void en(const char* n, E& v, const char* (*names)(int)) {
    static_assert(sizeof(E) == 1, "enum fields are uint8_t");
    out.push_back({n, Scalar::kEnum, &v, names});
  }

  void operator()(Loop& l) {
    out.push_back({"var", Scalar::kLoopVar, &l.var});
    i32("body", l.body);
  }
  void operator()(Barrier& b) {
    i32("id", b.id);
    i32("cores", b.cores);
  }
  void operator()(Dma& d) {
    for (auto [n, p] : {std::pair{"row_bytes", &d.row_bytes},
                        {"dst_stride", &d.dst_stride},
                        {"src_stride", &d.src_stride},
                        {"ring_rows", &d.ring_rows},
                        {"ring_stride", &d.ring_stride}})
      i64(n, *p);
  }
  void operator()(Quantize& q) {
    i64("k", q.k);
    i32("bits", q.bits);
    en("mode", q.mode, kQuantMode);
    f32("static_scale", q.static_scale);
    i32("static_zero", q.static_zero);
  }
  void operator()(MatMul& m) {
    for (auto [n, p] : {std::pair{"n", &m.n}, {"kt", &m.kt}, {"ldx", &m.ldx}, {"group", &m.group}})
      i64(n, *p);
    en("xtype", m.xtype, kDType);
    en("wtype", m.wtype, kDType);
    en("acctype", m.acctype, kDType);
    flag("accumulate", m.accumulate);
  }
  void operator()(Requant& r) {
    for (auto [n, p] :
         {std::pair{"n", &r.n}, {"gt", &r.gt}, {"ws_stride", &r.ws_stride}, {"ldy", &r.ldy}})
      i64(n, *p);
    en("acctype", r.acctype, kDType);
    en("ytype", r.ytype, kDType);
    flag("first", r.first);
    flag("last", r.last);
  }
  void operator()(RmsNorm& n) {
    i64("width", n.width);
    i64("group", n.group);
    f64("eps", n.eps);
    f64("unit_offset", n.unit_offset);
  }
  void operator()(Rope& r) { idx("rope", r.rope); }
  void operator()(Eltwise& e) {
    en("op", e.op, kElt);
    i64("width", e.width);
    f32("factor", e.factor);
    en("type", e.type, kDType);
  }
  void operator()(KvQuant& k) { idx("attn", k.attn); }
  void operator()(QueryPrep& q) {
    i64("kv_head", q.kv_head);
    idx("attn", q.attn);
  }
  void operator()(QkScores& s) {
    i64("bc", s.bc);
    i64("kv_head", s.kv_head);
    en("max", s.max_mode, max_mode_name);
    idx("attn", s.attn);
  }
  void operator()(ExpAccum& e) {
    i64("bc", e.bc);
    flag("first", e.first);
    idx("attn", e.attn);
  }
  void operator()(Merge& m) {
    en("op", m.op, merge_name);
    i64("parts_count", m.parts_count);
    i64("count", m.count);
    i64("part_stride", m.part_stride);
  }
  void operator()(AttnOut& o) {
    i64("kv_head", o.kv_head);
    idx("attn", o.attn);
  }
  void operator()(Fill& f) {
    en("type", f.type, kDType);
    f64("value", f.value);
  }
};

Status read_scalar(Cursor& c, const Scalar& s) {
  switch (s.kind) {
    case Scalar::kI64:
      return c.integer(static_cast<int64_t*>(s.ptr));
    case Scalar::kI32:
      return c.int32(static_cast<int32_t*>(s.ptr));
    case Scalar::kF32:
      return c.real(static_cast<float*>(s.ptr));
    case Scalar::kF64:
      return c.real(static_cast<double*>(s.ptr));
    case Scalar::kBool:
      return c.boolean(static_cast<bool*>(s.ptr));
    case Scalar::kIndex:
      return c.index(static_cast<int32_t*>(s.ptr));
    case Scalar::kLoopVar:
      QBC_RETURN_IF_ERROR(c.expect("i"));
      return c.int32(static_cast<int32_t*>(s.ptr));
    case Scalar::kEnum: {
      const size_t at = c.pos();
      const std::string_view w = c.word();
      for (int v = 0; s.enum_name(v) != nullptr; ++v) {
        if (w == s.enum_name(v)) {
          *static_cast<uint8_t*>(s.ptr) = static_cast<uint8_t>(v);
          return ok_status();
        }
      }
      return c.error_at(at, std::string("unknown ") + s.name + " value");
    }
  }
  return c.error("unreadable field");
}

/// A default-constructed op of the alternative whose mnemonic is `name`.
template <size_t... I>
bool make_op(std::string_view name, Op* out, std::index_sequence<I...>) {
  return ((name == op_name(Op(std::in_place_index<I>)) ? (*out = Op(std::in_place_index<I>), true)
                                                       : false) ||
          ...);
}

/// One "name=value" field of `op`: a Ref, an Expr or a scalar.
Status read_field(Cursor& c, const BufferNames& names, const std::string& key, size_t at, Op& op) {
  for (const RefField& f : op_refs(op)) {
    if (key == f.name) return c.ref(names, const_cast<Ref*>(f.ref));
  }
  for (const ExprField& f : op_exprs(op)) {
    if (key == f.name) return c.expr(const_cast<Expr*>(f.expr));
  }
  ScalarLister l;
  std::visit(l, op);
  for (const Scalar& s : l.out) {
    if (key == s.name) return read_scalar(c, s);
  }
  return c.error_at(at, "unknown field '" + key + "' of " + op_name(op));
}

Status read_channels(Cursor& c, uint8_t* mask) {
  const size_t at = c.pos();
  std::string_view w = c.word();
  while (!w.empty()) {
    const size_t comma = w.find(',');
    const std::string_view one = w.substr(0, comma);
    int found = -1;
    for (int ch = 0; ch < kNumChannels; ++ch) {
      if (one == channel_name(static_cast<Channel>(ch))) found = ch;
    }
    if (found < 0) return c.error_at(at, "unknown token channel '" + std::string(one) + "'");
    *mask = static_cast<uint8_t>(*mask | 1u << found);
    w = comma == std::string_view::npos ? std::string_view() : w.substr(comma + 1);
  }
  return ok_status();
}

/// The "; node  (pass)  wait=... signal=..." notes after an instruction.
Status read_notes(Cursor& c, ParsedInstr* out) {
  std::string_view rest = c.rest();
  while (!rest.empty()) {
    size_t end = rest.find("  ");
    std::string_view note = rest.substr(0, end);
    if (note.rfind("wait=", 0) == 0 || note.rfind("signal=", 0) == 0) {
      const std::string s(note);
      Cursor t(s, c.line(), c.label());
      std::string k;
      while (t.key(&k)) {
        if (k != "wait" && k != "signal") return t.error("expected wait= or signal=");
        QBC_RETURN_IF_ERROR(read_channels(t, k == "wait" ? &out->instr.wait : &out->instr.signal));
      }
      QBC_RETURN_IF_ERROR(t.expect_end());
    } else if (note.size() >= 2 && note.front() == '(' && note.back() == ')') {
      out->pass = std::string(note.substr(1, note.size() - 2));
    } else {
      out->node = std::string(note);
    }
    rest = end == std::string_view::npos ? std::string_view() : rest.substr(end + 2);
  }
  return ok_status();
}

}  // namespace

Status parse_instr(Cursor& c, const BufferNames& names, ParsedInstr* out) {
  int64_t index = 0;
  QBC_RETURN_IF_ERROR(c.integer(&index));
  const size_t queue_at = (c.skip_spaces(), c.pos());
  const std::string_view queue = c.word();
  const size_t op_at = (c.skip_spaces(), c.pos());
  const std::string_view mnemonic = c.word();
  if (!make_op(mnemonic, &out->instr.op, std::make_index_sequence<std::variant_size_v<Op>>())) {
    return c.error_at(op_at, "unknown instruction '" + std::string(mnemonic) + "'");
  }
  bool queue_ok = queue == "-" && std::holds_alternative<Loop>(out->instr.op);
  for (int q = 0; q < kNumQueues && !queue_ok; ++q) {
    if (queue == queue_name(static_cast<Queue>(q))) {
      out->instr.queue = static_cast<Queue>(q);
      queue_ok = !std::holds_alternative<Loop>(out->instr.op);
    }
  }
  if (!queue_ok) return c.error_at(queue_at, "expected a queue (ld, cmp, st; '-' for a loop)");
  bool ldx_given = false;
  std::string key;
  for (;;) {
    const size_t at = (c.skip_spaces(), c.pos());
    if (!c.key(&key)) break;
    ldx_given |= key == "ldx";
    QBC_RETURN_IF_ERROR(read_field(c, names, key, at, out->instr.op));
  }
  // The printer leaves out a MatMul's ldx when it equals kt.
  if (MatMul* m = std::get_if<MatMul>(&out->instr.op); m != nullptr && !ldx_given) m->ldx = m->kt;
  if (c.accept(";")) return read_notes(c, out);
  return c.expect_end();
}

}  // namespace qbc::isa::text
