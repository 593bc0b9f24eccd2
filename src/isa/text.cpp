// The text form of NPU programs (see qbc/isa/text.h and docs/npu.md "Text form"). Fields
// print as name=value in a fixed order per op; an optional reference that is not set and an
// option at its default value (the op struct's initialiser in program.h) are left out.
#include "qbc/isa/text.h"

#include <algorithm>
#include <charconv>
#include <sstream>

#include "op_fields.h"
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

/// Collects " name=value" fields of one instruction.
class Fields {
 public:
  explicit Fields(const Bundle& b) : b_(b) {}
  void ref(const char* name, const Ref& r, bool required) {
    if (r.buffer < 0 && !required) return;
    add(name, ref_text(b_, r));
  }
  void expr(const char* name, const Expr& e) { add(name, e.to_string()); }
  void expr_unless(const char* name, const Expr& e, int64_t dflt) {
    if (!(e.is_const() && e.constant() == dflt)) expr(name, e);
  }
  void add(const char* name, const std::string& value) {
    out_ += out_.empty() ? "" : " ";
    out_ += std::string(name) + "=" + value;
  }
  void i(const char* name, int64_t v) { add(name, num(v)); }
  void i_unless(const char* name, int64_t v, int64_t dflt) {
    if (v != dflt) i(name, v);
  }
  void flag_unless(const char* name, bool v, bool dflt) {
    if (v != dflt) add(name, v ? "true" : "false");
  }
  /// All Ref fields of `op` in op_fields order.
  void refs(const Op& op) {
    for (const RefField& f : op_refs(op)) ref(f.name, *f.ref, f.required);
  }
  const std::string& str() const { return out_; }

 private:
  const Bundle& b_;
  std::string out_;
};

std::string attn(int32_t a) { return "#" + std::to_string(a); }

struct OpPrinter {
  Fields& f;
  const Op& op;

  void operator()(const Loop& l) {
    f.add("var", "i" + std::to_string(l.var));
    f.expr("trip", l.trip);
    f.i("body", l.body);
  }
  void operator()(const Barrier& br) {
    f.i("id", br.id);
    f.i("cores", br.cores);
  }
  void operator()(const Dma& d) {
    f.refs(op);
    f.expr("rows", d.rows);
    f.i("row_bytes", d.row_bytes);
    f.i_unless("dst_stride", d.dst_stride, 0);
    f.i_unless("src_stride", d.src_stride, 0);
    if (d.ring_rows > 0 || d.ring_stride != 0) {
      f.i("ring_rows", d.ring_rows);
      f.i("ring_stride", d.ring_stride);
      f.expr("ring_row0", d.ring_row0);
    }
  }
  void operator()(const Quantize& q) {
    f.refs(op);
    f.expr("rows", q.rows);
    f.i("k", q.k);
    f.i("bits", q.bits);
    f.add("mode", quant_mode_name(q.mode));
    if (q.mode == QuantMode::kStaticSymmetric || q.mode == QuantMode::kStaticAffine) {
      f.add("static_scale", num(q.static_scale));
      f.i_unless("static_zero", q.static_zero, 0);
    }
  }
  void operator()(const MatMul& m) {
    f.refs(op);
    f.expr("rows", m.rows);
    f.i("n", m.n);
    f.i("kt", m.kt);
    f.i_unless("ldx", m.ldx, m.kt);
    f.i_unless("group", m.group, 0);
    if (m.xtype != DType::kI8) f.add("xtype", dtype_name(m.xtype));
    if (m.wtype != DType::kI8) f.add("wtype", dtype_name(m.wtype));
    if (m.acctype != DType::kI32) f.add("acctype", dtype_name(m.acctype));
    f.flag_unless("accumulate", m.accumulate, false);
  }
  void operator()(const Requant& r) {
    f.refs(op);
    f.expr("rows", r.rows);
    f.i("n", r.n);
    f.i_unless("gt", r.gt, 1);
    f.i_unless("ws_stride", r.ws_stride, 1);
    if (r.last) f.i("ldy", r.ldy);
    if (r.acctype != DType::kI32) f.add("acctype", dtype_name(r.acctype));
    if (r.ytype != DType::kF16) f.add("ytype", dtype_name(r.ytype));
    f.flag_unless("first", r.first, true);
    f.flag_unless("last", r.last, true);
  }
  void operator()(const RmsNorm& n) {
    f.refs(op);
    f.expr("rows", n.rows);
    f.i("width", n.width);
    f.i_unless("group", n.group, 0);
    f.add("eps", num(n.eps));
    if (n.unit_offset != 0.0) f.add("unit_offset", num(n.unit_offset));
  }
  void operator()(const Rope& r) {
    f.refs(op);
    f.expr("rows", r.rows);
    f.expr("pos0", r.pos0);
    f.expr("freq_pos", r.freq_pos);
    f.add("rope", attn(r.rope));
  }
  void operator()(const Eltwise& e) {
    f.add("op", elt_name(e.op));
    f.refs(op);
    f.expr("rows", e.rows);
    f.i("width", e.width);
    if (e.op == EltOp::kScale || e.op == EltOp::kSoftcap || e.factor != 1.0f) {
      f.add("factor", num(e.factor));
    }
    if (e.type != DType::kF16) f.add("type", dtype_name(e.type));
  }
  void operator()(const KvQuant& k) {
    f.refs(op);
    f.expr("rows", k.rows);
    f.expr("pos0", k.pos0);
    f.add("attn", attn(k.attn));
  }
  void operator()(const QueryPrep& q) {
    f.refs(op);
    f.expr("rows", q.rows);
    f.i("kv_head", q.kv_head);
    f.add("attn", attn(q.attn));
  }
  void operator()(const QkScores& s) {
    f.refs(op);
    f.expr("rows", s.rows);
    f.expr("qpos0", s.qpos0);
    f.expr("kpos0", s.kpos0);
    f.i("bc", s.bc);
    f.i("kv_head", s.kv_head);
    if (s.max_mode != MaxMode::kNone) {
      f.add("max", s.max_mode == MaxMode::kInit ? "init" : "update");
    }
    f.add("attn", attn(s.attn));
  }
  void operator()(const ExpAccum& e) {
    f.refs(op);
    f.expr("rows", e.rows);
    f.i("bc", e.bc);
    f.flag_unless("first", e.first, false);
    f.add("attn", attn(e.attn));
  }
  void operator()(const Merge& m) {
    f.add("op", m.op == MergeOp::kMax ? "max" : "sum");
    f.refs(op);
    f.i("parts_count", m.parts_count);
    f.i("count", m.count);
    f.i_unless("part_stride", m.part_stride, 0);
  }
  void operator()(const AttnOut& o) {
    f.refs(op);
    f.expr("rows", o.rows);
    f.i("kv_head", o.kv_head);
    f.add("attn", attn(o.attn));
  }
  void operator()(const Fill& fl) {
    f.refs(op);
    f.expr("count", fl.count);
    f.add("type", dtype_name(fl.type));
    f.add("value", num(fl.value));
  }
};

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
       << " rotating=" << (a.rotating ? "true" : "false") << " k_rope=" << a.k_rope << "\n";
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
  Fields f(b);
  std::visit(OpPrinter{f, in.op}, in.op);
  return pad(op_name(in.op), 10) + " " + f.str();
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
  }
  return os.str();
}

}  // namespace qbc::isa
