// The plan text read back (qbc/npu/plan.h parse_plan): the grammar is print_plan's
// (plan_text.cpp), read in the same order, literal by literal. Every error is
// "label:line:column: expected X (found 'token')". The `image:` line the backend adds after
// fill-weights is accepted and skipped (the image is not part of the Plan).
#include <cstdlib>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "qbc/npu/plan.h"

namespace qbc::npu {
namespace {

/// A cursor over one line: literals, integers, reals and names, each after spaces.
class Line {
 public:
  Line(std::string_view s, int line, const std::string& label)
      : s_(s), line_(line), label_(label) {}

  Status error(const std::string& what) const {
    size_t e = i_;
    while (e < s_.size() && s_[e] != ' ') ++e;
    const std::string found = i_ < s_.size() ? std::string(s_.substr(i_, e - i_)) : "end of line";
    return invalid_argument(label_, ":", line_, ":", i_ + 1, ": expected ", what, " (found '",
                            found, "')");
  }
  /// True (and consumed) when `lit` follows (spaces before it skipped only if it starts
  /// with a non-space).
  bool accept(std::string_view lit) {
    size_t j = i_;
    if (!lit.empty() && lit[0] != ' ')
      while (j < s_.size() && s_[j] == ' ') ++j;
    if (s_.substr(j, lit.size()) != lit) return false;
    i_ = j + lit.size();
    return true;
  }
  Status lit(std::string_view l) {
    if (accept(l)) return ok_status();
    skip();
    return error("'" + std::string(l) + "'");
  }
  Status integer(int64_t* v) {
    skip();
    size_t j = i_ + (i_ < s_.size() && s_[i_] == '-' ? 1 : 0);
    const size_t digits = j;
    while (j < s_.size() && s_[j] >= '0' && s_[j] <= '9') ++j;
    if (j == digits || j - digits > 18) return error("an integer");
    *v = std::strtoll(std::string(s_.substr(i_, j - i_)).c_str(), nullptr, 10);
    i_ = j;
    return ok_status();
  }
  template <typename T>
  Status num(T* v) {
    int64_t x = 0;
    QBC_RETURN_IF_ERROR(integer(&x));
    *v = static_cast<T>(x);
    return ok_status();
  }
  Status flag(bool* v) {
    skip();
    if (accept("0") || accept("1")) {
      *v = s_[i_ - 1] == '1';
      return ok_status();
    }
    return error("0 or 1");
  }
  Status real(float* v) {
    skip();
    size_t j = i_;
    while (j < s_.size() && s_[j] != ' ' && s_[j] != ':') ++j;
    const std::string t(s_.substr(i_, j - i_));
    char* end = nullptr;
    const float f = std::strtof(t.c_str(), &end);
    if (t.empty() || end != t.c_str() + t.size()) return error("a number");
    *v = f;
    i_ = j;
    return ok_status();
  }
  /// A run of characters up to the next space, or up to `stop` when it comes first.
  Status name(std::string* out, std::string_view stop = " ") {
    skip();
    size_t e = s_.find(stop, i_);
    const size_t sp = s_.find(' ', i_);
    if (sp < e) e = sp;
    if (e == std::string_view::npos) e = s_.size();
    if (e == i_) return error("a name");
    *out = std::string(s_.substr(i_, e - i_));
    i_ = e;
    return ok_status();
  }
  /// One of `count` enumerators by `fn`'s names.
  template <typename E>
  Status word(int count, const char* (*fn)(E), const char* what, E* out) {
    skip();
    size_t e = i_;
    while (e < s_.size() && s_[e] != ' ' && s_[e] != ',' && s_[e] != ':') ++e;
    for (int v = 0; v < count; ++v) {
      if (s_.substr(i_, e - i_) == fn(static_cast<E>(v))) {
        *out = static_cast<E>(v);
        i_ = e;
        return ok_status();
      }
    }
    return error(what);
  }
  Status list(std::vector<int64_t>* out) {
    QBC_RETURN_IF_ERROR(lit("["));
    out->clear();
    while (!accept("]")) {
      int64_t x = 0;
      QBC_RETURN_IF_ERROR(integer(&x));
      out->push_back(x);
    }
    return ok_status();
  }
  size_t pos() const { return i_; }
  void seek(size_t at) { i_ = at; }
  Status end() {
    skip();
    return i_ == s_.size() ? ok_status() : error("the end of the line");
  }

 private:
  void skip() {
    while (i_ < s_.size() && s_[i_] == ' ') ++i_;
  }
  std::string_view s_;
  size_t i_ = 0;
  int line_;
  const std::string& label_;
};

const char* kind_word(NodeKind k) {
  static const char* const kNames[] = {"input", "slice", "linear", "attention", "rows"};
  return kNames[static_cast<int>(k)];
}

Status linear(Line& c, LinearPlan& li) {
  QBC_RETURN_IF_ERROR(c.lit("n"));
  QBC_RETURN_IF_ERROR(c.num(&li.n));
  QBC_RETURN_IF_ERROR(c.lit("k"));
  QBC_RETURN_IF_ERROR(c.num(&li.k));
  QBC_RETURN_IF_ERROR(c.lit("w"));
  QBC_RETURN_IF_ERROR(c.num(&li.w_bits));
  QBC_RETURN_IF_ERROR(c.lit("x"));
  QBC_RETURN_IF_ERROR(c.num(&li.in_bits));
  QBC_RETURN_IF_ERROR(c.lit("group"));
  QBC_RETURN_IF_ERROR(c.num(&li.group));
  QBC_RETURN_IF_ERROR(c.lit("groups"));
  QBC_RETURN_IF_ERROR(c.num(&li.groups));
  QBC_RETURN_IF_ERROR(c.lit("zero"));
  QBC_RETURN_IF_ERROR(c.flag(&li.zero));
  if (c.accept("min")) QBC_RETURN_IF_ERROR(c.flag(&li.min));
  QBC_RETURN_IF_ERROR(c.lit("bias"));
  QBC_RETURN_IF_ERROR(c.flag(&li.bias));
  QBC_RETURN_IF_ERROR(c.lit("out_fp16"));
  QBC_RETURN_IF_ERROR(c.flag(&li.out_fp16));
  QBC_RETURN_IF_ERROR(c.lit("mode"));
  QBC_RETURN_IF_ERROR(c.word(4, isa::quant_mode_name, "a quantization mode", &li.mode));
  QBC_RETURN_IF_ERROR(c.lit("in_scale"));
  QBC_RETURN_IF_ERROR(c.real(&li.in_scale));
  QBC_RETURN_IF_ERROR(c.lit("in_zero"));
  QBC_RETURN_IF_ERROR(c.num(&li.in_zero));
  QBC_RETURN_IF_ERROR(c.lit(":"));
  QBC_RETURN_IF_ERROR(c.lit("nt"));
  QBC_RETURN_IF_ERROR(c.num(&li.t.nt));
  QBC_RETURN_IF_ERROR(c.lit("kt"));
  QBC_RETURN_IF_ERROR(c.num(&li.t.kt));
  QBC_RETURN_IF_ERROR(c.lit("mt"));
  QBC_RETURN_IF_ERROR(c.num(&li.t.mt));
  QBC_RETURN_IF_ERROR(c.lit("("));
  QBC_RETURN_IF_ERROR(c.num(&li.ntiles));
  QBC_RETURN_IF_ERROR(c.lit("x"));
  QBC_RETURN_IF_ERROR(c.num(&li.ktiles));
  QBC_RETURN_IF_ERROR(c.lit("tiles, gt"));
  QBC_RETURN_IF_ERROR(c.num(&li.gt));
  QBC_RETURN_IF_ERROR(c.lit(")"));
  if (!c.accept("buffer #")) return ok_status();
  QBC_RETURN_IF_ERROR(c.num(&li.buf));
  for (auto [key, v] : {std::pair{"w_bytes", &li.w_bytes}, std::pair{"ws_bytes", &li.ws_bytes},
                        std::pair{"wz_bytes", &li.wz_bytes}}) {
    QBC_RETURN_IF_ERROR(c.lit(key));
    QBC_RETURN_IF_ERROR(c.num(v));
  }
  for (auto [key, v] : {std::pair{"w_off", &li.w_off}, std::pair{"ws_off", &li.ws_off},
                        std::pair{"wz_off", &li.wz_off}, std::pair{"wm_off", &li.wm_off},
                        std::pair{"b_off", &li.b_off}}) {
    if (v == &li.wm_off && !li.min) continue;
    QBC_RETURN_IF_ERROR(c.lit(key));
    QBC_RETURN_IF_ERROR(c.list(v));
  }
  return ok_status();
}

Status attention(Line& c, AttentionPlan& a) {
  QBC_RETURN_IF_ERROR(c.lit("desc"));
  QBC_RETURN_IF_ERROR(c.num(&a.desc));
  QBC_RETURN_IF_ERROR(c.lit("heads"));
  QBC_RETURN_IF_ERROR(c.num(&a.heads));
  QBC_RETURN_IF_ERROR(c.lit("/"));
  QBC_RETURN_IF_ERROR(c.num(&a.kv_heads));
  QBC_RETURN_IF_ERROR(c.lit("x"));
  QBC_RETURN_IF_ERROR(c.num(&a.head_dim));
  QBC_RETURN_IF_ERROR(c.lit("window"));
  QBC_RETURN_IF_ERROR(c.num(&a.window));
  QBC_RETURN_IF_ERROR(c.lit("capacity"));
  QBC_RETURN_IF_ERROR(c.num(&a.capacity));
  QBC_RETURN_IF_ERROR(c.lit("k"));
  QBC_RETURN_IF_ERROR(c.num(&a.k_bits));
  QBC_RETURN_IF_ERROR(c.lit("v"));
  QBC_RETURN_IF_ERROR(c.num(&a.v_bits));
  QBC_RETURN_IF_ERROR(c.lit(":"));
  QBC_RETURN_IF_ERROR(c.lit("br"));
  QBC_RETURN_IF_ERROR(c.num(&a.t.br));
  QBC_RETURN_IF_ERROR(c.lit("bc"));
  QBC_RETURN_IF_ERROR(c.num(&a.t.bc));
  for (auto [key, v] :
       {std::pair{"append rows", &a.append_mt}, std::pair{"params_bytes", &a.params_bytes},
        std::pair{"krow", &a.krow}, std::pair{"vrow", &a.vrow}}) {
    QBC_RETURN_IF_ERROR(c.lit(key));
    QBC_RETURN_IF_ERROR(c.num(v));
  }
  if (!c.accept("params #")) return ok_status();
  QBC_RETURN_IF_ERROR(c.num(&a.params));
  QBC_RETURN_IF_ERROR(c.lit("kcache #"));
  QBC_RETURN_IF_ERROR(c.num(&a.kcache));
  QBC_RETURN_IF_ERROR(c.lit("vcache #"));
  return c.num(&a.vcache);
}

Status place(Line& c, NodePlan& n) {
  QBC_RETURN_IF_ERROR(c.lit("; place"));
  ValueLoc& v = n.place;
  if (!c.accept("none")) {
    QBC_RETURN_IF_ERROR(c.lit("#"));
    QBC_RETURN_IF_ERROR(c.num(&v.buf));
    QBC_RETURN_IF_ERROR(c.lit("col"));
    QBC_RETURN_IF_ERROR(c.num(&v.col));
    QBC_RETURN_IF_ERROR(c.lit("stride"));
    QBC_RETURN_IF_ERROR(c.num(&v.stride));
    QBC_RETURN_IF_ERROR(c.lit("width"));
    QBC_RETURN_IF_ERROR(c.num(&v.width));
    QBC_RETURN_IF_ERROR(c.word(8, isa::dtype_name, "a type", &v.type));
  }
  if (c.accept("alias %")) QBC_RETURN_IF_ERROR(c.num(&n.alias));
  QBC_RETURN_IF_ERROR(c.lit("last_use"));
  return c.num(&n.last_use);
}

Status node(Line& c, const Plan& p, NodePlan& n) {
  QBC_RETURN_IF_ERROR(c.name(&n.name));
  QBC_RETURN_IF_ERROR(c.name(&n.op));
  QBC_RETURN_IF_ERROR(c.word(5, kind_word, "a node kind", &n.kind));
  QBC_RETURN_IF_ERROR(c.lit("width"));
  QBC_RETURN_IF_ERROR(c.num(&n.width));
  if (c.accept("row_div ")) QBC_RETURN_IF_ERROR(c.num(&n.row_div));
  if (n.kind == NodeKind::kLinear) QBC_RETURN_IF_ERROR(linear(c, n.linear));
  for (const isa::Phase ph : {isa::Phase::kPrefill, isa::Phase::kDecode}) {
    if (n.kind != NodeKind::kLinear) break;
    if (!c.accept(std::string("; ") + isa::phase_name(ph) + " image")) continue;
    n.second_for = ph;  // a second weight image (bit.prefill / bit.decode)
    QBC_RETURN_IF_ERROR(linear(c, n.second));
    break;
  }
  if (n.kind == NodeKind::kAttention) QBC_RETURN_IF_ERROR(attention(c, n.attention));
  if (n.kind == NodeKind::kRows) {
    QBC_RETURN_IF_ERROR(c.lit(": rows"));
    QBC_RETURN_IF_ERROR(c.num(&n.rows_mt));
  }
  if (c.accept("rope ")) QBC_RETURN_IF_ERROR(c.num(&n.rope));
  if (c.accept("weight #")) QBC_RETURN_IF_ERROR(c.num(&n.norm_weight));
  if (c.accept("stage ")) QBC_RETURN_IF_ERROR(c.num(&n.stage));
  if (p.placed) QBC_RETURN_IF_ERROR(place(c, n));
  return c.end();
}

Status buffer(Line& c, DramBuffer& b) {
  QBC_RETURN_IF_ERROR(c.name(&b.name, ":"));
  QBC_RETURN_IF_ERROR(c.lit(":"));
  QBC_RETURN_IF_ERROR(c.word(6, isa::purpose_name, "a region", &b.purpose));
  QBC_RETURN_IF_ERROR(c.lit("at"));
  QBC_RETURN_IF_ERROR(c.num(&b.offset));
  QBC_RETURN_IF_ERROR(c.lit(","));
  QBC_RETURN_IF_ERROR(c.num(&b.bytes));
  QBC_RETURN_IF_ERROR(c.lit("bytes,"));
  QBC_RETURN_IF_ERROR(c.word(8, isa::dtype_name, "a type", &b.dtype));
  QBC_RETURN_IF_ERROR(c.list(&b.shape));
  if (c.accept(", per slot (stride")) {
    QBC_RETURN_IF_ERROR(c.num(&b.slot_stride));
    QBC_RETURN_IF_ERROR(c.lit(")"));
  }
  if (c.accept(", block")) QBC_RETURN_IF_ERROR(c.num(&b.block));
  if (b.purpose == isa::Purpose::kKv) {
    b.grows = c.accept(", grows (capacity the cache)");
    if (!b.grows) QBC_RETURN_IF_ERROR(c.lit(", fixed (capacity a ring)"));
  }
  return c.end();
}

class Parser {
 public:
  Parser(std::string_view text, const std::string& label) : label_(label) {
    size_t at = 0;
    while (at < text.size()) {
      const size_t nl = text.find('\n', at);
      const size_t e = nl == std::string_view::npos ? text.size() : nl;
      lines_.push_back(text.substr(at, e - at));
      at = e + 1;
    }
  }

  StatusOr<Plan> parse() {
    QBC_RETURN_IF_ERROR(header());
    QBC_RETURN_IF_ERROR(nodes());
    QBC_RETURN_IF_ERROR(stages());
    if (p_.placed) QBC_RETURN_IF_ERROR(dram());
    if (at_ < lines_.size() && lines_[at_].substr(0, 6) == "image:") ++at_;
    if (at_ < lines_.size()) return line().error("the end of the plan");
    return std::move(p_);
  }

 private:
  Line line() const {
    const std::string_view s = at_ < lines_.size() ? lines_[at_] : std::string_view();
    return Line(s, static_cast<int>(at_) + 1, label_);
  }
  /// The next line that starts with `prefix` (after two spaces of indent), or nothing.
  bool next_starts(std::string_view prefix) const {
    return at_ < lines_.size() && lines_[at_].substr(0, prefix.size()) == prefix;
  }

  Status header() {
    Line c = line();
    QBC_RETURN_IF_ERROR(c.lit("plan of graph '"));
    QBC_RETURN_IF_ERROR(c.name(&p_.graph, "'"));
    QBC_RETURN_IF_ERROR(c.lit("' for target '"));
    QBC_RETURN_IF_ERROR(c.name(&p_.target, "'"));
    QBC_RETURN_IF_ERROR(c.lit("': cores"));
    QBC_RETURN_IF_ERROR(c.num(&p_.cores));
    QBC_RETURN_IF_ERROR(c.lit(", SRAM"));
    QBC_RETURN_IF_ERROR(c.num(&p_.sram_budget));
    QBC_RETURN_IF_ERROR(c.lit("bytes per core, DRAM"));
    QBC_RETURN_IF_ERROR(c.num(&p_.dram_bytes));
    QBC_RETURN_IF_ERROR(c.lit("(reserve"));
    QBC_RETURN_IF_ERROR(c.num(&p_.dram_reserve));
    QBC_RETURN_IF_ERROR(c.lit("), align"));
    QBC_RETURN_IF_ERROR(c.num(&p_.dma_align));
    QBC_RETURN_IF_ERROR(c.lit("; cache"));
    QBC_RETURN_IF_ERROR(c.num(&p_.max_cache));
    QBC_RETURN_IF_ERROR(c.lit(", chunk"));
    QBC_RETURN_IF_ERROR(c.num(&p_.chunk));
    QBC_RETURN_IF_ERROR(c.lit(", batch"));
    QBC_RETURN_IF_ERROR(c.num(&p_.batch));
    QBC_RETURN_IF_ERROR(c.end());
    ++at_;
    Line d = line();
    QBC_RETURN_IF_ERROR(d.lit("planned:"));
    p_.tiled = d.accept(" tiles");
    p_.placed = d.accept(" places");
    p_.fit_checked = d.accept(" fit");
    QBC_RETURN_IF_ERROR(d.lit("; inputs %"));
    QBC_RETURN_IF_ERROR(d.num(&p_.embeds));
    QBC_RETURN_IF_ERROR(d.lit("positions %"));
    QBC_RETURN_IF_ERROR(d.num(&p_.positions));
    if (d.accept(" rope_cos %")) {
      QBC_RETURN_IF_ERROR(d.num(&p_.rope_cos));
      QBC_RETURN_IF_ERROR(d.lit(" rope_sin %"));
      QBC_RETURN_IF_ERROR(d.num(&p_.rope_sin));
    }
    while (d.accept(" deepstack %")) {
      int32_t id = -1;
      QBC_RETURN_IF_ERROR(d.num(&id));
      p_.deepstack.push_back(id);
    }
    QBC_RETURN_IF_ERROR(d.lit(", output %"));
    QBC_RETURN_IF_ERROR(d.num(&p_.output));
    while (d.accept(" %")) {  // a feature graph's further outputs
      int32_t id = -1;
      QBC_RETURN_IF_ERROR(d.num(&id));
      p_.extra_outputs.push_back(id);
    }
    QBC_RETURN_IF_ERROR(d.end());
    ++at_;
    return ok_status();
  }

  /// "  <sigil><index>" where the index must be the next one of its table.
  Status indexed(Line& c, std::string_view sigil, size_t want) {
    QBC_RETURN_IF_ERROR(c.lit(sigil));
    const size_t at = c.pos();
    int64_t i = 0;
    QBC_RETURN_IF_ERROR(c.integer(&i));
    if (i == static_cast<int64_t>(want)) return ok_status();
    c.seek(at);
    return c.error("index " + std::to_string(want) + " (in order)");
  }

  Status nodes() {
    Line t = line();
    QBC_RETURN_IF_ERROR(t.lit("tiles"));
    QBC_RETURN_IF_ERROR(t.end());
    ++at_;
    while (next_starts("  %")) {
      Line c = line();
      NodePlan n;
      QBC_RETURN_IF_ERROR(indexed(c, "  %", p_.nodes.size()));
      QBC_RETURN_IF_ERROR(node(c, p_, n));
      p_.nodes.push_back(std::move(n));
      ++at_;
    }
    return ok_status();
  }

  Status stages() {
    Line t = line();
    QBC_RETURN_IF_ERROR(t.lit("stages"));
    QBC_RETURN_IF_ERROR(t.end());
    ++at_;
    while (next_starts("  s")) {
      Line c = line();
      StagePlan s;
      QBC_RETURN_IF_ERROR(indexed(c, "  s", p_.stages.size()));
      QBC_RETURN_IF_ERROR(c.lit("%"));
      QBC_RETURN_IF_ERROR(c.num(&s.node));
      QBC_RETURN_IF_ERROR(c.name(&s.name, ":"));
      QBC_RETURN_IF_ERROR(c.lit(": planned"));
      QBC_RETURN_IF_ERROR(c.num(&s.planned));
      QBC_RETURN_IF_ERROR(c.lit(", used"));
      QBC_RETURN_IF_ERROR(c.num(&s.used));
      QBC_RETURN_IF_ERROR(c.lit("of"));
      int64_t budget = 0;
      QBC_RETURN_IF_ERROR(c.num(&budget));
      if (budget != p_.sram_budget)
        return c.error("the header's SRAM budget " + std::to_string(p_.sram_budget));
      QBC_RETURN_IF_ERROR(c.lit("bytes"));
      QBC_RETURN_IF_ERROR(c.end());
      p_.stages.push_back(std::move(s));
      ++at_;
    }
    return ok_status();
  }

  Status dram() {
    Line t = line();
    QBC_RETURN_IF_ERROR(t.lit("dram"));
    QBC_RETURN_IF_ERROR(t.end());
    ++at_;
    while (next_starts("  #")) {
      Line c = line();
      DramBuffer b;
      QBC_RETURN_IF_ERROR(indexed(c, "  #", p_.buffers.size()));
      QBC_RETURN_IF_ERROR(buffer(c, b));
      p_.buffers.push_back(std::move(b));
      ++at_;
    }
    Line io = line();
    for (auto [key, v] : {std::pair{"io: input #", &p_.input}, std::pair{", logits #", &p_.logits},
                          std::pair{", scratch #", &p_.scratch}}) {
      QBC_RETURN_IF_ERROR(io.lit(key));
      QBC_RETURN_IF_ERROR(io.num(v));
    }
    if (io.accept(", rope_cos #")) {
      QBC_RETURN_IF_ERROR(io.num(&p_.cos_buf));
      QBC_RETURN_IF_ERROR(io.lit(", rope_sin #"));
      QBC_RETURN_IF_ERROR(io.num(&p_.sin_buf));
    }
    while (io.accept(", deepstack #")) {
      int32_t b = -1;
      QBC_RETURN_IF_ERROR(io.num(&b));
      p_.deepstack_bufs.push_back(b);
    }
    QBC_RETURN_IF_ERROR(io.end());
    ++at_;
    Line r = line();
    isa::DramPlan& g = p_.regions;
    for (auto [key, v] :
         {std::pair{"regions: weights", &g.weights}, std::pair{", kv", &g.kv},
          std::pair{", activations", &g.activations}, std::pair{", scratch", &g.scratch},
          std::pair{", io", &g.io}, std::pair{", reserve", &g.reserve}}) {
      QBC_RETURN_IF_ERROR(r.lit(key));
      QBC_RETURN_IF_ERROR(r.num(v));
    }
    QBC_RETURN_IF_ERROR(r.lit("bytes"));
    QBC_RETURN_IF_ERROR(r.end());
    ++at_;
    return ok_status();
  }

  std::vector<std::string_view> lines_;
  const std::string& label_;
  size_t at_ = 0;
  Plan p_;
};

}  // namespace

StatusOr<Plan> parse_plan(const std::string& text, const std::string& label) {
  return Parser(text, label).parse();
}

bool is_plan_text(const std::string& text) {
  size_t i = 0;
  while (i < text.size() && (text[i] == ' ' || text[i] == '\n')) ++i;
  return text.compare(i, 14, "plan of graph ") == 0;
}

}  // namespace qbc::npu
