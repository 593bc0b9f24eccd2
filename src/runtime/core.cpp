// Operand resolution and the attention parameter cache of a core (see core.h).
#include "core.h"

#include <algorithm>
#include <cstring>

#include "values.h"

namespace qbc::runtime {
namespace {

/// Memory for the rotated key offsets of one attention on one core.
constexpr int64_t kKrotCacheBytes = int64_t{1} << 20;

/// Aliases one core keeps at most (each operand access scans them).
constexpr size_t kMaxAliases = 16;

Status outside(const char* what, const isa::Buffer& b, int64_t lo, int64_t hi) {
  return invalid_argument(what, ": bytes [", lo, ", ", hi, ") outside buffer '", b.name, "' (",
                          b.bytes, " bytes)");
}

}  // namespace

StatusOr<int64_t> Core::sram_offset(const isa::Ref& r, int64_t bytes, const char* what) const {
  if (!r.valid()) return invalid_argument(what, ": no buffer");
  const isa::Buffer& b = bundle.buffers[static_cast<size_t>(r.buffer)];
  if (b.space != isa::Space::kSram || b.core != index) {
    return invalid_argument(what, ": buffer '", b.name, "' is not in the SRAM of core ", index);
  }
  const int64_t off = eval(r.offset);
  if (off < 0 || bytes < 0 || off + bytes > b.bytes) return outside(what, b, off, off + bytes);
  return b.offset + off;
}

StatusOr<uint8_t*> Core::sram_at(const isa::Ref& r, int64_t bytes, const char* what) const {
  QBC_ASSIGN_OR_RETURN(const int64_t lo, sram_offset(r, bytes, what));
  if (!data.aliases.empty()) materialize(lo, lo + bytes);
  return sram + lo;
}

StatusOr<const uint8_t*> Core::sram_read(const isa::Ref& r, int64_t bytes, const char* what) const {
  QBC_ASSIGN_OR_RETURN(const int64_t lo, sram_offset(r, bytes, what));
  for (const SramAlias& a : data.aliases) {
    if (lo >= a.lo && lo + bytes <= a.hi && bytes > 0) return a.src + (lo - a.lo);
  }
  if (!data.aliases.empty()) materialize(lo, lo + bytes);
  return sram + lo;
}

StatusOr<const uint8_t*> Core::sram_read_opt(const isa::Ref& r, int64_t bytes,
                                             const char* what) const {
  if (!r.valid()) return static_cast<const uint8_t*>(nullptr);
  return sram_read(r, bytes, what);
}

void Core::cut(int64_t lo, int64_t hi, bool copy) const {
  std::vector<SramAlias>& v = data.aliases;
  const size_t n = v.size();
  for (size_t i = 0; i < n; ++i) {
    SramAlias& a = v[i];
    if (a.hi <= lo || hi <= a.lo) continue;
    const int64_t o0 = std::max(lo, a.lo), o1 = std::min(hi, a.hi);
    if (copy) std::memcpy(sram + o0, a.src + (o0 - a.lo), static_cast<size_t>(o1 - o0));
    // What stays an alias: the parts of `a` before and after [lo, hi).
    const SramAlias before{a.lo, o0, a.src}, after{o1, a.hi, a.src + (o1 - a.lo)};
    a.hi = a.lo;  // emptied; removed below
    if (before.hi > before.lo) v.push_back(before);
    if (after.hi > after.lo) v.push_back(after);
  }
  v.erase(std::remove_if(v.begin(), v.end(), [](const SramAlias& a) { return a.hi <= a.lo; }),
          v.end());
}

void Core::materialize(int64_t lo, int64_t hi) const { cut(lo, hi, true); }

void Core::alias_sram(int64_t lo, int64_t bytes, const uint8_t* src) const {
  cut(lo, lo + bytes, false);  // the range's old bytes are overwritten
  std::vector<SramAlias>& v = data.aliases;
  if (v.size() >= kMaxAliases) {  // a bounded list: the smallest alias becomes SRAM bytes
    auto it = std::min_element(v.begin(), v.end(), [](const SramAlias& a, const SramAlias& b) {
      return a.hi - a.lo < b.hi - b.lo;
    });
    std::memcpy(sram + it->lo, it->src, static_cast<size_t>(it->hi - it->lo));
    v.erase(it);
  }
  v.push_back(SramAlias{lo, lo + bytes, src});
}

StatusOr<uint8_t*> Core::sram_write(const isa::Ref& r, int64_t bytes, const char* what) const {
  QBC_ASSIGN_OR_RETURN(const int64_t lo, sram_offset(r, bytes, what));
  if (!data.aliases.empty()) cut(lo, lo + bytes, false);
  return sram + lo;
}

StatusOr<uint8_t*> Core::sram_opt(const isa::Ref& r, int64_t bytes, const char* what) const {
  if (!r.valid()) return static_cast<uint8_t*>(nullptr);
  return sram_at(r, bytes, what);
}

StatusOr<uint8_t*> Core::dram_at(const isa::Ref& r, int64_t lo, int64_t hi,
                                 const char* what) const {
  if (!r.valid()) return invalid_argument(what, ": no buffer");
  const isa::Buffer& b = bundle.buffers[static_cast<size_t>(r.buffer)];
  if (b.space != isa::Space::kDram) {
    return invalid_argument(what, ": buffer '", b.name, "' is not a DRAM buffer");
  }
  const int64_t off = eval(r.offset);
  if (off + lo < 0 || off + hi > b.bytes) return outside(what, b, off + lo, off + hi);
  return dram.at(b.offset + static_cast<int64_t>(slot) * b.slot_stride, b.bytes) + off;
}

StatusOr<int64_t> Core::count(const isa::Expr& e, const char* what) const {
  const int64_t v = eval(e);
  if (v < 0) return invalid_argument(what, " = ", v, " (", e.to_string(), ") is negative");
  return v;
}

StatusOr<const numerics::Attention*> Core::attention(int32_t attn, const isa::Ref& params) {
  const isa::AttnDesc& d = bundle.attentions[static_cast<size_t>(attn)];
  const int64_t kvw = d.kv_heads * d.head_dim;
  const int64_t floats = isa::attn_params_floats(d.heads, d.kv_heads, d.head_dim);
  QBC_ASSIGN_OR_RETURN(const uint8_t* p, sram_read(params, 4 * floats, "params"));
  AttnEntry& e = data.attentions[static_cast<size_t>(attn)];
  if (e.valid && std::memcmp(e.raw.data(), p, e.raw.size()) == 0) return &e.attn;
  e.raw.assign(p, p + 4 * floats);
  numerics::Attention& a = e.attn;
  a = numerics::Attention();
  a.heads = d.heads;
  a.kv_heads = d.kv_heads;
  a.head_dim = d.head_dim;
  a.window = d.window;
  a.max_cache = d.capacity;
  a.scale = d.scale;
  a.softcap = d.softcap;
  a.quantized = true;
  a.k_bits = d.k_bits;
  a.v_bits = d.v_bits;
  a.p_bits = d.p_bits;
  a.q_dynamic = d.q_dynamic;
  a.k_token_scale = d.k_token_scale;
  a.qk_hadamard = d.qk_hadamard;
  a.k_asym = d.k_asym;
  a.v_token_scale = d.v_token_scale;
  a.k_group = d.k_group;
  auto take = [&](std::vector<float>* dst, int64_t n) {
    dst->resize(static_cast<size_t>(n));
    load(p, n, dst->data());
    p += 4 * n;
  };
  take(&a.q_scale, d.heads);
  take(&a.k_scale, kvw);
  take(&a.v_scale, kvw);
  take(&a.k_offset, kvw);
  take(&a.v_offset, kvw);
  std::vector<float> rot;
  take(&rot, kvw);
  if (d.rotating) {
    a.k_rot_offset = std::move(rot);
    a.k_rope = decoded.ropes[static_cast<size_t>(d.k_rope)];
  }
  // A bounded cache: about kKrotCacheBytes per attention, at most one slot per position.
  const int64_t row_bytes = 4 * std::max<int64_t>(kvw, 1);
  e.krot = KrotCache();
  if (d.rotating) {
    e.krot.slots = std::max<int64_t>(
        1, std::min(std::max<int64_t>(d.capacity, 1), kKrotCacheBytes / row_bytes));
    e.krot.pos.assign(static_cast<size_t>(e.krot.slots), -1);
    e.krot.rows.assign(static_cast<size_t>(e.krot.slots * kvw), 0.0f);
  }
  e.valid = true;
  return &e.attn;
}

const float* Core::rotated_key_offset(int32_t attn, int64_t pos) {
  AttnEntry& e = data.attentions[static_cast<size_t>(attn)];
  KrotCache& k = e.krot;
  const int64_t kvw = e.attn.kv_heads * e.attn.head_dim;
  const int64_t slot = pos % k.slots;
  float* row = k.rows.data() + slot * kvw;
  if (k.pos[static_cast<size_t>(slot)] != pos) {
    numerics::rotated_key_offset(e.attn, pos, row);
    k.pos[static_cast<size_t>(slot)] = pos;
  }
  return row;
}

}  // namespace qbc::runtime
