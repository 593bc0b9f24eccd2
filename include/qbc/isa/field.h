// The vocabulary of the instruction table (qbc/isa/ops.h): what kind of value a field of an
// instruction holds, when the text form shows it, which values the verifier accepts, and
// whether a buffer reference is read or written. One row per instruction lists its fields
// in this vocabulary; the printer, the verifier's field checks (V1, V8), the MXQ codec and
// the runtime's operand checks read the rows instead of naming each op's fields by hand.
#pragma once

#include <cstdint>
#include <tuple>
#include <type_traits>
#include <utility>

#include "qbc/isa/types.h"

namespace qbc::isa {

/// What a field holds. The kind fixes the text form, the MXQ encoding and the checks.
enum class FieldKind : uint8_t {
  kRef,      ///< a buffer reference (Ref), text "%name[+offset]"
  kExpr,     ///< an Expr of runtime values and loop variables: a count or position (>= 0)
  kInt,      ///< an integer (int32_t or int64_t)
  kEnum,     ///< an enum value, text by name
  kBool,     ///< text "true" / "false"
  kReal,     ///< float or double
  kLoopVar,  ///< Loop::var, text "i<n>"
  kAttn,     ///< an index of Bundle::attentions, text "#<n>"
  kRope,     ///< an index of Bundle::ropes, text "#<n>"
  kKvHead,   ///< a KV head of the op's attention: 0 <= v < its kv_heads
};
const char* field_kind_name(FieldKind k);

/// Which queue an instruction runs on: kNone for loops (every queue runs its share of the
/// body), kDma for copies (ld from DRAM to SRAM, st back), kCompute for the rest. Compute
/// instructions read and write only their core's SRAM.
enum class QueueClass : uint8_t { kNone, kDma, kCompute };
const char* queue_class_name(QueueClass c);

/// A reference's direction. accesses() gives the bytes; the row says which buffers.
enum class Role : uint8_t { kNone, kIn, kOut, kInOut };
const char* role_name(Role r);

/// When the text form shows a field.
enum class Show : uint8_t {
  kAlways,
  kUnlessDefault,  ///< left out at the op struct's initial value (its initialiser in ops.h)
  kWhen,           ///< shown when the row's predicate holds
};

/// No lower bound: the field is not range-checked by V8 (it is checked by its kind, or free).
inline constexpr int64_t kNoBound = INT64_MIN;

/// The untyped part of a field, the same for every op: enough to print, parse, encode and
/// check it.
struct FieldSpec {
  const char* name = "";  ///< the text form's key and the MXQ message's field name
  FieldKind kind = FieldKind::kInt;
  Show show = Show::kAlways;
  Role role = Role::kNone;  ///< kRef only
  bool optional = false;    ///< kRef: may be unset (buffer -1); see Field::when
  int64_t lo = kNoBound;    ///< kInt: V8's smallest value (the largest is kMaxField)
  uint32_t count = 0;       ///< kEnum: values 0..count-1 are defined
  /// kEnum, kInt: the values the op accepts (V8), in the order messages name them; none: all
  /// (kInt: those of its range).
  uint8_t allowed[4] = {0, 0, 0, 0};
  uint8_t allowed_n = 0;
  bool finite = false;          ///< kReal: V8 wants a finite value
  const char* proto = nullptr;  ///< the MXQ message's field name when it is not `name`
  const char* proto_name() const { return proto ? proto : name; }
  /// Whether V8 accepts value v (kEnum: a defined value, and one of `allowed` if listed).
  bool accepts(int64_t v) const {
    if (kind == FieldKind::kEnum && (v < 0 || v >= count)) return false;
    for (int i = 0; i < allowed_n; ++i) {
      if (allowed[i] == v) return true;
    }
    return allowed_n == 0;
  }
};

/// One field of op T: its spec, its member and the per-op rules that read other fields.
template <class T, class M>
struct Field {
  using Op = T;
  using Member = M;
  FieldSpec spec;
  M T::*member = nullptr;
  /// kRef: the reference is required when this holds (null: required unless spec.optional).
  /// Other kinds with Show::kWhen: the field is shown when this holds.
  bool (*when)(const T&) = nullptr;
  /// kInt: a lower bound that depends on other fields (ldx >= kt), instead of spec.lo.
  int64_t (*lo_of)(const T&) = nullptr;
  /// kEnum: the text name of a value.
  const char* (*name_of)(M) = nullptr;

  constexpr Field unless_default() const {
    Field f = *this;
    f.spec.show = Show::kUnlessDefault;
    return f;
  }
  constexpr Field shown_when(bool (*p)(const T&)) const {
    Field f = *this;
    f.spec.show = Show::kWhen;
    f.when = p;
    return f;
  }
  constexpr Field at_least(int64_t (*lo)(const T&)) const {
    Field f = *this;
    f.lo_of = lo;
    return f;
  }
  constexpr Field finite() const {
    Field f = *this;
    f.spec.finite = true;
    return f;
  }
  /// kEnum, kInt: V8 accepts only these values (at most 4, each below 256).
  template <class... E>
  constexpr Field allow(E... v) const {
    static_assert(sizeof...(E) <= 4);
    Field f = *this;
    f.spec.allowed_n = 0;
    ((f.spec.allowed[f.spec.allowed_n++] = static_cast<uint8_t>(v)), ...);
    return f;
  }
  constexpr Field proto_named(const char* n) const {
    Field f = *this;
    f.spec.proto = n;
    return f;
  }
  /// Whether a reference must be set in `op`.
  bool required(const T& op) const {
    if (when) return when(op);
    return !spec.optional;
  }
  /// Whether the text form shows the field of `op` (references: see the printer).
  bool shown(const T& op) const {
    switch (spec.show) {
      case Show::kAlways:
        return true;
      case Show::kUnlessDefault: {
        static const T kDefault{};
        const M& v = op.*member;
        const M& d = kDefault.*member;
        if constexpr (std::is_same_v<M, Expr>) {
          return !(v.is_const() && d.is_const() && v.constant() == d.constant());
        } else {
          return !(v == d);
        }
      }
      case Show::kWhen:
        return when(op);
    }
    return true;
  }
  /// V8's smallest value of an integer field of `op` (kNoBound: unchecked).
  int64_t lower_bound(const T& op) const { return lo_of ? lo_of(op) : spec.lo; }
};

// Row builders. A row lists its fields in the order of the text form and of the MXQ
// message (field i of the row is field number i + 1 of the message).

/// A reference that must be set.
template <class T>
constexpr Field<T, Ref> ref(const char* name, Ref T::*m, Role role) {
  return Field<T, Ref>{FieldSpec{name, FieldKind::kRef, Show::kAlways, role}, m};
}
/// A reference that may be unset (buffer -1).
template <class T>
constexpr Field<T, Ref> opt_ref(const char* name, Ref T::*m, Role role) {
  Field<T, Ref> f{FieldSpec{name, FieldKind::kRef, Show::kAlways, role}, m};
  f.spec.optional = true;
  return f;
}
/// A reference that must be set when `p` holds (and may be unset otherwise).
template <class T>
constexpr Field<T, Ref> ref_when(const char* name, Ref T::*m, Role role, bool (*p)(const T&)) {
  Field<T, Ref> f = opt_ref(name, m, role);
  f.when = p;
  return f;
}
template <class T>
constexpr Field<T, Expr> expr(const char* name, Expr T::*m) {
  return Field<T, Expr>{FieldSpec{name, FieldKind::kExpr}, m};
}
/// An integer; V8 wants lo <= v <= kMaxField (kNoBound: no check).
template <class T, class I>
constexpr Field<T, I> integer(const char* name, I T::*m, int64_t lo = kNoBound) {
  Field<T, I> f{FieldSpec{name, FieldKind::kInt}, m};
  f.spec.lo = lo;
  return f;
}
/// An enum of `count` values named by `name_of` (V8 accepts all of them unless allow()).
template <class T, class E>
constexpr Field<T, E> enumeration(const char* name, E T::*m, uint32_t count,
                                  const char* (*name_of)(E)) {
  Field<T, E> f{FieldSpec{name, FieldKind::kEnum}, m};
  f.spec.count = count;
  f.name_of = name_of;
  return f;
}
template <class T>
constexpr Field<T, bool> flag(const char* name, bool T::*m) {
  return Field<T, bool>{FieldSpec{name, FieldKind::kBool}, m};
}
template <class T, class R>
constexpr Field<T, R> real(const char* name, R T::*m) {
  return Field<T, R>{FieldSpec{name, FieldKind::kReal}, m};
}
/// An index (kAttn, kRope, kKvHead) or a loop variable (kLoopVar).
template <class T, class I>
constexpr Field<T, I> index(const char* name, I T::*m, FieldKind kind) {
  return Field<T, I>{FieldSpec{name, kind}, m};
}

/// The row of op T (specialised in ops.h): kName, kQueue, kFields (a tuple of Field<T, M>).
template <class T>
struct OpRow;

/// Calls fn(field, value) for every field of `op` in row order (value: const M&).
template <class T, class Fn>
void for_each_field(const T& op, Fn&& fn) {
  std::apply([&](const auto&... f) { (fn(f, op.*(f.member)), ...); }, OpRow<T>::kFields);
}
/// Calls fn(field, value) for every field of `op` in row order (value: M&, to fill it).
template <class T, class Fn>
void for_each_field_mut(T& op, Fn&& fn) {
  std::apply([&](const auto&... f) { (fn(f, op.*(f.member)), ...); }, OpRow<T>::kFields);
}
/// The number of fields in T's row.
template <class T>
constexpr size_t field_count() {
  return std::tuple_size_v<std::decay_t<decltype(OpRow<T>::kFields)>>;
}

}  // namespace qbc::isa
