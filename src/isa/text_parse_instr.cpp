// One instruction line of the NPU program text form, parsed back (see text_parser.h). The
// Ref and Expr fields come from op_fields.h's lists; the scalar fields (integers, numbers,
// flags, enums, table indices) from each op's row in qbc/isa/ops.h, the same row the printer
// reads, so a new instruction needs nothing here.
#include <cstring>
#include <functional>
#include <type_traits>
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
  std::function<const char*(int)> enum_name = nullptr;
};

/// The scalar fields of an op (every field of its ops.h row but references and expressions),
/// by the names the printer (text.cpp, from the same row) shows them with.
struct ScalarLister {
  std::vector<Scalar> out;
  template <class T>
  void operator()(T& op) {
    for_each_field_mut(op, [&](const auto& f, auto& v) {
      using M = std::decay_t<decltype(v)>;
      const char* n = f.spec.name;
      if constexpr (std::is_same_v<M, Ref> || std::is_same_v<M, Expr>) {
        return;  // op_refs / op_exprs
      } else if constexpr (std::is_same_v<M, bool>) {
        out.push_back({n, Scalar::kBool, &v});
      } else if constexpr (std::is_same_v<M, float>) {
        out.push_back({n, Scalar::kF32, &v});
      } else if constexpr (std::is_same_v<M, double>) {
        out.push_back({n, Scalar::kF64, &v});
      } else if constexpr (std::is_enum_v<M>) {
        static_assert(sizeof(M) == 1, "enum fields are uint8_t");
        const auto name_of = f.name_of;
        const int count = static_cast<int>(f.spec.count);
        out.push_back({n, Scalar::kEnum, &v, [name_of, count](int x) -> const char* {
                         return x < count ? name_of(static_cast<M>(x)) : nullptr;
                       }});
      } else if constexpr (std::is_same_v<M, int64_t>) {
        out.push_back({n, Scalar::kI64, &v});
      } else {
        static_assert(std::is_same_v<M, int32_t>, "integer fields are int32_t or int64_t");
        const FieldKind k = f.spec.kind;
        out.push_back({n,
                       k == FieldKind::kLoopVar                         ? Scalar::kLoopVar
                       : k == FieldKind::kAttn || k == FieldKind::kRope ? Scalar::kIndex
                                                                        : Scalar::kI32,
                       &v});
      }
    });
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
