// Instances of every op built from its row in the instruction table alone (qbc/isa/ops.h),
// for the tests that walk the whole table (op_table_test, instr_codec_test): a new row gets
// a sample without editing them. Every field gets a distinct value its row accepts (integers
// powers of two falling along the row, so the rules between fields hold: width before group
// divides, kt before group bounds it; bounds that follow other fields are applied after).
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "qbc/isa/ops.h"
#include "qbc/isa/program.h"

namespace qbc::isa {

/// The tables a sample names: one SRAM buffer, one attention (2 KV heads), one rope.
inline Bundle sample_bundle() {
  Bundle b;
  b.target_cores = 1;
  b.sram_bytes = int64_t{1} << 30;
  Buffer s;
  s.name = "s";
  s.space = Space::kSram;
  s.core = 0;
  s.purpose = Purpose::kSram;
  s.bytes = b.sram_bytes;
  b.buffers.push_back(s);
  AttnDesc a;
  a.heads = 4;
  a.kv_heads = 2;
  a.head_dim = 8;
  b.attentions.push_back(a);
  RopeDesc r;
  r.heads = 4;
  r.head_dim = 8;
  r.rotary_dim = 8;
  r.inv_freq = {1.0, 0.5, 0.25, 0.125};
  b.ropes.push_back(r);
  return b;
}

template <class T>
T sample_op() {
  T op;
  int i = 0;
  for_each_field_mut(op, [&](const auto& f, auto& v) {
    using M = std::decay_t<decltype(v)>;
    ++i;
    if constexpr (std::is_same_v<M, Ref>) {
      v = Ref{0, Expr(int64_t{16} * i)};
    } else if constexpr (std::is_same_v<M, Expr>) {
      v = Expr(int64_t{i});
    } else if constexpr (std::is_same_v<M, bool>) {
      v = !v;
    } else if constexpr (std::is_floating_point_v<M>) {
      v = static_cast<M>(0.25 * i);
    } else if constexpr (std::is_enum_v<M>) {
      const uint32_t last =
          f.spec.allowed_n ? f.spec.allowed[f.spec.allowed_n - 1] : f.spec.count - 1;
      v = static_cast<M>(last);
    } else if (f.spec.kind == FieldKind::kKvHead) {
      v = 1;
    } else if (f.spec.kind != FieldKind::kInt) {
      v = 0;
    } else if (f.spec.allowed_n > 0) {
      v = static_cast<M>(f.spec.allowed[f.spec.allowed_n - 1]);
    } else {
      v = static_cast<M>(int64_t{1} << (24 - i));
    }
  });
  for_each_field_mut(op, [&](const auto& f, auto& v) {
    using M = std::decay_t<decltype(v)>;
    if constexpr (std::is_integral_v<M> && !std::is_same_v<M, bool>) {
      if (f.lo_of != nullptr && v < f.lo_of(op)) v = static_cast<M>(f.lo_of(op));
    }
  });
  return op;
}

/// Sets v (field f of op) to a value its row refuses; false when the row does not constrain
/// it (references and expressions are checked against the program, not the row).
template <class F, class T, class M>
bool break_field(const F& f, const T& op, M& v) {
  if constexpr (std::is_same_v<M, Ref> || std::is_same_v<M, Expr> || std::is_same_v<M, bool>) {
    return false;
  } else if constexpr (std::is_floating_point_v<M>) {
    if (!f.spec.finite) return false;
    v = std::numeric_limits<M>::quiet_NaN();
    return true;
  } else if constexpr (std::is_enum_v<M>) {
    uint32_t bad = f.spec.count;  // undefined
    for (uint32_t c = 0; c < f.spec.count; ++c) {
      if (!f.spec.accepts(c)) bad = c;
    }
    v = static_cast<M>(bad);
    return true;
  } else {
    switch (f.spec.kind) {
      case FieldKind::kAttn:
      case FieldKind::kRope:
        v = 5;
        return true;
      case FieldKind::kKvHead:
        v = 2;
        return true;
      case FieldKind::kInt:
        if (f.spec.allowed_n > 0) {
          v = static_cast<M>(f.spec.allowed[0] + 1);
          return true;
        }
        if (f.lower_bound(op) == kNoBound) return false;
        v = static_cast<M>(f.lower_bound(op) - 1);
        return true;
      default:
        return false;
    }
  }
}

}  // namespace qbc::isa
