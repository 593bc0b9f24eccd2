// The NPU program text form read back (see qbc/isa/text_parser.h): the header lines, the
// buffer, attention and rope tables, then per mode its prefill and decode programs, one
// instruction a line (text_parse_instr.cpp). Indentation is not read: a loop's extent is
// its body count.
#include "qbc/isa/text_parser.h"

#include <map>

#include "text_parse.h"

namespace qbc::isa {
namespace {

using text::Cursor;

/// Reads `key=` then an integer, in order.
template <typename T>
Status keyed(Cursor& c, const char* key, T* v) {
  QBC_RETURN_IF_ERROR(c.expect_key(key));
  int64_t x = 0;
  QBC_RETURN_IF_ERROR(c.integer(&x));
  *v = static_cast<T>(x);
  return ok_status();
}

template <typename E>
Status enum_word(Cursor& c, int count, const char* (*name)(E), const char* what, E* out) {
  const size_t at = (c.skip_spaces(), c.pos());
  const std::string_view w = c.word();
  for (int v = 0; v < count; ++v) {
    if (w == name(static_cast<E>(v))) {
      *out = static_cast<E>(v);
      return ok_status();
    }
  }
  return c.error_at(at, std::string("unknown ") + what);
}

class Parser {
 public:
  Parser(const std::string& text, const std::string& label)
      : lines_(text::split_lines(text)), label_(label) {
    names_.buffers = &b_.buffers;
  }

  StatusOr<Bundle> parse() {
    QBC_RETURN_IF_ERROR(header());
    QBC_RETURN_IF_ERROR(buffers());
    QBC_RETURN_IF_ERROR(attentions());
    QBC_RETURN_IF_ERROR(ropes());
    while (skip_blank()) QBC_RETURN_IF_ERROR(mode());
    QBC_RETURN_IF_ERROR(debug_names());
    return std::move(b_);
  }

 private:
  /// The next line as a cursor (an error at the end of the text).
  StatusOr<Cursor> next(const char* expected) {
    if (at_ >= lines_.size()) {
      return invalid_argument(label_, ":", lines_.size() + 1, ":1: expected ", expected,
                              " (found the end of the text)");
    }
    ++at_;
    return Cursor(lines_[at_ - 1], static_cast<int>(at_), label_);
  }
  /// Skips empty lines; false at the end of the text.
  bool skip_blank() {
    while (at_ < lines_.size() && lines_[at_].find_first_not_of(' ') == std::string_view::npos)
      ++at_;
    return at_ < lines_.size();
  }
  /// "<title> (N)" after optional blank lines.
  Status table_title(const char* title, int64_t* n) {
    skip_blank();
    QBC_ASSIGN_OR_RETURN(Cursor c, next(title));
    QBC_RETURN_IF_ERROR(c.expect(title));
    QBC_RETURN_IF_ERROR(c.expect("("));
    QBC_RETURN_IF_ERROR(c.integer(n));
    QBC_RETURN_IF_ERROR(c.expect(")"));
    return c.expect_end();
  }
  Status buffer_id(Cursor& c, const char* key, int32_t* id) {
    QBC_RETURN_IF_ERROR(c.expect_key(key));
    const size_t at = (c.skip_spaces(), c.pos());
    const std::string_view w = c.word();
    if (w == "-") {
      *id = -1;
      return ok_status();
    }
    pending_.push_back(
        {std::string(w), id, Cursor(lines_[at_ - 1], static_cast<int>(at_), label_), at});
    return ok_status();
  }

  Status header() {
    QBC_ASSIGN_OR_RETURN(Cursor c, next("'bundle'"));
    QBC_RETURN_IF_ERROR(c.expect("bundle"));
    QBC_RETURN_IF_ERROR(c.expect_key("target"));
    const std::string_view target = c.word();
    b_.target = target == "-" ? "" : std::string(target);
    QBC_RETURN_IF_ERROR(keyed(c, "cores", &b_.target_cores));
    QBC_RETURN_IF_ERROR(keyed(c, "sram_bytes", &b_.sram_bytes));
    QBC_RETURN_IF_ERROR(keyed(c, "dram_bytes", &b_.dram_bytes));
    QBC_RETURN_IF_ERROR(keyed(c, "dma_align", &b_.dma_align));
    QBC_RETURN_IF_ERROR(c.expect_end());

    QBC_ASSIGN_OR_RETURN(c, next("'model'"));
    QBC_RETURN_IF_ERROR(c.expect("model"));
    for (auto [key, v] : {std::pair{"hidden", &b_.hidden},
                          {"vocab", &b_.vocab},
                          {"max_cache", &b_.max_cache},
                          {"chunk", &b_.chunk},
                          {"batch", &b_.batch},
                          {"embed_rows", &b_.embed_rows}})
      QBC_RETURN_IF_ERROR(keyed(c, key, v));
    QBC_RETURN_IF_ERROR(buffer_id(c, "input", &b_.input));
    QBC_RETURN_IF_ERROR(buffer_id(c, "output", &b_.output));
    QBC_RETURN_IF_ERROR(c.expect_end());
    if (b_.embed_rows < 0 || b_.hidden < 0 || b_.embed_rows > (int64_t{1} << 40) / (b_.hidden + 1))
      return c.error_at(0, "embed_rows x hidden out of range");
    b_.embedding.assign(static_cast<size_t>(b_.embed_rows * b_.hidden), 0.0f);
    if (at_ < lines_.size() && lines_[at_].rfind("rope_inputs ", 0) == 0)
      QBC_RETURN_IF_ERROR(rope_inputs());
    if (at_ < lines_.size() && lines_[at_].rfind("deepstack ", 0) == 0)
      QBC_RETURN_IF_ERROR(deepstack());

    QBC_ASSIGN_OR_RETURN(c, next("'image'"));
    int64_t bytes = 0;
    QBC_RETURN_IF_ERROR(c.expect("image"));
    QBC_RETURN_IF_ERROR(keyed(c, "base", &b_.image_base));
    QBC_RETURN_IF_ERROR(keyed(c, "bytes", &bytes));
    if (bytes < 0) return c.error("negative image size");
    b_.image.assign(static_cast<size_t>(bytes), 0);
    QBC_RETURN_IF_ERROR(c.expect_end());

    QBC_ASSIGN_OR_RETURN(c, next("'dram'"));
    QBC_RETURN_IF_ERROR(c.expect("dram"));
    DramPlan& d = b_.dram;
    for (auto [key, v] : {std::pair{"weights", &d.weights},
                          {"kv", &d.kv},
                          {"activations", &d.activations},
                          {"scratch", &d.scratch},
                          {"io", &d.io},
                          {"reserve", &d.reserve}})
      QBC_RETURN_IF_ERROR(keyed(c, key, v));
    int64_t total = 0;
    const size_t total_at = (c.skip_spaces(), c.pos());
    QBC_RETURN_IF_ERROR(keyed(c, "total", &total));
    if (total != d.total()) return c.error_at(total_at, "total is not the sum of the regions");
    QBC_RETURN_IF_ERROR(c.expect_end());

    QBC_ASSIGN_OR_RETURN(c, next("'debug'"));
    QBC_RETURN_IF_ERROR(c.expect("debug"));
    QBC_RETURN_IF_ERROR(keyed(c, "nodes", &node_count_));
    QBC_RETURN_IF_ERROR(keyed(c, "passes", &pass_count_));
    return c.expect_end();
  }

  /// "rope_inputs cos=%b sin=%b head_dim=N theta=X section=[a, b, c] [interleaved]" (M-RoPE
  /// models).
  Status rope_inputs() {
    QBC_ASSIGN_OR_RETURN(Cursor c, next("'rope_inputs'"));
    QBC_RETURN_IF_ERROR(c.expect("rope_inputs"));
    RopeInputs& ri = b_.rope_inputs;
    QBC_RETURN_IF_ERROR(buffer_id(c, "cos", &ri.cos));
    QBC_RETURN_IF_ERROR(buffer_id(c, "sin", &ri.sin));
    QBC_RETURN_IF_ERROR(keyed(c, "head_dim", &ri.head_dim));
    QBC_RETURN_IF_ERROR(c.expect_key("theta"));
    QBC_RETURN_IF_ERROR(c.real(&ri.theta));
    QBC_RETURN_IF_ERROR(c.expect_key("section"));
    QBC_RETURN_IF_ERROR(c.expect("["));
    for (int k = 0; k < 3; ++k) {
      if (k > 0) QBC_RETURN_IF_ERROR(c.expect(","));
      QBC_RETURN_IF_ERROR(c.integer(&ri.section[k]));
    }
    QBC_RETURN_IF_ERROR(c.expect("]"));
    ri.interleaved = c.accept("interleaved");
    return c.expect_end();
  }

  /// "deepstack %b0 %b1 ..." (Qwen3-VL): the DeepStack inputs' io buffers, in level order.
  /// The names resolve after the buffer table, through pointers into b_.deepstack: it is
  /// sized before any is taken.
  Status deepstack() {
    QBC_ASSIGN_OR_RETURN(Cursor c, next("'deepstack'"));
    QBC_RETURN_IF_ERROR(c.expect("deepstack"));
    std::vector<std::pair<std::string, size_t>> names;
    while (!c.at_end()) {
      const size_t at = (c.skip_spaces(), c.pos());
      names.emplace_back(std::string(c.word()), at);
    }
    if (names.empty()) return c.error("expected the DeepStack io buffers");
    b_.deepstack.assign(names.size(), -1);
    for (size_t k = 0; k < names.size(); ++k)
      pending_.push_back({names[k].first, &b_.deepstack[k],
                          Cursor(lines_[at_ - 1], static_cast<int>(at_), label_), names[k].second});
    return ok_status();
  }

  Status buffer_row(Cursor& c, Buffer* buf) {
    const std::string_view name = c.word();
    if (name.size() < 2 || name[0] != '%') return c.error("expected a buffer name (%name)");
    buf->name = std::string(name.substr(1));
    const size_t space_at = (c.skip_spaces(), c.pos());
    const std::string_view space = c.word();
    if (space != "sram" && space != "dram") return c.error_at(space_at, "expected sram or dram");
    buf->space = space == "sram" ? Space::kSram : Space::kDram;
    if (buf->space == Space::kSram) {
      QBC_RETURN_IF_ERROR(keyed(c, "core", &buf->core));
    } else {
      QBC_RETURN_IF_ERROR(c.expect("-"));
    }
    QBC_RETURN_IF_ERROR(enum_word(c, 6, purpose_name, "purpose", &buf->purpose));
    QBC_RETURN_IF_ERROR(enum_word(c, 8, dtype_name, "type", &buf->dtype));
    QBC_RETURN_IF_ERROR(keyed(c, "offset", &buf->offset));
    QBC_RETURN_IF_ERROR(keyed(c, "bytes", &buf->bytes));
    c.skip_spaces();
    std::string key;
    const size_t at = c.pos();
    if (c.key(&key) && key == "slot_stride") {
      QBC_RETURN_IF_ERROR(c.integer(&buf->slot_stride));
      if (buf->slot_stride == 0) return c.error_at(at, "slot_stride=0 is printed as nothing");
      QBC_RETURN_IF_ERROR(c.expect_key("shape"));
    } else if (key != "shape") {
      return c.error_at(at, "expected 'shape=' or 'slot_stride='");
    }
    QBC_RETURN_IF_ERROR(c.expect("["));
    while (!c.accept("]")) {
      if (!buf->shape.empty()) QBC_RETURN_IF_ERROR(c.expect(","));
      QBC_RETURN_IF_ERROR(c.integer(&buf->shape.emplace_back()));
    }
    return c.expect_end();
  }

  Status buffers() {
    int64_t n = 0;
    QBC_RETURN_IF_ERROR(table_title("buffers", &n));
    b_.buffers.resize(static_cast<size_t>(std::max<int64_t>(n, 0)));
    for (Buffer& buf : b_.buffers) {
      QBC_ASSIGN_OR_RETURN(Cursor c, next("a buffer row"));
      QBC_RETURN_IF_ERROR(buffer_row(c, &buf));
    }
    for (Pending& p : pending_) {
      *p.id = names_.find("%" + p.name);
      if (*p.id < 0 && (p.name.empty() || p.name[0] != '#')) *p.id = names_.find(p.name);
      if (*p.id < 0) return p.cursor.error_at(p.col, "unknown buffer " + p.name);
    }
    return ok_status();
  }

  Status attention_row(Cursor& c, AttnDesc* a) {
    for (auto [key, v] : {std::pair{"heads", &a->heads},
                          {"kv_heads", &a->kv_heads},
                          {"head_dim", &a->head_dim},
                          {"window", &a->window},
                          {"capacity", &a->capacity}})
      QBC_RETURN_IF_ERROR(keyed(c, key, v));
    QBC_RETURN_IF_ERROR(c.expect_key("scale"));
    QBC_RETURN_IF_ERROR(c.real(&a->scale));
    QBC_RETURN_IF_ERROR(c.expect_key("softcap"));
    QBC_RETURN_IF_ERROR(c.real(&a->softcap));
    for (auto [key, v] :
         {std::pair{"k_bits", &a->k_bits}, {"v_bits", &a->v_bits}, {"p_bits", &a->p_bits}})
      QBC_RETURN_IF_ERROR(keyed(c, key, v));
    QBC_RETURN_IF_ERROR(c.expect_key("q_dynamic"));
    QBC_RETURN_IF_ERROR(c.boolean(&a->q_dynamic));
    QBC_RETURN_IF_ERROR(c.expect_key("rotating"));
    QBC_RETURN_IF_ERROR(c.boolean(&a->rotating));
    QBC_RETURN_IF_ERROR(keyed(c, "k_rope", &a->k_rope));
    if (c.accept("bidirectional=")) {  // printed only when set (a vision tower's full_attention)
      QBC_RETURN_IF_ERROR(c.boolean(&a->bidirectional));
    }
    if (c.at_end()) return ok_status();
    if (!c.accept("packed=")) {
      QBC_RETURN_IF_ERROR(kv4_rules(c, a));
      if (c.at_end()) return ok_status();
      QBC_RETURN_IF_ERROR(c.expect_key("packed"));
    }
    QBC_RETURN_IF_ERROR(c.boolean(&a->packed));
    return c.expect_end();
  }

  /// The KV4 rules of an attention line, all or none (printed when token_fields()).
  Status kv4_rules(Cursor& c, AttnDesc* a) {
    QBC_RETURN_IF_ERROR(c.expect_key("k_token_scale"));
    QBC_RETURN_IF_ERROR(c.boolean(&a->k_token_scale));
    QBC_RETURN_IF_ERROR(c.expect_key("qk_hadamard"));
    QBC_RETURN_IF_ERROR(c.boolean(&a->qk_hadamard));
    QBC_RETURN_IF_ERROR(keyed(c, "k_group", &a->k_group));
    QBC_RETURN_IF_ERROR(c.expect_key("k_asym"));
    QBC_RETURN_IF_ERROR(c.boolean(&a->k_asym));
    QBC_RETURN_IF_ERROR(c.expect_key("v_token_scale"));
    return c.boolean(&a->v_token_scale);
  }

  Status list(Cursor& c, const char* key, std::vector<double>* out) {
    QBC_RETURN_IF_ERROR(c.expect_key(key));
    QBC_RETURN_IF_ERROR(c.expect("["));
    while (!c.accept("]")) {
      if (!out->empty()) QBC_RETURN_IF_ERROR(c.expect(","));
      QBC_RETURN_IF_ERROR(c.real(&out->emplace_back()));
    }
    return ok_status();
  }

  Status rope_row(Cursor& c, RopeDesc* r) {
    for (auto [key, v] : {std::pair{"heads", &r->heads},
                          {"head_dim", &r->head_dim},
                          {"rotary_dim", &r->rotary_dim}})
      QBC_RETURN_IF_ERROR(keyed(c, key, v));
    for (auto [key, v] : {std::pair{"theta", &r->theta},
                          {"attention_factor", &r->attention_factor},
                          {"dynamic_factor", &r->dynamic_factor}}) {
      QBC_RETURN_IF_ERROR(c.expect_key(key));
      QBC_RETURN_IF_ERROR(c.real(v));
    }
    QBC_RETURN_IF_ERROR(keyed(c, "original_max_positions", &r->original_max_positions));
    QBC_RETURN_IF_ERROR(list(c, "inv_freq", &r->inv_freq));
    QBC_RETURN_IF_ERROR(list(c, "long_inv_freq", &r->long_inv_freq));
    return c.expect_end();
  }

  /// "#i" at the start of table row i.
  Status row_index(Cursor& c, size_t i) {
    const size_t at = (c.skip_spaces(), c.pos());
    int32_t v = -1;
    QBC_RETURN_IF_ERROR(c.index(&v));
    if (v != static_cast<int32_t>(i)) return c.error_at(at, "expected row #" + std::to_string(i));
    return ok_status();
  }

  Status attentions() {
    int64_t n = 0;
    QBC_RETURN_IF_ERROR(table_title("attentions", &n));
    b_.attentions.resize(static_cast<size_t>(std::max<int64_t>(n, 0)));
    for (size_t i = 0; i < b_.attentions.size(); ++i) {
      QBC_ASSIGN_OR_RETURN(Cursor c, next("an attention row"));
      QBC_RETURN_IF_ERROR(row_index(c, i));
      QBC_RETURN_IF_ERROR(attention_row(c, &b_.attentions[i]));
    }
    return ok_status();
  }

  Status ropes() {
    int64_t n = 0;
    QBC_RETURN_IF_ERROR(table_title("ropes", &n));
    b_.ropes.resize(static_cast<size_t>(std::max<int64_t>(n, 0)));
    for (size_t i = 0; i < b_.ropes.size(); ++i) {
      QBC_ASSIGN_OR_RETURN(Cursor c, next("a rope row"));
      QBC_RETURN_IF_ERROR(row_index(c, i));
      QBC_RETURN_IF_ERROR(rope_row(c, &b_.ropes[i]));
    }
    return ok_status();
  }

  /// The index of debug name `name` in `table` (numbered in order of appearance).
  static int32_t number(std::map<std::string, int32_t>& table, std::vector<std::string>& names,
                        const std::string& name) {
    auto [it, added] = table.emplace(name, static_cast<int32_t>(names.size()));
    if (added) names.push_back(name);
    return it->second;
  }

  Status stream(CoreProgram* cp) {
    QBC_ASSIGN_OR_RETURN(Cursor c, next("'core'"));
    int64_t count = 0;
    QBC_RETURN_IF_ERROR(c.expect("core"));
    QBC_RETURN_IF_ERROR(c.int32(&cp->core));
    QBC_RETURN_IF_ERROR(c.expect("("));
    QBC_RETURN_IF_ERROR(c.integer(&count));
    QBC_RETURN_IF_ERROR(c.expect("instructions)"));
    QBC_RETURN_IF_ERROR(c.expect_end());
    for (int64_t i = 0; i < count; ++i) {
      QBC_ASSIGN_OR_RETURN(Cursor line, next("an instruction"));
      const size_t at = (line.skip_spaces(), line.pos());
      text::ParsedInstr pi;
      QBC_RETURN_IF_ERROR(text::parse_instr(line, names_, &pi));
      if (line.pos() == at) return line.error("expected an instruction");
      if (!pi.node.empty()) pi.instr.node = number(node_ids_, b_.nodes, pi.node);
      if (!pi.pass.empty()) pi.instr.pass = number(pass_ids_, b_.passes, pi.pass);
      cp->code.push_back(std::move(pi.instr));
    }
    return ok_status();
  }

  Status program(Phase phase, Program* p) {
    QBC_ASSIGN_OR_RETURN(Cursor c, next(phase_name(phase)));
    p->phase = phase;
    QBC_RETURN_IF_ERROR(c.expect(phase_name(phase)));
    QBC_RETURN_IF_ERROR(keyed(c, "max_seq", &p->max_seq));
    QBC_RETURN_IF_ERROR(c.expect_end());
    // A core's stream starts with "core"; the next program or mode with anything else.
    while (at_ < lines_.size() && Cursor(lines_[at_], 0, label_).accept("core ")) {
      QBC_RETURN_IF_ERROR(stream(&p->cores.emplace_back()));
    }
    return ok_status();
  }

  Status mode() {
    QBC_ASSIGN_OR_RETURN(Cursor c, next("'mode'"));
    Mode& m = b_.modes.emplace_back();
    int64_t index = 0;
    const size_t at = (c.skip_spaces(), c.pos());
    QBC_RETURN_IF_ERROR(c.expect("mode"));
    QBC_RETURN_IF_ERROR(c.integer(&index));
    if (index != static_cast<int64_t>(b_.modes.size() - 1)) {
      return c.error_at(at, "expected mode " + std::to_string(b_.modes.size() - 1));
    }
    QBC_RETURN_IF_ERROR(enum_word(c, 4, scheme_name, "inference scheme", &m.scheme));
    QBC_RETURN_IF_ERROR(keyed(c, "cores_per_instance", &m.cores_per_instance));
    QBC_RETURN_IF_ERROR(keyed(c, "instances", &m.instances));
    QBC_RETURN_IF_ERROR(c.expect_end());
    QBC_RETURN_IF_ERROR(program(Phase::kPrefill, &m.prefill));
    QBC_RETURN_IF_ERROR(program(Phase::kDecode, &m.decode));
    // A span program follows only in a mode that has one.
    if (at_ < lines_.size() && Cursor(lines_[at_], 0, label_).accept("span "))
      return program(Phase::kSpan, &m.span);
    return ok_status();
  }

  /// Pads the node and pass names the instructions named up to the printed counts.
  Status debug_names() {
    if (static_cast<int64_t>(b_.nodes.size()) > node_count_ ||
        static_cast<int64_t>(b_.passes.size()) > pass_count_) {
      return invalid_argument(label_, ":5:1: the instructions name ", b_.nodes.size(),
                              " nodes and ", b_.passes.size(), " passes, more than 'debug' counts");
    }
    for (int64_t i = static_cast<int64_t>(b_.nodes.size()); i < node_count_; ++i)
      b_.nodes.push_back("(unnamed node " + std::to_string(i) + ")");
    for (int64_t i = static_cast<int64_t>(b_.passes.size()); i < pass_count_; ++i)
      b_.passes.push_back("(unnamed pass " + std::to_string(i) + ")");
    return ok_status();
  }

  struct Pending {
    std::string name;
    int32_t* id;
    Cursor cursor;
    size_t col;
  };

  std::vector<std::string_view> lines_;
  const std::string& label_;
  size_t at_ = 0;
  Bundle b_;
  text::BufferNames names_;
  std::vector<Pending> pending_;
  int64_t node_count_ = 0, pass_count_ = 0;
  std::map<std::string, int32_t> node_ids_, pass_ids_;
};

}  // namespace

StatusOr<Bundle> parse_bundle(const std::string& text, const std::string& label) {
  Parser p(text, label);
  return p.parse();
}

}  // namespace qbc::isa
