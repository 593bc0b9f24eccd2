// The text form of NPU programs (see qbc/isa/text.h and docs/npu.md "Text form"). Fields
// print as name=value in the order of the op's row in the instruction table (qbc/isa/ops.h);
// an optional reference that is not set and a field its row's Show rule hides (most often an
// option at the op struct's initial value) are left out.
#include "qbc/isa/text.h"

#include <algorithm>
#include <charconv>
#include <sstream>
#include <type_traits>

#include "qbc/isa/domain.h"

namespace qbc::isa {
namespace {

std::string num(double v) {
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), v);
  return std::string(buf, end);
}
std::string num(float v) {
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), v);
  return std::string(buf, end);
}
std::string num(int64_t v) { return std::to_string(v); }

std::string pad(std::string s, size_t width) {
  if (s.size() < width) s.append(width - s.size(), ' ');
  return s;
}

std::string ref_text(const Bundle& b, const Ref& r) {
  if (r.buffer < 0) return "-";
  const std::string name = static_cast<size_t>(r.buffer) < b.buffers.size()
                               ? b.buffers[static_cast<size_t>(r.buffer)].name
                               : "#" + std::to_string(r.buffer);
  const std::string off = r.offset.is_const() ? r.offset.to_string() : " " + r.offset.to_string();
  return "%" + name + "[+" + off + "]";
}

/// The text of a field value that is not a reference (see FieldKind).
template <class F, class M>
std::string value_text(const F& field, const M& v) {
  if constexpr (std::is_same_v<M, Expr>) {
    return v.to_string();
  } else if constexpr (std::is_same_v<M, bool>) {
    return v ? "true" : "false";
  } else if constexpr (std::is_floating_point_v<M>) {
    return num(v);
  } else if constexpr (std::is_enum_v<M>) {
    return field.name_of(v);
  } else {
    switch (field.spec.kind) {
      case FieldKind::kLoopVar:
        return "i" + std::to_string(v);
      case FieldKind::kAttn:
      case FieldKind::kRope:
        return "#" + std::to_string(v);
      default:
        return num(static_cast<int64_t>(v));
    }
  }
}

/// " name=value" for every field of `op` the text form shows, in row order: a reference
/// unless it is optional and unset, other fields by their row's Show rule.
template <class T>
std::string fields_text(const Bundle& b, const T& op) {
  std::string out;
  for_each_field(op, [&](const auto& f, const auto& v) {
    using M = std::decay_t<decltype(v)>;
    std::string text;
    if constexpr (std::is_same_v<M, Ref>) {
      if (v.buffer < 0 && !f.required(op)) return;
      text = ref_text(b, v);
    } else {
      if (!f.shown(op)) return;
      text = value_text(f, v);
    }
    out += out.empty() ? "" : " ";
    out += std::string(f.spec.name) + "=" + text;
  });
  return out;
}

std::string channels(uint8_t mask) {
  std::string s;
  for (int c = 0; c < kNumChannels; ++c) {
    if (mask >> c & 1) {
      s += (s.empty() ? "" : ",") + std::string(channel_name(static_cast<Channel>(c)));
    }
  }
  return s;
}

std::string queue_text(const Instr& in) {
  if (std::holds_alternative<Loop>(in.op)) return "-";
  return static_cast<int>(in.queue) < kNumQueues ? queue_name(in.queue) : "?";
}

void print_stream(std::ostringstream& os, const Bundle& b, const CoreProgram& cp,
                  const PrintOptions& opts, const std::string& indent) {
  os << indent << "core " << cp.core << " (" << cp.code.size() << " instructions)\n";
  StreamShape shape;
  const bool nested = build_shape(cp.code, &shape).empty();
  const size_t width = std::to_string(cp.code.empty() ? 0 : cp.code.size() - 1).size();
  for (size_t i = 0; i < cp.code.size(); ++i) {
    const Instr& in = cp.code[i];
    std::string idx = std::to_string(i);
    idx.insert(0, width - idx.size(), ' ');
    const int depth = nested ? shape.depth[i] : 0;
    std::string line = indent + "  " + idx + " " +
                       std::string(2 * static_cast<size_t>(depth), ' ') + pad(queue_text(in), 4) +
                       " " + print_instr(b, in);
    std::vector<std::string> notes;
    if (opts.debug_info && in.node >= 0) {
      notes.push_back(static_cast<size_t>(in.node) < b.nodes.size()
                          ? b.nodes[static_cast<size_t>(in.node)]
                          : "node#" + std::to_string(in.node));
    }
    if (opts.debug_info && in.pass >= 0) {
      notes.push_back("(" +
                      (static_cast<size_t>(in.pass) < b.passes.size()
                           ? b.passes[static_cast<size_t>(in.pass)]
                           : "pass#" + std::to_string(in.pass)) +
                      ")");
    }
    if (opts.tokens && (in.wait || in.signal)) {
      std::string t = in.wait ? "wait=" + channels(in.wait) : "";
      if (in.signal) t += (t.empty() ? "" : " ") + std::string("signal=") + channels(in.signal);
      notes.push_back(t);
    }
    for (size_t k = 0; k < notes.size(); ++k) line += (k ? "  " : "   ; ") + notes[k];
    os << line << "\n";
  }
}

void print_program_at(std::ostringstream& os, const Bundle& b, const Program& p,
                      const PrintOptions& opts, const std::string& indent) {
  os << indent << phase_name(p.phase) << " max_seq=" << p.max_seq << "\n";
  for (const CoreProgram& cp : p.cores) print_stream(os, b, cp, opts, indent + "  ");
}

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

template <typename T>
std::string list_text(const std::vector<T>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + num(v[i]);
  return s + "]";
}

void print_tables(std::ostringstream& os, const Bundle& b) {
  const auto bname = [&](int32_t id) {
    if (id < 0) return std::string("-");
    return static_cast<size_t>(id) < b.buffers.size()
               ? "%" + b.buffers[static_cast<size_t>(id)].name
               : "#" + std::to_string(id);
  };
  os << "bundle target=" << (b.target.empty() ? "-" : b.target) << " cores=" << b.target_cores
     << " sram_bytes=" << b.sram_bytes << " dram_bytes=" << b.dram_bytes
     << " dma_align=" << b.dma_align << "\n";
  os << "model hidden=" << b.hidden << " vocab=" << b.vocab << " max_cache=" << b.max_cache
     << " chunk=" << b.chunk << " batch=" << b.batch << " embed_rows=" << b.embed_rows
     << " input=" << bname(b.input) << " output=" << bname(b.output) << "\n";
  if (b.rope_inputs.present()) {  // M-RoPE models only: text models print as before
    const RopeInputs& ri = b.rope_inputs;
    os << "rope_inputs cos=" << bname(ri.cos) << " sin=" << bname(ri.sin)
       << " head_dim=" << ri.head_dim << " theta=" << num(ri.theta) << " section=[" << ri.section[0]
       << ", " << ri.section[1] << ", " << ri.section[2] << "]"
       << (ri.interleaved ? " interleaved" : "") << "\n";
  }
  if (!b.deepstack.empty()) {  // Qwen3-VL only: other models print as before
    os << "deepstack";
    for (int32_t id : b.deepstack) os << " " << bname(id);
    os << "\n";
  }
  os << "image base=" << b.image_base << " bytes=" << b.image_size() << "\n";
  os << "dram weights=" << b.dram.weights << " kv=" << b.dram.kv
     << " activations=" << b.dram.activations << " scratch=" << b.dram.scratch
     << " io=" << b.dram.io << " reserve=" << b.dram.reserve << " total=" << b.dram.total() << "\n";
  os << "debug nodes=" << b.nodes.size() << " passes=" << b.passes.size() << "\n";

  os << "\nbuffers (" << b.buffers.size() << ")\n";
  std::vector<std::vector<std::string>> rows;
  for (const Buffer& buf : b.buffers) {
    const bool sram = buf.space == Space::kSram;
    rows.push_back({"%" + buf.name, sram ? "sram" : "dram",
                    sram ? "core=" + std::to_string(buf.core) : "-", purpose_name(buf.purpose),
                    dtype_name(buf.dtype), "offset=" + std::to_string(buf.offset),
                    "bytes=" + std::to_string(buf.bytes),
                    buf.slot_stride ? "slot_stride=" + std::to_string(buf.slot_stride) : "",
                    "shape=" + shape_text(buf.shape)});
  }
  std::vector<size_t> widths(9, 0);
  for (const auto& r : rows) {
    for (size_t c = 0; c < r.size(); ++c) widths[c] = std::max(widths[c], r[c].size());
  }
  for (const auto& r : rows) {
    std::string line = " ";
    for (size_t c = 0; c < r.size(); ++c) {
      if (widths[c] == 0) continue;
      line += " " + (c + 1 < r.size() ? pad(r[c], widths[c]) : r[c]);
    }
    os << line << "\n";
  }

  os << "\nattentions (" << b.attentions.size() << ")\n";
  for (size_t i = 0; i < b.attentions.size(); ++i) {
    const AttnDesc& a = b.attentions[i];
    os << "  #" << i << " heads=" << a.heads << " kv_heads=" << a.kv_heads
       << " head_dim=" << a.head_dim << " window=" << a.window << " capacity=" << a.capacity
       << " scale=" << num(a.scale) << " softcap=" << num(a.softcap) << " k_bits=" << a.k_bits
       << " v_bits=" << a.v_bits << " p_bits=" << a.p_bits
       << " q_dynamic=" << (a.q_dynamic ? "true" : "false")
       << " rotating=" << (a.rotating ? "true" : "false") << " k_rope=" << a.k_rope
       << (a.bidirectional ? " bidirectional=true" : "");
    if (a.token_fields()) {  // the KV4 rules; absent from KV8 programs' text
      auto tf = [](bool b) { return b ? "true" : "false"; };
      os << " k_token_scale=" << tf(a.k_token_scale) << " qk_hadamard=" << tf(a.qk_hadamard)
         << " k_group=" << a.k_group << " k_asym=" << tf(a.k_asym)
         << " v_token_scale=" << tf(a.v_token_scale);
    }
    if (a.packed) os << " packed=true";
    os << "\n";
  }
  os << "\nropes (" << b.ropes.size() << ")\n";
  for (size_t i = 0; i < b.ropes.size(); ++i) {
    const RopeDesc& r = b.ropes[i];
    os << "  #" << i << " heads=" << r.heads << " head_dim=" << r.head_dim
       << " rotary_dim=" << r.rotary_dim << " theta=" << num(r.theta)
       << " attention_factor=" << num(r.attention_factor)
       << " dynamic_factor=" << num(r.dynamic_factor)
       << " original_max_positions=" << r.original_max_positions
       << " inv_freq=" << list_text(r.inv_freq) << " long_inv_freq=" << list_text(r.long_inv_freq)
       << "\n";
  }
}

}  // namespace

std::string print_instr(const Bundle& b, const Instr& in) {
  const std::string fields = std::visit([&](const auto& op) { return fields_text(b, op); }, in.op);
  return pad(op_name(in.op), 10) + " " + fields;
}

std::string print_program(const Bundle& b, const Program& p, const PrintOptions& opts) {
  std::ostringstream os;
  print_program_at(os, b, p, opts, "");
  return os.str();
}

std::string print_bundle(const Bundle& b, const PrintOptions& opts) {
  std::ostringstream os;
  if (opts.tables) print_tables(os, b);
  for (size_t m = 0; m < b.modes.size(); ++m) {
    const Mode& mode = b.modes[m];
    os << (opts.tables || m > 0 ? "\n" : "") << "mode " << m << " " << scheme_name(mode.scheme)
       << " cores_per_instance=" << mode.cores_per_instance << " instances=" << mode.instances
       << "\n";
    print_program_at(os, b, mode.prefill, opts, "  ");
    print_program_at(os, b, mode.decode, opts, "  ");
    if (mode.has_span()) print_program_at(os, b, mode.span, opts, "  ");
  }
  return os.str();
}

}  // namespace qbc::isa
