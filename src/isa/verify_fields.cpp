// The verifier's checks of single fields, read from the instruction table (qbc/isa/ops.h):
// V1 (enum values defined, attention and rope indices in their tables) and V8 (integers in
// their row's range, enum values the op accepts, finite reals, KV heads of the op's
// attention, and the rules between fields its row adds).
#include <cmath>
#include <string>
#include <type_traits>

#include "qbc/isa/verify.h"
#include "verify_internal.h"

namespace qbc::isa {
namespace {

std::string num(int64_t v) { return std::to_string(v); }

template <class M>
constexpr bool is_index() {
  return std::is_integral_v<M> && !std::is_same_v<M, bool>;
}

/// V1 on the typed fields of `op`.
template <class T>
std::string fields_v1(const Bundle& b, const T& op) {
  std::string e;
  for_each_field(op, [&](const auto& f, const auto& v) {
    using M = std::decay_t<decltype(v)>;
    if (!e.empty()) return;
    if constexpr (std::is_enum_v<M>) {
      if (static_cast<uint32_t>(v) >= f.spec.count) {
        e = std::string("unknown ") + f.spec.name + " " + num(static_cast<int64_t>(v));
      }
    } else if constexpr (is_index<M>()) {
      const int64_t n = f.spec.kind == FieldKind::kAttn ? static_cast<int64_t>(b.attentions.size())
                        : f.spec.kind == FieldKind::kRope ? static_cast<int64_t>(b.ropes.size())
                                                          : -1;
      if (n < 0 || (v >= 0 && v < n)) return;
      e = std::string(f.spec.kind == FieldKind::kAttn ? "attention " : "rope table ") + num(v) +
          " is not in the table of " + num(n);
    }
  });
  return e;
}

/// "i8 or i16", "4, 8 or 16": the values a field accepts.
template <class F>
std::string accepted_names(const F& f) {
  std::string s;
  const int n = f.spec.allowed_n;
  for (int i = 0; i < n; ++i) {
    using M = typename F::Member;
    s += (i == 0 ? "" : i + 1 == n ? " or " : ", ");
    if constexpr (std::is_enum_v<M>) {
      s += f.name_of(static_cast<M>(f.spec.allowed[i]));
    } else {
      s += num(f.spec.allowed[i]);
    }
  }
  return s;
}

/// The attention an op names (its kAttn field), or -1.
template <class T>
int64_t attention_of(const T& op) {
  int64_t a = -1;
  for_each_field(op, [&](const auto& f, const auto& v) {
    if constexpr (is_index<std::decay_t<decltype(v)>>()) {
      if (f.spec.kind == FieldKind::kAttn) a = v;
    }
  });
  return a;
}

/// V8 on one integer field (kInt against its row's bound, kKvHead against the attention).
template <class T, class F>
std::string int_v8(const Bundle& b, const T& op, const F& f, int64_t v) {
  if (f.spec.kind == FieldKind::kKvHead) {
    const int64_t a = attention_of(op);
    const int64_t kv = a >= 0 ? b.attentions[static_cast<size_t>(a)].kv_heads : 0;
    return v >= 0 && v < kv ? "" : std::string(f.spec.name) + " " + num(v) + " out of range";
  }
  if (!f.spec.accepts(v))
    return std::string(f.spec.name) + " " + num(v) + " is not " + accepted_names(f);
  const int64_t lo = f.spec.kind == FieldKind::kInt ? f.lower_bound(op) : kNoBound;
  if (lo == kNoBound || (v >= lo && v <= kMaxField)) return "";
  return std::string(f.spec.name) + " " + num(v) + " outside [" + num(lo) + ", 2^40]";
}

/// V8 on the typed fields of `op`, then its row's rules.
template <class T>
std::string fields_v8(const Bundle& b, const T& op) {
  std::string e;
  for_each_field(op, [&](const auto& f, const auto& v) {
    using M = std::decay_t<decltype(v)>;
    if (!e.empty()) return;
    if constexpr (std::is_enum_v<M>) {
      if (!f.spec.accepts(static_cast<int64_t>(v))) {
        e = std::string(f.spec.name) + " " + f.name_of(v) + " is not " + accepted_names(f);
      }
    } else if constexpr (std::is_floating_point_v<M>) {
      if (f.spec.finite && !std::isfinite(v)) e = std::string(f.spec.name) + " is not finite";
    } else if constexpr (is_index<M>()) {
      e = int_v8(b, op, f, static_cast<int64_t>(v));
    }
  });
  return e.empty() ? op_rules(op) : e;
}

}  // namespace

std::string check_fields_v1(const Bundle& b, const Op& op) {
  return std::visit([&](const auto& o) { return fields_v1(b, o); }, op);
}

std::string check_fields_v8(const Bundle& b, const Op& op) {
  return std::visit([&](const auto& o) { return fields_v8(b, o); }, op);
}

std::string check_op_fields(const Bundle& b, const Op& op) {
  const std::string e = check_fields_v1(b, op);
  return e.empty() ? check_fields_v8(b, op) : e;
}

}  // namespace qbc::isa
