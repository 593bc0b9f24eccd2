// isa::Bundle <-> MXQ protobuf messages (see qbc/mxq/bundle_codec.h).
#include "qbc/mxq/bundle_codec.h"

#include <cmath>
#include <type_traits>

#include "instr_codec.h"
#include "qbc/isa/verify.h"
#include "qbc/support/quote.h"

namespace qbc::mxq {
namespace {

// ---------------------------------------------------------------------------------------
// Encoding

template <typename E>
uint32_t u(E e) {
  return static_cast<uint32_t>(e);
}

void put_program_desc(const isa::Program& p, pb::ProgramDesc* out) {
  out->set_phase(u(p.phase));
  out->set_max_seq(p.max_seq);
  for (const isa::CoreProgram& c : p.cores) out->add_cores(c.core);
}

// ---------------------------------------------------------------------------------------
// Decoding

constexpr uint32_t kDTypes = 8, kSpaces = 2, kPurposes = 6, kPhases = 3;
/// Every row of the scheme table (include/qbc/isa/schemes.def) decodes.
constexpr uint32_t kSchemes = static_cast<uint32_t>(isa::kSchemeCount);

Status decode_stream(const google::protobuf::RepeatedPtrField<pb::Instr>& in, Reader& r,
                     std::vector<isa::Instr>* out) {
  out->clear();
  out->reserve(static_cast<size_t>(in.size()));
  const std::string base = r.where;
  for (int i = 0; i < in.size(); ++i) {
    r.where = base + ": instruction " + std::to_string(i);
    isa::Instr instr;
    if (!decode_instr(in.Get(i), r, &instr)) return r.status;
    out->push_back(std::move(instr));
  }
  r.where = base;
  return ok_status();
}

Status count_ok(int64_t n, const std::string& where, const char* what) {
  if (n < 0 || n > kMaxTableEntries)
    return data_loss(where, ": ", n, " ", what, " (at most ", kMaxTableEntries, ")");
  return ok_status();
}

/// The rope-table inputs: two DRAM io buffers and a spec the host can compute tables from.
Status decode_rope_inputs(const pb::RopeInputs& p, const std::string& where, isa::Bundle* b) {
  isa::RopeInputs& ri = b->rope_inputs;
  const int64_t nbuf = static_cast<int64_t>(b->buffers.size());
  for (int32_t id : {p.cos(), p.sin()}) {
    if (id < 0 || id >= nbuf || b->buffers[static_cast<size_t>(id)].space != isa::Space::kDram ||
        b->buffers[static_cast<size_t>(id)].purpose != isa::Purpose::kIo)
      return data_loss(where, ": rope_inputs buffer ", id, " is not a DRAM io buffer");
  }
  if (p.cos() == p.sin())
    return data_loss(where, ": rope_inputs cos and sin share buffer ", p.cos());
  if (p.head_dim() < 2 || p.head_dim() % 2 != 0 || p.head_dim() > (int64_t{1} << 20))
    return data_loss(where, ": rope_inputs head_dim ", p.head_dim());
  if (!(p.theta() > 0.0) || !std::isfinite(p.theta()))
    return data_loss(where, ": rope_inputs theta ", p.theta());
  if (p.section_size() != 3)
    return data_loss(where, ": rope_inputs has ", p.section_size(), " sections, not 3");
  int64_t sum = 0;
  for (int i = 0; i < 3; ++i) {
    if (p.section(i) < 0 || p.section(i) > p.head_dim())
      return data_loss(where, ": rope_inputs section ", p.section(i));
    ri.section[i] = p.section(i);
    sum += p.section(i);
  }
  if (sum != p.head_dim() / 2)
    return data_loss(where, ": rope_inputs sections sum to ", sum,
                     ", not head_dim / 2 = ", p.head_dim() / 2);
  ri.cos = p.cos();
  ri.sin = p.sin();
  ri.head_dim = p.head_dim();
  ri.theta = p.theta();
  ri.interleaved = p.interleaved();
  return ok_status();
}

/// The bundle kind and a feature bundle's interface; what the values mean (io buffers large
/// enough for the rows) is isa::verify's V10.
Status decode_features(const pb::Layout& l, const std::string& where, isa::Bundle* b) {
  b->feature_inputs.clear();
  b->output_stride = 0;
  b->output_rows = 0;
  if (l.kind() > 1) return data_loss(where, ": bundle kind ", l.kind(), " (0 decoder, 1 features)");
  b->kind = l.kind() == 1 ? isa::BundleKind::kFeatures : isa::BundleKind::kDecoder;
  if (b->kind == isa::BundleKind::kDecoder) {
    if (l.feature_inputs_size() > 0 || l.output_stride() != 0 || l.output_rows() != 0)
      return data_loss(where,
                       ": a decoder layout with feature inputs or a feature output stride or rows");
    return ok_status();
  }
  if (l.feature_inputs_size() < 1 || l.feature_inputs_size() > 64)
    return data_loss(where, ": a feature bundle with ", l.feature_inputs_size(), " inputs (1..64)");
  for (const pb::FeatureInput& p : l.feature_inputs()) {
    if (p.buffer() < 0 || p.buffer() >= static_cast<int64_t>(b->buffers.size()))
      return data_loss(where, ": feature input ", quote_prefix(p.name()), " names buffer ",
                       p.buffer(), " of ", b->buffers.size());
    b->feature_inputs.push_back(isa::FeatureInput{p.name(), p.buffer(), p.width(), p.stride()});
  }
  b->output_stride = l.output_stride();
  b->output_rows = l.output_rows() == 0 ? b->chunk : l.output_rows();
  return ok_status();
}

}  // namespace

pb::Layout encode_layout(const isa::Bundle& b) {
  pb::Layout l;
  l.set_target(b.target);
  l.set_target_cores(b.target_cores);
  l.set_target_clusters(b.target_clusters);
  l.set_sram_bytes(b.sram_bytes);
  l.set_dram_bytes(b.dram_bytes);
  l.set_dma_align(b.dma_align);
  l.set_hidden(b.hidden);
  l.set_vocab(b.vocab);
  l.set_max_cache(b.max_cache);
  l.set_chunk(b.chunk);
  l.set_batch(b.batch);
  l.set_embed_rows(b.embed_rows);
  for (const isa::Buffer& x : b.buffers) {
    pb::Buffer* p = l.add_buffers();
    p->set_name(x.name);
    p->set_space(u(x.space));
    p->set_core(x.core);
    p->set_purpose(u(x.purpose));
    p->set_dtype(u(x.dtype));
    p->set_offset(x.offset);
    p->set_bytes(x.bytes);
    p->set_slot_stride(x.slot_stride);
    for (int64_t d : x.shape) p->add_shape(d);
    p->set_block(x.block);
  }
  for (const isa::AttnDesc& a : b.attentions) {
    pb::AttnDesc* p = l.add_attentions();
    p->set_heads(a.heads);
    p->set_kv_heads(a.kv_heads);
    p->set_head_dim(a.head_dim);
    p->set_window(a.window);
    p->set_capacity(a.capacity);
    p->set_scale(a.scale);
    p->set_softcap(a.softcap);
    p->set_k_bits(a.k_bits);
    p->set_v_bits(a.v_bits);
    p->set_p_bits(a.p_bits);
    p->set_q_dynamic(a.q_dynamic);
    p->set_rotating(a.rotating);
    p->set_k_rope(a.k_rope);
    p->set_bidirectional(a.bidirectional);
    p->set_k_token_scale(a.k_token_scale);
    p->set_qk_hadamard(a.qk_hadamard);
    p->set_k_asym(a.k_asym);
    p->set_v_token_scale(a.v_token_scale);
    p->set_k_group(a.k_group);
    p->set_packed(a.packed);
  }
  for (const isa::RopeDesc& r : b.ropes) {
    pb::RopeDesc* p = l.add_ropes();
    p->set_heads(r.heads);
    p->set_head_dim(r.head_dim);
    p->set_rotary_dim(r.rotary_dim);
    for (double f : r.inv_freq) p->add_inv_freq(f);
    for (double f : r.long_inv_freq) p->add_long_inv_freq(f);
    p->set_attention_factor(r.attention_factor);
    p->set_dynamic_factor(r.dynamic_factor);
    p->set_theta(r.theta);
    p->set_original_max_positions(r.original_max_positions);
  }
  for (const isa::Mode& m : b.modes) {
    pb::ModeDesc* p = l.add_modes();
    p->set_scheme(u(m.scheme));
    p->set_cores_per_instance(m.cores_per_instance);
    p->set_instances(m.instances);
    put_program_desc(m.prefill, p->mutable_prefill());
    put_program_desc(m.decode, p->mutable_decode());
    if (m.has_span()) put_program_desc(m.span, p->mutable_span());
  }
  l.set_input(b.input);
  l.set_output(b.output);
  if (b.rope_inputs.present()) {
    pb::RopeInputs* ri = l.mutable_rope_inputs();
    ri->set_cos(b.rope_inputs.cos);
    ri->set_sin(b.rope_inputs.sin);
    ri->set_head_dim(b.rope_inputs.head_dim);
    ri->set_theta(b.rope_inputs.theta);
    for (int64_t s : b.rope_inputs.section) ri->add_section(s);
    ri->set_interleaved(b.rope_inputs.interleaved);
  }
  for (int32_t id : b.deepstack) l.add_deepstack(id);
  if (b.kind == isa::BundleKind::kFeatures) {
    l.set_kind(u(b.kind));
    for (const isa::FeatureInput& in : b.feature_inputs) {
      pb::FeatureInput* p = l.add_feature_inputs();
      p->set_name(in.name);
      p->set_buffer(in.buffer);
      p->set_width(in.width);
      p->set_stride(in.stride);
    }
    l.set_output_stride(b.output_stride);
    l.set_output_rows(b.output_rows);
  }
  l.set_image_base(b.image_base);
  l.set_image_bytes(b.image_size());
  pb::DramPlan* d = l.mutable_dram();
  d->set_weights(b.dram.weights);
  d->set_kv(b.dram.kv);
  d->set_activations(b.dram.activations);
  d->set_scratch(b.dram.scratch);
  d->set_io(b.dram.io);
  d->set_reserve(b.dram.reserve);
  l.set_nodes(static_cast<int32_t>(b.nodes.size()));
  l.set_passes(static_cast<int32_t>(b.passes.size()));
  return l;
}

StatusOr<pb::CoreCode> encode_code(const isa::Bundle& b, size_t mode, size_t core) {
  const isa::Mode& m = b.modes.at(mode);
  if (m.prefill.cores.size() != m.decode.cores.size() ||
      (m.has_span() && m.span.cores.size() != m.prefill.cores.size()))
    return invalid_argument("mode ", isa::scheme_name(m.scheme), ": prefill has ",
                            m.prefill.cores.size(), " streams, decode ", m.decode.cores.size(),
                            ", span ", m.span.cores.size());
  pb::CoreCode c;
  c.set_scheme(u(m.scheme));
  c.set_core(static_cast<int32_t>(core));
  for (int phase = 0; phase < (m.has_span() ? 3 : 2); ++phase) {
    const isa::Program& p = phase == 0 ? m.prefill : phase == 1 ? m.decode : m.span;
    auto* out = phase == 0   ? c.mutable_prefill()
                : phase == 1 ? c.mutable_decode()
                             : c.mutable_span();
    out->Reserve(static_cast<int>(p.cores.at(core).code.size()));
    for (const isa::Instr& in : p.cores.at(core).code) {
      encode_instr(in, out->Add());
    }
  }
  return c;
}

pb::Instr encode_table_op(const isa::Instr& in) {
  pb::Instr p;
  encode_instr(in, &p, true);
  return p;
}

pb::DebugMap encode_debug(const isa::Bundle& b) {
  pb::DebugMap d;
  for (const std::string& n : b.nodes) d.add_nodes(n);
  for (const std::string& p : b.passes) d.add_passes(p);
  return d;
}

Status decode_layout(const pb::Layout& l, const std::string& where, isa::Bundle* b) {
  Reader r{where, {}};
  b->target = l.target();
  b->target_cores = l.target_cores();
  b->sram_bytes = l.sram_bytes();
  b->dram_bytes = l.dram_bytes();
  b->dma_align = l.dma_align();
  b->hidden = l.hidden();
  b->vocab = l.vocab();
  b->max_cache = l.max_cache();
  b->chunk = l.chunk();
  b->batch = l.batch();
  b->embed_rows = l.embed_rows();
  if (b->target_cores < 1 || b->target_cores > 1024)
    return data_loss(where, ": target_cores ", b->target_cores);
  b->target_clusters = l.target_clusters() == 0 ? 1 : l.target_clusters();
  if (b->target_clusters < 1 || b->target_cores % b->target_clusters != 0) {
    return data_loss(where, ": target_clusters ", l.target_clusters(), " does not divide the ",
                     b->target_cores, " cores");
  }
  QBC_RETURN_IF_ERROR(count_ok(l.buffers_size(), where, "buffers"));
  b->buffers.clear();
  for (int i = 0; i < l.buffers_size(); ++i) {
    const pb::Buffer& p = l.buffers(i);
    isa::Buffer x;
    r.where = where + ": buffer " + std::to_string(i);
    x.name = p.name();
    x.core = p.core();
    x.offset = p.offset();
    x.bytes = p.bytes();
    x.slot_stride = p.slot_stride();
    x.block = p.block();
    if (p.shape_size() > 8) return data_loss(r.where, ": shape of ", p.shape_size(), " dims");
    x.shape.assign(p.shape().begin(), p.shape().end());
    if (!r.en(p.space(), kSpaces, "space", &x.space) ||
        !r.en(p.purpose(), kPurposes, "purpose", &x.purpose) ||
        !r.en(p.dtype(), kDTypes, "dtype", &x.dtype))
      return r.status;
    b->buffers.push_back(std::move(x));
  }
  QBC_RETURN_IF_ERROR(count_ok(l.attentions_size(), where, "attentions"));
  b->attentions.clear();
  for (const pb::AttnDesc& p : l.attentions()) {
    isa::AttnDesc a;
    a.heads = p.heads();
    a.kv_heads = p.kv_heads();
    a.head_dim = p.head_dim();
    a.window = p.window();
    a.capacity = p.capacity();
    a.scale = p.scale();
    a.softcap = p.softcap();
    a.k_bits = p.k_bits();
    a.v_bits = p.v_bits();
    a.p_bits = p.p_bits();
    a.q_dynamic = p.q_dynamic();
    a.rotating = p.rotating();
    a.k_rope = p.k_rope();
    a.bidirectional = p.bidirectional();
    a.k_token_scale = p.k_token_scale();
    a.qk_hadamard = p.qk_hadamard();
    a.k_asym = p.k_asym();
    a.v_token_scale = p.v_token_scale();
    a.k_group = p.k_group();
    a.packed = p.packed();
    b->attentions.push_back(a);
  }
  QBC_RETURN_IF_ERROR(count_ok(l.ropes_size(), where, "ropes"));
  b->ropes.clear();
  for (const pb::RopeDesc& p : l.ropes()) {
    isa::RopeDesc x;
    x.heads = p.heads();
    x.head_dim = p.head_dim();
    x.rotary_dim = p.rotary_dim();
    x.inv_freq.assign(p.inv_freq().begin(), p.inv_freq().end());
    x.long_inv_freq.assign(p.long_inv_freq().begin(), p.long_inv_freq().end());
    x.attention_factor = p.attention_factor();
    x.dynamic_factor = p.dynamic_factor();
    x.theta = p.theta();
    x.original_max_positions = p.original_max_positions();
    b->ropes.push_back(std::move(x));
  }
  if (l.modes_size() < 1 || l.modes_size() > 16)
    return data_loss(where, ": ", l.modes_size(), " modes (1..16)");
  b->modes.clear();
  for (int i = 0; i < l.modes_size(); ++i) {
    const pb::ModeDesc& p = l.modes(i);
    r.where = where + ": mode " + std::to_string(i);
    isa::Mode m;
    if (!r.en(p.scheme(), kSchemes, "scheme", &m.scheme)) return r.status;
    m.cores_per_instance = p.cores_per_instance();
    m.instances = p.instances();
    if (m.cores_per_instance < 1 || m.cores_per_instance > b->target_cores || m.instances < 1 ||
        m.instances > 1024)
      return data_loss(r.where, ": ", m.cores_per_instance, " cores per instance, ", m.instances,
                       " instances on a ", b->target_cores, "-core target");
    for (int phase = 0; phase < (p.has_span() ? 3 : 2); ++phase) {
      const pb::ProgramDesc& d = phase == 0 ? p.prefill() : phase == 1 ? p.decode() : p.span();
      isa::Program& prog = phase == 0 ? m.prefill : phase == 1 ? m.decode : m.span;
      if (!r.en(d.phase(), kPhases, "phase", &prog.phase)) return r.status;
      if (static_cast<int>(prog.phase) != phase)
        return data_loss(r.where, ": phase ", d.phase(), " in the ",
                         isa::phase_name(static_cast<isa::Phase>(phase)), " slot");
      prog.max_seq = d.max_seq();
      if (d.cores_size() != m.cores_per_instance)
        return data_loss(r.where, ": ", d.cores_size(), " streams for ", m.cores_per_instance,
                         " cores per instance");
      for (int32_t c : d.cores()) prog.cores.push_back(isa::CoreProgram{c, {}});
    }
    b->modes.push_back(std::move(m));
  }
  b->input = l.input();
  b->output = l.output();
  if (l.has_rope_inputs()) QBC_RETURN_IF_ERROR(decode_rope_inputs(l.rope_inputs(), where, b));
  QBC_RETURN_IF_ERROR(decode_features(l, where, b));
  for (int32_t id : l.deepstack()) {
    if (id < 0 || id >= static_cast<int64_t>(b->buffers.size()) ||
        b->buffers[static_cast<size_t>(id)].space != isa::Space::kDram ||
        b->buffers[static_cast<size_t>(id)].purpose != isa::Purpose::kIo)
      return data_loss(where, ": deepstack buffer ", id, " is not a DRAM io buffer");
    b->deepstack.push_back(id);
  }
  b->image_base = l.image_base();
  if (l.image_bytes() < 0 || l.image_bytes() > (int64_t{1} << 40))
    return data_loss(where, ": weight image of ", l.image_bytes(), " bytes");
  const pb::DramPlan& d = l.dram();
  b->dram = isa::DramPlan{d.weights(), d.kv(), d.activations(), d.scratch(), d.io(), d.reserve()};
  if (l.nodes() < 0 || l.passes() < 0) return data_loss(where, ": negative debug counts");
  return ok_status();
}

Status decode_code(const pb::CoreCode& c, size_t mode, size_t core, const std::string& where,
                   isa::Bundle* b) {
  if (mode >= b->modes.size())
    return data_loss(where, ": mode ", mode, " (the layout has ", b->modes.size(), ")");
  isa::Mode& m = b->modes[mode];
  if (c.scheme() != static_cast<uint32_t>(m.scheme))
    return data_loss(where, ": code of scheme ", c.scheme(), " in the section of mode ", mode, " (",
                     isa::scheme_name(m.scheme), ")");
  if (c.core() < 0 || static_cast<size_t>(c.core()) != core || core >= m.prefill.cores.size())
    return data_loss(where, ": stream ", c.core(), " in the section of core ", core);
  if (c.prefill_size() > isa::kMaxStreamInstrs || c.decode_size() > isa::kMaxStreamInstrs ||
      c.span_size() > isa::kMaxStreamInstrs)
    return data_loss(where, ": more than ", isa::kMaxStreamInstrs, " instructions");
  if (c.span_size() > 0 && !m.has_span())
    return data_loss(where, ": span code for a mode without a span program");
  Reader r{where, {}};
  r.where = where + ": prefill";
  QBC_RETURN_IF_ERROR(decode_stream(c.prefill(), r, &m.prefill.cores[core].code));
  r.where = where + ": decode";
  QBC_RETURN_IF_ERROR(decode_stream(c.decode(), r, &m.decode.cores[core].code));
  if (!m.has_span()) return ok_status();
  r.where = where + ": span";
  return decode_stream(c.span(), r, &m.span.cores[core].code);
}

Status decode_debug(const pb::DebugMap& d, const std::string& where, isa::Bundle* b) {
  QBC_RETURN_IF_ERROR(count_ok(d.nodes_size(), where, "node names"));
  QBC_RETURN_IF_ERROR(count_ok(d.passes_size(), where, "pass names"));
  b->nodes.assign(d.nodes().begin(), d.nodes().end());
  b->passes.assign(d.passes().begin(), d.passes().end());
  return ok_status();
}

}  // namespace qbc::mxq
