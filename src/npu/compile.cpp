// The ARIES backend (see qbc/npu/compile.h and docs/npu.md): graph checks, tile choice, the
// DRAM plan and weight image, and the lowering of every MBLT op to per-core instructions.
//
// Lowering scheme. Every MBLT value lives in DRAM (activation region, per instance slot).
// Each node becomes a stage: the cores load their share of the inputs into SRAM, compute,
// and store their share of the output; with several cooperating cores a barrier ends the
// stage. Shares: rows of row-wise ops and of the KV append go round-robin by row tile;
// projections split output-channel tiles into contiguous per-core ranges; attention splits
// the cache dimension into chunks of Bc positions dealt round-robin to the cores, in two
// passes (exact row max, then integer exponent sums and P·V) merged across cores with
// order-free max and integer sums (docs/numerics.md, tile invariance). SRAM buffers are
// allocated per stage from a bump allocator, so their sizes are functions of tile sizes only.
#include "qbc/npu/compile.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <set>

#include "lowering.h"
#include "qbc/ir/builder.h"
#include "qbc/ir/verifier.h"
#include "qbc/isa/text.h"
#include "qbc/isa/verify.h"
#include "qbc/npu/assign_tokens.h"
#include "qbc/npu/memory_plan.h"
#include "qbc/pass/pass_manager.h"

namespace qbc::npu {
namespace {

using ir::Node;
using ir::Op;
using isa::DType;
using isa::Expr;
using isa::Queue;
using isa::Sym;

int64_t align_up(int64_t v, int64_t a) { return (v + a - 1) / a * a; }
int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

std::string node_label(const Node& n) {
  return "node '" + n.name + "' (" + std::string(ir::op_info(n.op).name) + ")";
}

using isa::code_type;

/// A qlinear's decoded attributes and its place in the weight image.
struct LinearInfo {
  int64_t n = 0, k = 0, group = 0, groups = 1;  // groups: scale columns per channel
  int w_bits = 8, in_bits = 8;
  bool zero = false, bias = false, out_fp16 = true;
  isa::QuantMode mode = isa::QuantMode::kTokenAffine;
  float in_scale = 1.0f;
  int32_t in_zero = 0;
  LinearTiles t;
  int64_t ntiles = 0, ktiles = 0, gt = 1;  // gt: groups per k tile (grouped) or 1
  int32_t buf = -1;                        // DRAM weights buffer
  // Offsets inside buf (bytes): w block per (n tile, k tile), scales and zero points per
  // (n tile, k tile) when grouped else per n tile, bias per n tile.
  std::vector<int64_t> w_off, ws_off, wz_off, b_off;
  int64_t w_bytes = 0;  // bytes of one full w tile
};

struct AttnInfo {
  int32_t desc = -1;    // Bundle::attentions
  int32_t params = -1;  // DRAM buffer of the fp32 parameter block
  int64_t params_bytes = 0;
  int32_t kcache = -1, vcache = -1;  // DRAM KV buffers (per slot)
  int64_t krow = 0, vrow = 0;        // bytes per cached row of one head (aligned)
  AttnTiles t;
  int64_t append_mt = 1;
};

struct NormInfo {
  int32_t weight = -1;  // DRAM buffer, fp32 [width]
};

struct RopeInfo {
  int32_t desc = -1;
};

/// One SRAM stage allocation on one core.
class SramStage {
 public:
  SramStage(isa::Bundle* b, int32_t core, int64_t align, int64_t* peak, std::string prefix)
      : b_(b), core_(core), align_(align), peak_(peak), prefix_(std::move(prefix)) {}
  int32_t alloc(const std::string& name, DType t, int64_t bytes, std::vector<int64_t> shape) {
    isa::Buffer buf;
    buf.name = prefix_ + "." + name + "@c" + std::to_string(core_);
    buf.space = isa::Space::kSram;
    buf.core = core_;
    buf.purpose = isa::Purpose::kSram;
    buf.dtype = t;
    buf.offset = top_;
    buf.bytes = std::max<int64_t>(bytes, 1);
    buf.shape = std::move(shape);
    top_ = align_up(top_ + buf.bytes, align_);
    *peak_ = std::max(*peak_, top_);
    b_->buffers.push_back(std::move(buf));
    return static_cast<int32_t>(b_->buffers.size() - 1);
  }
  int64_t top() const { return top_; }

 private:
  isa::Bundle* b_;
  int32_t core_;
  int64_t align_;
  int64_t* peak_;
  std::string prefix_;
  int64_t top_ = 0;
};

isa::Ref ref(int32_t buf, Expr off = Expr(0)) { return isa::Ref{buf, std::move(off)}; }

class Compiler {
 public:
  Compiler(const ir::Graph& g, const Options& o) : g_(g), o_(o) {}
  // The backend passes (compile() runs them on the pass manager).
  Status plan_tiles();
  Status plan_memory();
  Status fill_weights(const ir::WeightReader& reader, const ir::Int8View& codes);
  Status lower_all();
  Status check_context(const ir::WeightReader& reader);
  const isa::Bundle& bundle() const { return b_; }
  const Options& options() const { return o_; }
  isa::Bundle take() { return std::move(b_); }

 private:
  Status check();
  Status plan_linear(const Node& n, LinearInfo* li);
  Status plan_attention(int id, const Node& n, AttnInfo* ai);
  int64_t row_tile(int64_t bytes_per_row, int64_t fixed, int64_t cap) const;
  void layout_weights();
  Status plan_dram();
  Status lower(const ModeRequest& m, isa::Phase phase, isa::Program* prog);

  int32_t add_dram(const std::string& name, isa::Purpose p, DType t, int64_t bytes,
                   std::vector<int64_t> shape, bool per_slot);
  int32_t pass_id(const std::string& name);

  // Stage lowerings for core c of P cooperating cores; rows = Sym seq up to `cap`.
  void lower_rows(const Node& n, int id, Stream& s, int c, int P, int64_t cap);
  void lower_linear(const Node& n, int id, Stream& s, int c, int P, int64_t cap);
  void lower_attention(const Node& n, int id, Stream& s, int c, int P, int64_t cap,
                       int32_t* barrier);
  void barrier(Stream& s, int P, int32_t* id, int node);
  SramStage stage(int core, const std::string& prefix);
  isa::Dma load_rows(const ValueLoc& v, int32_t dst, const Expr& row0, const Expr& rows) const;
  isa::Dma store_rows(const ValueLoc& v, int32_t src, const Expr& row0, const Expr& rows) const;

  const ir::Graph& g_;
  const Options& o_;
  isa::Bundle b_;
  std::map<int, LinearInfo> lin_;
  std::map<int, AttnInfo> attn_;
  std::map<int, NormInfo> norm_;
  std::map<int, RopeInfo> rope_;
  std::vector<ValueLoc> loc_;
  int embeds_ = -1, positions_ = -1, output_ = -1;
  int64_t budget_ = 0;
  std::vector<int64_t> sram_peak_;
  std::vector<int64_t> weight_end_;  // running DRAM weight offsets
  int64_t weights_top_ = 0, slot_top_ = 0;
  std::vector<int32_t> slot_buffers_;  // buffers placed in the per-slot region
  int32_t scratch_ = -1;
  int stage_ = 0;
  std::string prog_prefix_;  // "<scheme>.<phase>." of the program being lowered
};

int32_t Compiler::pass_id(const std::string& name) {
  for (size_t i = 0; i < b_.passes.size(); ++i) {
    if (b_.passes[i] == name) return static_cast<int32_t>(i);
  }
  b_.passes.push_back(name);
  return static_cast<int32_t>(b_.passes.size() - 1);
}

Status Compiler::check() {
  const auto& nodes = g_.nodes();
  for (size_t i = 0; i < nodes.size(); ++i) {
    const Node& n = nodes[i];
    switch (n.op) {
      case Op::kInput:
        if (n.type.dtype == ir::DType::kI64) {
          positions_ = static_cast<int>(i);
        } else {
          embeds_ = static_cast<int>(i);
        }
        break;
      case Op::kLinear:
        return unimplemented(node_label(n),
                             ": a float linear; the ARIES backend runs integer matmuls only "
                             "(quantize every linear: `qbc quantize`, bit.transformer.*)");
      case Op::kAttention:
        if (!n.attrs.has("k_bits")) {
          return unimplemented(node_label(n),
                               ": attention with a float KV cache; the ARIES backend needs a "
                               "quantized cache (bit.kvCache.key / bit.kvCache.value)");
        }
        if (!o_.probe && n.attrs.get_int("max_cache") < o_.max_cache) {
          return failed_precondition(
              node_label(n), ": quantized for a cache of ", n.attrs.get_int("max_cache"),
              " positions, but the backend compiles ", o_.max_cache,
              " (llm.attributes.maxCacheLength); key scales are only valid for the positions the "
              "graph was quantized for: quantize again with the larger maxCacheLength");
        }
        break;
      case Op::kRope:
        if (n.attrs.get_float("dynamic_factor", 0.0) < 0.0)
          return invalid_argument(node_label(n), ": negative dynamic_factor");
        break;
      default:
        break;
    }
  }
  if (embeds_ < 0 || positions_ < 0)
    return invalid_argument("graph '", g_.name(), "' needs inputs inputs_embeds and positions");
  if (g_.outputs().size() != 1)
    return unimplemented("graph '", g_.name(), "' has ", g_.outputs().size(),
                         " outputs; the backend compiles decoders with one logits output");
  output_ = g_.outputs().front();
  for (const ModeRequest& m : o_.modes) {
    if (m.cores < 1 || m.cores > o_.target.cores()) {
      return invalid_argument("inferenceScheme '", isa::scheme_name(m.scheme), "' needs ", m.cores,
                              " cooperating cores; target '", o_.target.name, "' has ",
                              o_.target.cores());
    }
  }
  if (o_.modes.empty()) return invalid_argument("no inference scheme to compile");
  if (o_.chunk < 1 || o_.max_cache < o_.chunk) {
    return invalid_argument("llm.attributes.maxCoreDataLength ", o_.chunk,
                            " must be in [1, maxCacheLength ", o_.max_cache, "]");
  }
  return ok_status();
}

int64_t Compiler::row_tile(int64_t bytes_per_row, int64_t fixed, int64_t cap) const {
  int64_t mt = 1;
  while (mt * 2 <= std::min<int64_t>(cap, 128) && fixed + 2 * mt * bytes_per_row + 256 <= budget_)
    mt *= 2;
  return mt;
}

Status Compiler::plan_linear(const Node& n, LinearInfo* li) {
  const ir::Attrs& at = n.attrs;
  const ir::Weight* wq = g_.find_weight(n.operands[1].weight);
  li->n = wq->type.dims[0];
  li->k = wq->type.dims[1];
  li->w_bits = static_cast<int>(at.get_int("w_bits"));
  li->in_bits = static_cast<int>(at.get_int("in_bits"));
  li->group = at.get_int("w_group", 0);
  li->groups = li->group > 0 ? cdiv(li->k, li->group) : 1;
  li->zero = at.get_int("w_zero", 0) == 1;
  li->bias = n.operands.size() > (li->zero ? 4u : 3u);
  li->out_fp16 = at.get_int("out_fp16") != 0;
  const bool dyn = at.has("in_dynamic") && at.get_int("in_dynamic") != 0;
  const bool asym = at.get_int("in_asym", 0) == 1;
  li->mode = dyn ? (asym ? isa::QuantMode::kTokenAffine : isa::QuantMode::kTokenSymmetric)
                 : (asym ? isa::QuantMode::kStaticAffine : isa::QuantMode::kStaticSymmetric);
  li->in_scale = static_cast<float>(at.get_float("in_scale"));
  li->in_zero = asym && !dyn ? static_cast<int32_t>(at.get_int("in_zero")) : 0;
  if (li->w_bits != 4 && li->w_bits != 8) {
    return unimplemented(node_label(n), ": ", li->w_bits,
                         "-bit weights; the ARIES MAC array takes 4- or 8-bit weights");
  }
  if (li->in_bits != 8 && li->in_bits != 16)
    return unimplemented(node_label(n), ": ", li->in_bits, "-bit activations (8 or 16)");
  const DType wt = li->w_bits == 4 ? DType::kI4 : DType::kI8;
  const int64_t cb = li->in_bits == 16 ? 2 : 1;
  const int64_t accb = li->in_bits == 16 ? 8 : 4;
  const int64_t yb = li->out_fp16 ? 2 : 4;
  auto bytes = [&](int64_t mt, int64_t nt, int64_t kt) {
    const int64_t gt = li->group > 0 ? cdiv(kt, li->group) : 1;
    return mt * li->k * (2 + cb) + 8 * mt + 2 * nt * isa::dtype_bytes(wt, kt) + 2 * nt * gt * 8 +
           2 * nt * 4 + mt * nt * gt * accb + mt * nt * 4 + 2 * mt * nt * yb + 16 * 16;
  };
  // Channel tiles: a multiple of 8 (16-byte aligned fp16 columns), small enough to give every
  // core of the largest mode a tile when the layer allows it.
  // Channel tiles: a multiple of `unit_n` channels, so every tile's column offset in the
  // output rows is DMA-aligned, and small enough to give each core of the largest mode a
  // tile when the layer allows it.
  const int64_t unit_n = std::max<int64_t>(8, o_.target.dma_align / yb);
  const int64_t cores = o_.target.cores();
  int64_t nt_cap = std::max<int64_t>(unit_n, align_up(cdiv(li->n, cores), unit_n));
  nt_cap = std::min<int64_t>(nt_cap, align_up(li->n, unit_n));
  for (int64_t mt = std::min<int64_t>(o_.chunk, 64); mt >= 1; mt /= 2) {
    if (mt * li->k * (2 + cb) + 512 > budget_) continue;
    // K tiles: the whole row, else halves that stay multiples of the group (or of 32).
    const int64_t unit = li->group > 0 ? li->group : 32;
    for (int64_t kt = li->k; kt >= 1;) {
      for (int64_t nt = std::min<int64_t>(nt_cap, std::max<int64_t>(512, unit_n)); nt >= unit_n;
           nt /= 2) {
        const int64_t ntr = align_up(nt, unit_n);
        if (bytes(mt, ntr, kt) <= budget_) {
          li->t = LinearTiles{ntr, kt, mt};
          li->ntiles = cdiv(li->n, ntr);
          li->ktiles = cdiv(li->k, kt);
          li->gt = li->group > 0 ? cdiv(kt, li->group) : 1;
          return ok_status();
        }
      }
      if (kt == li->k) {
        kt = std::max<int64_t>(unit, align_up(cdiv(li->k, 2), unit));
        if (kt >= li->k) break;
      } else if (kt / 2 >= unit && (kt / 2) % unit == 0) {
        kt /= 2;
      } else {
        break;
      }
    }
  }
  return resource_exhausted(node_label(n), ": no tile of [", li->n, " x ", li->k, "] fits the ",
                            budget_, "-byte SRAM of target '", o_.target.name,
                            "' (even one row of fp16 inputs and codes needs ", li->k * (2 + cb),
                            " bytes)");
}

Status Compiler::plan_attention(int id, const Node& n, AttnInfo* ai) {
  const ir::Attrs& at = n.attrs;
  isa::AttnDesc d;
  d.heads = at.get_int("num_heads");
  d.kv_heads = at.get_int("num_kv_heads");
  d.head_dim = at.get_int("head_dim");
  d.window = at.get_int("window");
  d.scale = at.get_float("scale");
  d.softcap = at.get_float("softcap");
  d.k_bits = static_cast<int32_t>(at.get_int("k_bits"));
  d.v_bits = static_cast<int32_t>(at.get_int("v_bits"));
  d.p_bits = static_cast<int32_t>(at.get_int("p_bits"));
  d.q_dynamic = at.has("q_dynamic") && at.get_int("q_dynamic") != 0;
  d.rotating = at.has("k_rot_offset");
  if (d.kv_heads <= 0 || d.heads % d.kv_heads != 0)
    return invalid_argument(node_label(n), ": num_heads not a multiple of num_kv_heads");
  for (int bits : {d.k_bits, d.v_bits}) {
    if (bits != 4 && bits != 8 && bits != 16)
      return unimplemented(node_label(n), ": ", bits, "-bit KV cache (4, 8 or 16)");
  }
  if (d.k_bits == 4 && d.head_dim % 2 != 0)
    return unimplemented(node_label(n), ": int4 keys need an even head_dim");
  // Sliding-window layers keep a ring of window + chunk positions, global layers the cache.
  d.capacity = d.window > 0 ? std::min<int64_t>(o_.max_cache, d.window + o_.chunk) : o_.max_cache;
  if (d.rotating) {
    const Node& k = g_.node(n.operands[1].value);
    if (k.op != Op::kRope)
      return invalid_argument(node_label(n), ": k_rot_offset needs K from a rope node");
    auto it = rope_.find(n.operands[1].value);
    if (it == rope_.end()) return internal_error(node_label(n), ": K's rope was not planned");
    d.k_rope = it->second.desc;
  }
  const int64_t g = d.heads / d.kv_heads, hd = d.head_dim, H = d.heads, KV = d.kv_heads;
  ai->krow = align_up(isa::dtype_bytes(code_type(d.k_bits), hd), o_.target.dma_align);
  ai->vrow = align_up(isa::dtype_bytes(code_type(d.v_bits), hd), o_.target.dma_align);
  ai->params_bytes = 4 * isa::attn_params_floats(H, KV, hd);
  const int64_t P = o_.target.cores();
  auto bytes = [&](int64_t br, int64_t bc) {
    const int64_t rg = br * g;
    return 2 * br * H * hd * 2 /* q tile, y tile */ +
           KV * (rg * hd * 4 + rg * 4 * 2 + rg * 8 + rg * hd * 8) /* per-head state */ +
           ai->params_bytes + 2 * bc * ai->krow + 2 * bc * ai->vrow + rg * bc * 4 + P * rg * 4 +
           P * rg * (hd + 1) * 8 + rg * (hd + 1) * 8 + 32 * 16;
  };
  int64_t bc = hd <= 64 ? 256 : hd <= 128 ? 128 : 64;
  int64_t br = std::min<int64_t>(o_.chunk, 16);
  while (bytes(br, bc) > budget_ && (bc > 16 || br > 1)) {
    if (bc > 16 && (bc >= 4 * br || br == 1)) {
      bc /= 2;
    } else {
      br = std::max<int64_t>(1, br / 2);
    }
  }
  if (bytes(br, bc) > budget_) {
    return resource_exhausted(node_label(n),
                              ": the smallest attention tile (1 query row, 16 "
                              "cache positions) needs ",
                              bytes(br, bc), " bytes of SRAM; target '", o_.target.name, "' has ",
                              budget_);
  }
  ai->t = AttnTiles{br, bc};
  const int64_t kvw = KV * hd;
  ai->append_mt =
      row_tile(kvw * (2 + 2) + 2 * isa::dtype_bytes(DType::kI16, kvw), ai->params_bytes, o_.chunk);
  (void)id;
  b_.attentions.push_back(d);
  ai->desc = static_cast<int32_t>(b_.attentions.size() - 1);
  return ok_status();
}

int32_t Compiler::add_dram(const std::string& name, isa::Purpose p, DType t, int64_t bytes,
                           std::vector<int64_t> shape, bool per_slot) {
  isa::Buffer buf;
  buf.name = name;
  buf.space = isa::Space::kDram;
  buf.purpose = p;
  buf.dtype = t;
  buf.bytes = std::max<int64_t>(align_up(bytes, o_.target.dma_align), o_.target.dma_align);
  buf.shape = std::move(shape);
  if (per_slot) {
    buf.offset = slot_top_;  // relative; rebased once the weights are placed
    slot_top_ += buf.bytes;
    b_.buffers.push_back(std::move(buf));
    slot_buffers_.push_back(static_cast<int32_t>(b_.buffers.size() - 1));
  } else {
    buf.offset = weights_top_;
    weights_top_ += buf.bytes;
    b_.buffers.push_back(std::move(buf));
  }
  return static_cast<int32_t>(b_.buffers.size() - 1);
}

/// Little-endian stores into the image.
void put_f32(std::vector<uint8_t>& img, int64_t at, float v) {
  std::memcpy(img.data() + at, &v, 4);
}
void put_i32(std::vector<uint8_t>& img, int64_t at, int32_t v) {
  std::memcpy(img.data() + at, &v, 4);
}

void Compiler::layout_weights() {
  const auto& nodes = g_.nodes();
  const int64_t A = o_.target.dma_align;
  for (size_t i = 0; i < nodes.size(); ++i) {
    const Node& n = nodes[i];
    const int id = static_cast<int>(i);
    const size_t first = b_.buffers.size();
    if (n.op == Op::kRmsNorm) {
      const int64_t w = g_.find_weight(n.operands[1].weight)->type.num_elements();
      norm_[id].weight =
          add_dram(n.name + ".weight", isa::Purpose::kWeights, DType::kF32, 4 * w, {w}, false);
    } else if (n.op == Op::kAttention) {
      AttnInfo& ai = attn_[id];
      ai.params = add_dram(n.name + ".params", isa::Purpose::kWeights, DType::kF32, ai.params_bytes,
                           {ai.params_bytes / 4}, false);
    } else if (n.op == Op::kQLinear) {
      // Per channel tile: its K tiles' weight blocks, then the scale (and zero-point)
      // blocks (one per K tile when grouped), then the bias block.
      LinearInfo& li = lin_[id];
      const LinearTiles& t = li.t;
      const DType wt = li.w_bits == 4 ? DType::kI4 : DType::kI8;
      li.w_bytes = align_up(t.nt * isa::dtype_bytes(wt, t.kt), A);
      const int64_t sblk = align_up(t.nt * li.gt * 4, A);
      const int64_t bblk = align_up(t.nt * 4, A);
      const int64_t sblocks = li.group > 0 ? li.ktiles : 1;
      int64_t at = 0;
      for (int64_t nt = 0; nt < li.ntiles; ++nt) {
        for (int64_t kt = 0; kt < li.ktiles; ++kt, at += li.w_bytes) li.w_off.push_back(at);
        for (int64_t kt = 0; kt < sblocks; ++kt) {
          li.ws_off.push_back(at);
          at += sblk;
          if (li.zero) {
            li.wz_off.push_back(at);
            at += sblk;
          }
        }
        li.b_off.push_back(at);
        at += bblk;
      }
      li.buf = add_dram(n.name + ".w", isa::Purpose::kWeights, wt, at, {li.n, li.k}, false);
    }
    for (size_t j = first; j < b_.buffers.size(); ++j) b_.buffers[j].block = n.block;
  }
  b_.dram.weights = weights_top_;
}

Status Compiler::fill_weights(const ir::WeightReader& reader, const ir::Int8View& int8) {
  auto read = [&](const std::string& name, std::vector<float>* v) -> Status {
    const ir::Weight* w = g_.find_weight(name);
    if (w == nullptr) return invalid_argument("unknown weight '", name, "'");
    QBC_RETURN_IF_ERROR(reader(*w, v).with_context("weight '", name, "'"));
    if (static_cast<int64_t>(v->size()) != w->type.num_elements())
      return invalid_argument("weight '", name, "': read ", v->size(), " values, expected ",
                              w->type.num_elements());
    return ok_status();
  };
  for (const auto& [name, w] : g_.weights()) {
    if (w.role != ir::WeightRole::kHostEmbedding) continue;
    b_.embed_rows = w.type.dims[0];
    if (o_.with_weights) QBC_RETURN_IF_ERROR(read(name, &b_.embedding));
  }
  if (b_.embed_rows == 0) return invalid_argument("graph '", g_.name(), "' has no host embedding");
  if (!o_.with_weights) return ok_status();
  b_.image_base = 0;
  b_.image.assign(static_cast<size_t>(weights_top_), 0);
  std::vector<uint8_t>& img = b_.image;
  const auto& nodes = g_.nodes();
  std::vector<float> v, codes, scales, zeros, bias;
  for (size_t i = 0; i < nodes.size(); ++i) {
    const Node& n = nodes[i];
    const int id = static_cast<int>(i);
    if (n.op == Op::kRmsNorm) {
      QBC_RETURN_IF_ERROR(read(n.operands[1].weight, &v));
      const int64_t base = b_.buffers[static_cast<size_t>(norm_[id].weight)].offset;
      for (size_t j = 0; j < v.size(); ++j) put_f32(img, base + static_cast<int64_t>(4 * j), v[j]);
    } else if (n.op == Op::kAttention) {
      AttnInfo& ai = attn_[id];
      const isa::AttnDesc& d = b_.attentions[static_cast<size_t>(ai.desc)];
      const int64_t kvw = d.kv_heads * d.head_dim;
      int64_t at = b_.buffers[static_cast<size_t>(ai.params)].offset;
      auto put_list = [&](const char* key, int64_t count) -> Status {
        std::vector<double> x = n.attrs.has(key) ? n.attrs.get_floats(key) : std::vector<double>();
        if (!x.empty() && static_cast<int64_t>(x.size()) != count)
          return invalid_argument(node_label(n), ": ", key, " has ", x.size(), " values, expected ",
                                  count);
        for (int64_t j = 0; j < count; ++j) {
          const double val = x.empty() ? 0.0 : x[static_cast<size_t>(j)];
          if (!std::isfinite(val))
            return invalid_argument(node_label(n), ": ", key, " holds ", val);
          put_f32(img, at, static_cast<float>(val));
          at += 4;
        }
        return ok_status();
      };
      QBC_RETURN_IF_ERROR(put_list("q_scale", d.heads));
      QBC_RETURN_IF_ERROR(put_list("k_scale", kvw));
      QBC_RETURN_IF_ERROR(put_list("v_scale", kvw));
      QBC_RETURN_IF_ERROR(put_list("k_offset", kvw));
      QBC_RETURN_IF_ERROR(put_list("v_offset", kvw));
      QBC_RETURN_IF_ERROR(put_list("k_rot_offset", kvw));
    } else if (n.op == Op::kQLinear) {
      const LinearInfo& li = lin_[id];
      const LinearTiles& t = li.t;
      const DType wt = li.w_bits == 4 ? DType::kI4 : DType::kI8;
      const int64_t base = b_.buffers[static_cast<size_t>(li.buf)].offset;
      // The codes as stored (int8 in a sidecar) when the caller can view them, else as floats.
      const ir::Weight* cw = g_.find_weight(n.operands[1].weight);
      if (cw == nullptr) return invalid_argument("unknown weight '", n.operands[1].weight, "'");
      const int8_t* raw = int8 ? int8(*cw) : nullptr;
      if (raw == nullptr) QBC_RETURN_IF_ERROR(read(n.operands[1].weight, &codes));
      QBC_RETURN_IF_ERROR(read(n.operands[2].weight, &scales));
      if (li.zero) QBC_RETURN_IF_ERROR(read(n.operands[3].weight, &zeros));
      if (li.bias) QBC_RETURN_IF_ERROR(read(n.operands[li.zero ? 4 : 3].weight, &bias));
      if (static_cast<int64_t>(scales.size()) != li.n * li.groups)
        return invalid_argument(node_label(n), ": ", scales.size(), " weight scales, expected ",
                                li.n * li.groups);
      const double hi = li.w_bits == 4 ? 7.0 : 127.0;
      const int64_t sblocks = li.group > 0 ? li.ktiles : 1;
      for (int64_t nt = 0; nt < li.ntiles; ++nt) {
        for (int64_t kt = 0; kt < li.ktiles; ++kt) {
          const int64_t at = base + li.w_off[static_cast<size_t>(nt * li.ktiles + kt)];
          const int64_t k0 = kt * t.kt, kn = std::min(t.kt, li.k - k0);
          for (int64_t j = 0; j < t.nt; ++j) {
            const int64_t ch = nt * t.nt + j;
            if (ch >= li.n) break;
            const size_t row = static_cast<size_t>(ch * li.k + k0);
            if (raw != nullptr && wt == DType::kI8) {  // every int8 is an 8-bit code
              std::memcpy(&img[static_cast<size_t>(at + j * kn)], raw + row,
                          static_cast<size_t>(kn));
              continue;
            }
            for (int64_t kk = 0; kk < kn; ++kk) {
              const double c = raw != nullptr ? double{raw[row + static_cast<size_t>(kk)]}
                                              : double{codes[row + static_cast<size_t>(kk)]};
              // In range first (NaN fails it), then integral: a conversion and a compare per
              // code instead of a libm call (this loop sees every weight of the model).
              const bool in_range = c >= -hi - 1.0 && c <= hi;
              const int q = in_range ? static_cast<int>(c) : 0;
              if (!in_range || static_cast<double>(q) != c) {
                return invalid_argument(node_label(n), ": weight code ", c, " at [", ch, ", ",
                                        k0 + kk, "] is not a ", li.w_bits, "-bit integer");
              }
              // Dense [nt, kn] tile: rows of this K tile's width; int4 low nibble first.
              if (wt == DType::kI8) {
                img[static_cast<size_t>(at + j * kn + kk)] =
                    static_cast<uint8_t>(static_cast<int8_t>(q));
              } else {
                uint8_t& byte =
                    img[static_cast<size_t>(at + j * isa::dtype_bytes(wt, kn) + kk / 2)];
                const uint8_t nib = static_cast<uint8_t>(q & 0xF);
                byte = kk % 2 == 0 ? static_cast<uint8_t>((byte & 0xF0) | nib)
                                   : static_cast<uint8_t>((byte & 0x0F) | (nib << 4));
              }
            }
          }
        }
        for (int64_t kt = 0; kt < sblocks; ++kt) {
          const size_t bi = static_cast<size_t>(nt * sblocks + kt);
          const int64_t g0 = li.group > 0 ? kt * li.gt : 0;
          // Groups of this K tile (the last may hold fewer): blocks are dense [nt, gtk].
          const int64_t gtk = li.group > 0 ? cdiv(std::min(t.kt, li.k - kt * t.kt), li.group) : 1;
          for (int64_t j = 0; j < t.nt; ++j) {
            const int64_t ch = nt * t.nt + j;
            if (ch >= li.n) break;
            for (int64_t gg = 0; gg < gtk; ++gg) {
              const size_t src = static_cast<size_t>(ch * li.groups + g0 + gg);
              put_f32(img, base + li.ws_off[bi] + 4 * (j * gtk + gg), scales[src]);
              if (!li.zero) continue;
              const float z = zeros[src];
              if (z != std::nearbyint(z))
                return invalid_argument(node_label(n), ": zero point ", z, " is not an integer");
              put_i32(img, base + li.wz_off[bi] + 4 * (j * gtk + gg), static_cast<int32_t>(z));
            }
          }
        }
        for (int64_t j = 0; j < t.nt; ++j) {
          const int64_t ch = nt * t.nt + j;
          if (ch >= li.n) break;
          put_f32(img, base + li.b_off[static_cast<size_t>(nt)] + 4 * j,
                  li.bias ? bias[static_cast<size_t>(ch)] : 0.0f);
        }
      }
    }
  }
  return ok_status();
}

Status Compiler::plan_dram() {
  const auto& nodes = g_.nodes();
  const int64_t A = o_.target.dma_align;
  loc_.assign(nodes.size(), ValueLoc{});
  // KV caches, per slot.
  int64_t kv_bytes = 0;
  for (auto& [id, ai] : attn_) {
    const isa::AttnDesc& d = b_.attentions[static_cast<size_t>(ai.desc)];
    const Node& n = g_.node(id);
    ai.kcache =
        add_dram(n.name + ".kcache", isa::Purpose::kKv, code_type(d.k_bits),
                 d.kv_heads * d.capacity * ai.krow, {d.kv_heads, d.capacity, d.head_dim}, true);
    ai.vcache =
        add_dram(n.name + ".vcache", isa::Purpose::kKv, code_type(d.v_bits),
                 d.kv_heads * d.capacity * ai.vrow, {d.kv_heads, d.capacity, d.head_dim}, true);
    kv_bytes += b_.buffers[static_cast<size_t>(ai.kcache)].bytes +
                b_.buffers[static_cast<size_t>(ai.vcache)].bytes;
  }
  // IO.
  const int64_t hidden = g_.node(embeds_).type.dim(-1);
  const int64_t vocab = g_.node(output_).type.dim(-1);
  b_.hidden = hidden;
  b_.vocab = vocab;
  const int64_t in_stride = align_up(hidden * 2, A), out_stride = align_up(vocab * 4, A);
  b_.input = add_dram("io.inputs_embeds", isa::Purpose::kIo, DType::kF16, o_.chunk * in_stride,
                      {o_.chunk, hidden}, true);
  loc_[static_cast<size_t>(embeds_)] = ValueLoc{b_.input, 0, in_stride, hidden, DType::kF16};
  // Activations: first-fit by liveness over node order (a value lives from its node to its
  // last reader).
  std::vector<int> last(nodes.size(), -1);
  for (size_t i = 0; i < nodes.size(); ++i) {
    for (const ir::Operand& op : nodes[i].operands) {
      if (!op.is_weight()) last[static_cast<size_t>(op.value)] = static_cast<int>(i);
    }
  }
  // Slices alias their input: extend the input's life to the slice's readers.
  for (size_t i = nodes.size(); i-- > 0;) {
    if (nodes[i].op == Op::kSlice) {
      const int src = nodes[i].operands[0].value;
      last[static_cast<size_t>(src)] = std::max(last[static_cast<size_t>(src)], last[i]);
    }
  }
  struct Live {
    int64_t off, bytes;
    int end;
  };
  std::vector<Live> live;
  int64_t act_top = 0;
  std::vector<std::pair<int, int64_t>> act_values;  // (node, offset)
  std::vector<int64_t> act_bytes(nodes.size(), 0);
  for (size_t i = 0; i < nodes.size(); ++i) {
    const Node& n = nodes[i];
    if (n.op == Op::kInput || n.op == Op::kSlice || static_cast<int>(i) == output_) continue;
    live.erase(std::remove_if(live.begin(), live.end(),
                              [&](const Live& l) { return l.end < static_cast<int>(i); }),
               live.end());
    const bool f32 = n.part == ir::Part::kHead && n.op != Op::kRmsNorm &&
                     !(n.op == Op::kQLinear && n.attrs.get_int("out_fp16") != 0);
    const DType t = f32 ? DType::kF32 : DType::kF16;
    const int64_t width = n.type.dim(-1);
    const int64_t stride = align_up(isa::dtype_bytes(t, width), A);
    const int64_t bytes = o_.chunk * stride;
    std::sort(live.begin(), live.end(), [](const Live& a, const Live& b) { return a.off < b.off; });
    int64_t off = 0;
    for (const Live& l : live) {
      if (off + bytes <= l.off) break;
      off = std::max(off, l.off + l.bytes);
    }
    live.push_back(Live{off, bytes, last[i]});
    act_top = std::max(act_top, off + bytes);
    act_values.emplace_back(static_cast<int>(i), off);
    act_bytes[i] = bytes;
    loc_[i] = ValueLoc{-1, off, stride, width, t};
  }
  const int32_t act =
      add_dram("act", isa::Purpose::kActivations, DType::kF16, act_top, {act_top}, true);
  for (auto& [i, off] : act_values) {
    (void)off;
    loc_[static_cast<size_t>(i)].buf = act;
  }
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (nodes[i].op != Op::kSlice) continue;
    const ValueLoc& src = loc_[static_cast<size_t>(nodes[i].operands[0].value)];
    const int64_t start = nodes[i].attrs.get_int("start"), end = nodes[i].attrs.get_int("end");
    loc_[i] = ValueLoc{src.buf, src.col + isa::dtype_bytes(src.type, start), src.stride,
                       end - start, src.type};
  }
  const bool out_f32 =
      g_.node(output_).part == ir::Part::kHead &&
      !(g_.node(output_).op == Op::kQLinear && g_.node(output_).attrs.get_int("out_fp16") != 0);
  if (!out_f32)
    return unimplemented("graph output '", g_.node(output_).name,
                         "' is fp16; the backend writes fp32 logits from the head");
  b_.output = add_dram("io.logits", isa::Purpose::kIo, DType::kF32, o_.chunk * out_stride,
                       {o_.chunk, vocab}, true);
  loc_[static_cast<size_t>(output_)] = ValueLoc{b_.output, 0, out_stride, vocab, DType::kF32};
  // Attention merge scratch: per core partial maxes and sums of one row tile per KV head.
  int64_t scratch = 0;
  const int64_t P = o_.target.cores();
  for (auto& [id, ai] : attn_) {
    const isa::AttnDesc& d = b_.attentions[static_cast<size_t>(ai.desc)];
    const int64_t rg = ai.t.br * (d.heads / d.kv_heads);
    scratch = std::max(
        scratch, P * d.kv_heads * (align_up(rg * 4, A) + align_up(rg * (d.head_dim + 1) * 8, A)));
  }
  if (scratch > 0) {
    scratch_ =
        add_dram("scratch.merge", isa::Purpose::kScratch, DType::kI64, scratch, {scratch}, true);
  }
  // Place the per-slot region after the weights; slots follow each other.
  const int64_t base = align_up(weights_top_, 4096);
  const int64_t slot_bytes = align_up(slot_top_, 4096);
  for (int32_t bi : slot_buffers_) {
    isa::Buffer& buf = b_.buffers[static_cast<size_t>(bi)];
    buf.offset += base;
    buf.slot_stride = slot_bytes;
  }
  b_.dram.kv = kv_bytes * o_.batch;
  b_.dram.activations = b_.buffers[static_cast<size_t>(act)].bytes * o_.batch;
  b_.dram.scratch = (scratch > 0 ? b_.buffers[static_cast<size_t>(scratch_)].bytes : 0) * o_.batch;
  b_.dram.io = (b_.buffers[static_cast<size_t>(b_.input)].bytes +
                b_.buffers[static_cast<size_t>(b_.output)].bytes) *
               o_.batch;
  b_.dram.reserve = o_.target.dram_reserve;
  (void)act_bytes;
  return ok_status();
}

SramStage Compiler::stage(int core, const std::string& prefix) {
  return SramStage(&b_, core, o_.target.dma_align, &sram_peak_[static_cast<size_t>(core)],
                   prog_prefix_ + "s" + std::to_string(stage_) + "." + prefix);
}

void Compiler::barrier(Stream& s, int P, int32_t* id, int node) {
  if (P <= 1) return;
  s.emit(isa::Barrier{(*id)++, P}, Queue::kCompute, node, pass_id("lower-barriers"));
}

isa::Dma Compiler::load_rows(const ValueLoc& v, int32_t dst, const Expr& row0,
                             const Expr& rows) const {
  isa::Dma d;
  d.dst = ref(dst);
  d.src = ref(v.buf, Expr(v.col) + row0 * Expr(v.stride));
  d.rows = rows;
  d.row_bytes = isa::dtype_bytes(v.type, v.width);
  d.dst_stride = d.row_bytes;
  d.src_stride = v.stride;
  return d;
}

isa::Dma Compiler::store_rows(const ValueLoc& v, int32_t src, const Expr& row0,
                              const Expr& rows) const {
  isa::Dma d;
  d.src = ref(src);
  d.dst = ref(v.buf, Expr(v.col) + row0 * Expr(v.stride));
  d.rows = rows;
  d.row_bytes = isa::dtype_bytes(v.type, v.width);
  d.src_stride = d.row_bytes;
  d.dst_stride = v.stride;
  return d;
}

/// Row tiles dealt round-robin: core c of P takes tiles c, c + P, ... of ceil(seq / mt).
Expr round_robin_trip(int64_t mt, int c, int P) {
  return (Expr::sym(Sym::kSeq).ceildiv(Expr(mt)) - Expr(c)).ceildiv(Expr(P)).max(Expr(0));
}

void Compiler::lower_rows(const Node& n, int id, Stream& s, int c, int P, int64_t cap) {
  const int32_t pass = pass_id("lower-vector");
  const ValueLoc& y = loc_[static_cast<size_t>(id)];
  std::vector<const ValueLoc*> in;
  for (const ir::Operand& op : n.operands) {  // rope's positions come from the runtime values
    if (!op.is_weight() && op.value != positions_)
      in.push_back(&loc_[static_cast<size_t>(op.value)]);
  }
  const int64_t W = y.width;
  const int64_t eb = isa::dtype_bytes(y.type, 1);
  const int64_t wn =
      n.op == Op::kRmsNorm && n.attrs.get_int("group") > 0 ? n.attrs.get_int("group") : W;
  const int64_t fixed = n.op == Op::kRmsNorm ? 4 * wn : 0;
  const int64_t mt = row_tile(static_cast<int64_t>(in.size() + 1) * W * eb, fixed, cap);
  SramStage sram = stage(c, n.name);
  std::vector<int32_t> ibuf;
  for (size_t i = 0; i < in.size(); ++i)
    ibuf.push_back(sram.alloc("in" + std::to_string(i), in[i]->type, mt * in[i]->width * eb,
                              {mt, in[i]->width}));
  const int32_t obuf = sram.alloc("out", y.type, mt * W * eb, {mt, W});
  int32_t wbuf = -1;
  if (n.op == Op::kRmsNorm) {
    wbuf = sram.alloc("weight", DType::kF32, 4 * wn, {wn});
    isa::Dma d;
    d.dst = ref(wbuf);
    d.src = ref(norm_[id].weight);
    d.row_bytes = 4 * wn;
    d.dst_stride = d.src_stride = d.row_bytes;
    s.emit(d, Queue::kLoad, id, pass);
  }
  const int var = s.begin_loop(round_robin_trip(mt, c, P), id, pass);
  const Expr tile = Expr(c) + Expr(P) * Expr::loop(var);
  const Expr row0 = tile * Expr(mt);
  const Expr rows = (Expr::sym(Sym::kSeq) - row0).min(Expr(mt));
  for (size_t i = 0; i < in.size(); ++i)
    s.emit(load_rows(*in[i], ibuf[i], row0, rows), Queue::kLoad, id, pass);
  switch (n.op) {
    case Op::kRmsNorm: {
      isa::RmsNorm r;
      r.x = ref(ibuf[0]);
      r.weight = ref(wbuf);
      r.y = ref(obuf);
      r.rows = rows;
      r.width = W;
      r.group = n.attrs.get_int("group");
      r.eps = n.attrs.get_float("eps");
      r.unit_offset = static_cast<double>(n.attrs.get_int("unit_offset"));
      s.emit(r, Queue::kCompute, id, pass);
      break;
    }
    case Op::kRope: {
      isa::Rope r;
      r.x = ref(ibuf[0]);
      r.y = ref(obuf);
      r.rows = rows;
      r.pos0 = Expr::sym(Sym::kStart) + row0;
      r.freq_pos = Expr::sym(Sym::kStart) + Expr::sym(Sym::kSeq) - Expr(1);
      r.rope = rope_[id].desc;
      s.emit(r, Queue::kCompute, id, pass);
      break;
    }
    default: {
      isa::Eltwise e;
      e.a = ref(ibuf[0]);
      if (ibuf.size() > 1) e.b = ref(ibuf[1]);
      e.y = ref(obuf);
      e.rows = rows;
      e.width = W;
      e.type = y.type;
      if (n.op == Op::kAdd) {
        e.op = isa::EltOp::kAdd;
      } else if (n.op == Op::kGatedAct) {
        e.op = n.attrs.get_string("act") == "gelu_tanh" ? isa::EltOp::kGelu : isa::EltOp::kSilu;
      } else if (n.op == Op::kScale) {
        e.op = isa::EltOp::kScale;
        e.factor = static_cast<float>(n.attrs.get_float("factor"));
      } else {
        e.op = isa::EltOp::kSoftcap;
        e.factor = static_cast<float>(n.attrs.get_float("cap"));
      }
      s.emit(e, Queue::kCompute, id, pass);
      break;
    }
  }
  s.emit(store_rows(y, obuf, row0, rows), Queue::kStore, id, pass);
  s.end_loop();
}

void Compiler::lower_linear(const Node& n, int id, Stream& s, int c, int P, int64_t cap) {
  const int32_t pass = pass_id("lower-projections");
  const LinearInfo& li = lin_[id];
  const ValueLoc& x = loc_[static_cast<size_t>(n.operands[0].value)];
  const ValueLoc& y = loc_[static_cast<size_t>(id)];
  const int64_t a = c * li.ntiles / P, b = (c + 1) * li.ntiles / P;
  if (a == b) return;  // more cores than channel tiles: this core waits at the barrier
  const int64_t mt = std::min(li.t.mt, cap), nt = li.t.nt, K = li.k;
  const DType xt = li.in_bits == 16 ? DType::kI16 : DType::kI8;
  const DType wt = li.w_bits == 4 ? DType::kI4 : DType::kI8;
  const DType acct = li.in_bits == 16 ? DType::kI64 : DType::kI32;
  const DType yt = li.out_fp16 ? DType::kF16 : DType::kF32;
  const int64_t cb = isa::dtype_bytes(xt, 1), yb = isa::dtype_bytes(yt, 1);
  const int64_t accb = isa::dtype_bytes(acct, 1);
  const int64_t sblk = align_up(nt * li.gt * 4, o_.target.dma_align);
  SramStage sram = stage(c, n.name);
  const int32_t x16 = sram.alloc("x", DType::kF16, mt * K * 2, {mt, K});
  const int32_t codes = sram.alloc("codes", xt, mt * K * cb, {mt, K});
  const int32_t xs = sram.alloc("xscale", DType::kF32, mt * 4, {mt});
  const int32_t xz = sram.alloc("xzero", DType::kI32, mt * 4, {mt});
  const int32_t wbuf = sram.alloc("w", wt, 2 * li.w_bytes, {2, nt, li.t.kt});
  const int32_t wsb = sram.alloc("wscale", DType::kF32, 2 * sblk, {2, nt, li.gt});
  const int32_t wzb = li.zero ? sram.alloc("wzero", DType::kI32, 2 * sblk, {2, nt, li.gt}) : -1;
  const int32_t bb = li.bias ? sram.alloc("bias", DType::kF32, 2 * nt * 4, {2, nt}) : -1;
  const int32_t acc = sram.alloc("acc", acct, mt * nt * li.gt * accb, {mt, nt, li.gt});
  const int32_t fsum = sram.alloc("fsum", DType::kF32, mt * nt * 4, {mt, nt});
  const int32_t ybuf = sram.alloc("y", yt, 2 * mt * nt * yb, {2, mt, nt});
  const int var = s.begin_loop(Expr::sym(Sym::kSeq).ceildiv(Expr(mt)), id, pass);
  const Expr row0 = Expr::loop(var) * Expr(mt);
  const Expr rows = (Expr::sym(Sym::kSeq) - row0).min(Expr(mt));
  ValueLoc xin = x;
  s.emit(load_rows(xin, x16, row0, rows), Queue::kLoad, id, pass);
  isa::Quantize q;
  q.x = ref(x16);
  q.codes = ref(codes);
  q.scale = ref(xs);
  q.zero = ref(xz);
  q.rows = rows;
  q.k = K;
  q.bits = li.in_bits;
  q.mode = li.mode;
  q.static_scale = li.in_scale;
  q.static_zero = li.in_zero;
  s.emit(q, Queue::kCompute, id, pass);
  auto block_load = [&](int32_t dst, int64_t dst_off, int64_t src_off, int64_t bytes) {
    isa::Dma d;
    d.dst = ref(dst, Expr(dst_off));
    d.src = ref(li.buf, Expr(src_off));
    d.row_bytes = bytes;
    d.dst_stride = d.src_stride = bytes;
    s.emit(d, Queue::kLoad, id, pass);
  };
  int64_t wcount = 0;
  for (int64_t ti = a; ti < b; ++ti) {
    const int64_t u = ti - a, p = u % 2;
    const int64_t ntw = std::min(nt, li.n - ti * nt);
    if (li.bias) block_load(bb, p * nt * 4, li.b_off[static_cast<size_t>(ti)], nt * 4);
    if (li.group == 0) {
      block_load(wsb, p * sblk, li.ws_off[static_cast<size_t>(ti)], sblk);
      if (li.zero) block_load(wzb, p * sblk, li.wz_off[static_cast<size_t>(ti)], sblk);
    }
    for (int64_t kt = 0; kt < li.ktiles; ++kt, ++wcount) {
      const int64_t wp = wcount % 2;
      const int64_t k0 = kt * li.t.kt, kn = std::min(li.t.kt, K - k0);
      block_load(wbuf, wp * li.w_bytes, li.w_off[static_cast<size_t>(ti * li.ktiles + kt)],
                 li.w_bytes);
      const int64_t sp = li.group > 0 ? wp : p;
      if (li.group > 0) {
        block_load(wsb, wp * sblk, li.ws_off[static_cast<size_t>(ti * li.ktiles + kt)], sblk);
        if (li.zero)
          block_load(wzb, wp * sblk, li.wz_off[static_cast<size_t>(ti * li.ktiles + kt)], sblk);
      }
      const int64_t gt = li.group > 0 ? cdiv(kn, li.group) : 1;
      isa::MatMul m;
      m.x = ref(codes, Expr(k0 * cb));
      m.xzero = ref(xz);
      m.w = ref(wbuf, Expr(wp * li.w_bytes));
      if (li.zero) m.wzero = ref(wzb, Expr(sp * sblk));
      m.acc = ref(acc);
      m.rows = rows;
      m.n = nt;
      m.kt = kn;
      m.ldx = K;
      m.group = li.group;
      m.xtype = xt;
      m.wtype = wt;
      m.acctype = acct;
      m.accumulate = li.group == 0 && kt > 0;
      s.emit(m, Queue::kCompute, id, pass);
      if (li.group > 0 || kt == li.ktiles - 1) {
        isa::Requant r;
        r.acc = ref(acc);
        r.xscale = ref(xs);
        r.wscale = ref(wsb, Expr(sp * sblk));
        r.fsum = ref(fsum);
        if (li.bias) r.bias = ref(bb, Expr(p * nt * 4));
        r.y = ref(ybuf, Expr(p * mt * nt * yb));
        r.rows = rows;
        r.n = nt;
        r.gt = gt;
        r.ws_stride = gt;
        r.ldy = nt;
        r.acctype = acct;
        r.ytype = yt;
        r.first = li.group == 0 || kt == 0;
        r.last = kt == li.ktiles - 1;
        s.emit(r, Queue::kCompute, id, pass);
      }
    }
    isa::Dma st;
    st.src = ref(ybuf, Expr(p * mt * nt * yb));
    st.dst = ref(y.buf, Expr(y.col + ti * nt * yb) + row0 * Expr(y.stride));
    st.rows = rows;
    st.row_bytes = ntw * yb;
    st.src_stride = nt * yb;
    st.dst_stride = y.stride;
    s.emit(st, Queue::kStore, id, pass);
  }
  s.end_loop();
}

void Compiler::lower_attention(const Node& n, int id, Stream& s, int c, int P, int64_t cap,
                               int32_t* bar) {
  const int32_t pass_kv = pass_id("lower-kv-append");
  const int32_t pass = pass_id("lower-attention");
  const AttnInfo& ai = attn_[id];
  const isa::AttnDesc& d = b_.attentions[static_cast<size_t>(ai.desc)];
  const int64_t H = d.heads, KV = d.kv_heads, hd = d.head_dim, g = H / KV, kvw = KV * hd;
  const DType kt = code_type(d.k_bits), vt = code_type(d.v_bits);
  const ValueLoc& qv = loc_[static_cast<size_t>(n.operands[0].value)];
  const ValueLoc& kv = loc_[static_cast<size_t>(n.operands[1].value)];
  const ValueLoc& vv = loc_[static_cast<size_t>(n.operands[2].value)];
  const ValueLoc& y = loc_[static_cast<size_t>(id)];
  const Expr start = Expr::sym(Sym::kStart), seq = Expr::sym(Sym::kSeq);
  auto load_params = [&](int32_t dst, int32_t node_pass) {
    isa::Dma dm;
    dm.dst = ref(dst);
    dm.src = ref(ai.params);
    dm.row_bytes = ai.params_bytes;
    dm.dst_stride = dm.src_stride = dm.row_bytes;
    s.emit(dm, Queue::kLoad, id, node_pass);
  };
  // 1. Append this call's keys and values to the cache (row tiles round-robin).
  {
    const int64_t mt = std::min(ai.append_mt, cap);
    SramStage sram = stage(c, n.name + ".append");
    const int32_t k16 = sram.alloc("k", DType::kF16, mt * kvw * 2, {mt, kvw});
    const int32_t v16 = sram.alloc("v", DType::kF16, mt * kvw * 2, {mt, kvw});
    const int32_t kc = sram.alloc("kcodes", kt, isa::dtype_bytes(kt, mt * kvw), {mt, kvw});
    const int32_t vc = sram.alloc("vcodes", vt, isa::dtype_bytes(vt, mt * kvw), {mt, kvw});
    const int32_t prm = sram.alloc("params", DType::kF32, ai.params_bytes, {ai.params_bytes / 4});
    load_params(prm, pass_kv);
    const int var = s.begin_loop(round_robin_trip(mt, c, P), id, pass_kv);
    const Expr row0 = (Expr(c) + Expr(P) * Expr::loop(var)) * Expr(mt);
    const Expr rows = (seq - row0).min(Expr(mt));
    s.emit(load_rows(kv, k16, row0, rows), Queue::kLoad, id, pass_kv);
    s.emit(load_rows(vv, v16, row0, rows), Queue::kLoad, id, pass_kv);
    isa::KvQuant q;
    q.k = ref(k16);
    q.v = ref(v16);
    q.kcodes = ref(kc);
    q.vcodes = ref(vc);
    q.params = ref(prm);
    q.rows = rows;
    q.pos0 = start + row0;
    q.attn = ai.desc;
    s.emit(q, Queue::kCompute, id, pass_kv);
    for (int64_t h = 0; h < KV; ++h) {
      for (int which = 0; which < 2; ++which) {
        const DType t = which == 0 ? kt : vt;
        isa::Dma st;
        st.src = ref(which == 0 ? kc : vc, Expr(isa::dtype_bytes(t, h * hd)));
        st.dst = ref(which == 0 ? ai.kcache : ai.vcache,
                     Expr(h * d.capacity * (which == 0 ? ai.krow : ai.vrow)));
        st.rows = rows;
        st.row_bytes = isa::dtype_bytes(t, hd);
        st.src_stride = isa::dtype_bytes(t, kvw);
        st.ring_rows = d.capacity;
        st.ring_stride = which == 0 ? ai.krow : ai.vrow;
        st.ring_row0 = start + row0;
        s.emit(st, Queue::kStore, id, pass_kv);
      }
    }
    s.end_loop();
  }
  barrier(s, P, bar, id);
  ++stage_;
  // 2. Attention over the cache: query row tiles of br rows, cache chunks of bc positions
  //    dealt round-robin to the cores; pass A takes the exact row max, pass B the integer
  //    exponent sums and P·V; partials merge across cores through DRAM scratch.
  const int64_t br = std::min(ai.t.br, cap), bc = ai.t.bc, rg = br * g;
  SramStage sram = stage(c, n.name);
  const int32_t qt = sram.alloc("q", DType::kF16, br * H * hd * 2, {br, H * hd});
  const int32_t yt = sram.alloc("y", DType::kF16, br * H * hd * 2, {br, H * hd});
  const int32_t prm = sram.alloc("params", DType::kF32, ai.params_bytes, {ai.params_bytes / 4});
  const int64_t kbytes = isa::dtype_bytes(kt, bc * hd), vbytes = isa::dtype_bytes(vt, bc * hd);
  const int32_t kb = sram.alloc("kchunk", kt, 2 * kbytes, {2, bc, hd});
  const int32_t vb = sram.alloc("vchunk", vt, 2 * vbytes, {2, bc, hd});
  const int32_t sc = sram.alloc("scores", DType::kF32, rg * bc * 4, {rg, bc});
  std::vector<int32_t> qc, mq, rmax, sum;
  for (int64_t h = 0; h < KV; ++h) {
    const std::string hs = std::to_string(h);
    qc.push_back(sram.alloc("qcodes" + hs, DType::kI32, rg * hd * 4, {rg, hd}));
    mq.push_back(sram.alloc("mq" + hs, DType::kF32, rg * 4, {rg}));
    rmax.push_back(sram.alloc("rowmax" + hs, DType::kF32, rg * 4, {rg}));
    sum.push_back(sram.alloc("sums" + hs, DType::kI64, rg * (hd + 1) * 8, {rg, hd + 1}));
  }
  const int64_t A = o_.target.dma_align;
  const int64_t mstride = align_up(rg * 4, A), sstride = align_up(rg * (hd + 1) * 8, A);
  const int64_t sum_base = static_cast<int64_t>(o_.target.cores()) * KV * mstride;
  int32_t mparts = -1, sparts = -1;
  if (P > 1) {
    mparts = sram.alloc("max_parts", DType::kF32, P * rg * 4, {P, rg});
    sparts = sram.alloc("sum_parts", DType::kI64, P * rg * (hd + 1) * 8, {P, rg, hd + 1});
  }
  load_params(prm, pass);
  const int rv = s.begin_loop(seq.ceildiv(Expr(br)), id, pass);
  const Expr row0 = Expr::loop(rv) * Expr(br);
  const Expr rows = (seq - row0).min(Expr(br));
  const Expr qpos0 = start + row0;
  s.emit(load_rows(qv, qt, row0, rows), Queue::kLoad, id, pass);
  for (int64_t h = 0; h < KV; ++h) {
    isa::QueryPrep qp;
    qp.q = ref(qt, Expr(h * g * hd * 2));
    qp.params = ref(prm);
    qp.qcodes = ref(qc[static_cast<size_t>(h)]);
    qp.mq = ref(mq[static_cast<size_t>(h)]);
    qp.rows = rows;
    qp.kv_head = h;
    qp.attn = ai.desc;
    s.emit(qp, Queue::kCompute, id, pass);
    s.emit(isa::Fill{ref(rmax[static_cast<size_t>(h)]), Expr(rg), DType::kF32,
                     -std::numeric_limits<double>::infinity()},
           Queue::kCompute, id, pass);
    s.emit(isa::Fill{ref(sum[static_cast<size_t>(h)]), Expr(rg * (hd + 1)), DType::kI64, 0.0},
           Queue::kCompute, id, pass);
  }
  // Chunks the row tile sees: from the window's first position (or 0) to its last query.
  const Expr last_q = qpos0 + rows - Expr(1);
  const Expr lo = d.window > 0 ? (qpos0 - Expr(d.window - 1)).max(Expr(0)) : Expr(0);
  const Expr jf = lo.floordiv(Expr(bc));
  const Expr count = last_q.floordiv(Expr(bc)) - jf + Expr(1);
  const Expr trip = (count - Expr(c)).ceildiv(Expr(P)).max(Expr(0));
  auto chunk_loop = [&](int64_t h, bool with_v, isa::MaxMode mode) {
    const int cv = s.begin_loop(trip, id, pass);
    const Expr j = jf + Expr(c) + Expr(P) * Expr::loop(cv);
    const Expr kpos0 = j * Expr(bc);
    const Expr par = Expr::loop(cv).mod(Expr(2));
    auto chunk_dma = [&](int32_t dst, int64_t bytes, int32_t cache, int64_t row, DType t) {
      isa::Dma dm;
      dm.dst = ref(dst, par * Expr(bytes));
      dm.src = ref(cache, Expr(h * d.capacity * row));
      dm.rows = Expr(bc);
      dm.row_bytes = isa::dtype_bytes(t, hd);
      dm.dst_stride = dm.row_bytes;
      dm.ring_rows = d.capacity;
      dm.ring_stride = row;
      dm.ring_row0 = kpos0;
      s.emit(dm, Queue::kLoad, id, pass);
    };
    chunk_dma(kb, kbytes, ai.kcache, ai.krow, kt);
    if (with_v) chunk_dma(vb, vbytes, ai.vcache, ai.vrow, vt);
    isa::QkScores qk;
    qk.qcodes = ref(qc[static_cast<size_t>(h)]);
    qk.mq = ref(mq[static_cast<size_t>(h)]);
    qk.q = ref(qt, Expr(h * g * hd * 2));
    qk.kcodes = ref(kb, par * Expr(kbytes));
    qk.params = ref(prm);
    qk.scores = ref(sc);
    qk.rowmax = ref(rmax[static_cast<size_t>(h)]);
    qk.rows = rows;
    qk.qpos0 = qpos0;
    qk.kpos0 = kpos0;
    qk.bc = bc;
    qk.kv_head = h;
    qk.max_mode = mode;
    qk.attn = ai.desc;
    s.emit(qk, Queue::kCompute, id, pass);
    if (with_v) {
      isa::ExpAccum e;
      e.scores = ref(sc);
      e.rowmax = ref(rmax[static_cast<size_t>(h)]);
      e.vcodes = ref(vb, par * Expr(vbytes));
      e.esum = ref(sum[static_cast<size_t>(h)]);
      e.acc = ref(sum[static_cast<size_t>(h)], Expr(rg * 8));
      e.rows = rows;
      e.bc = bc;
      e.attn = ai.desc;
      s.emit(e, Queue::kCompute, id, pass);
    }
    s.end_loop();
  };
  auto scratch_dma = [&](bool store, int32_t sram_buf, int64_t dram_off, int64_t bytes,
                         int64_t parts, int64_t stride) {
    isa::Dma dm;
    if (store) {
      dm.src = ref(sram_buf);
      dm.dst = ref(scratch_, Expr(dram_off));
    } else {
      dm.dst = ref(sram_buf);
      dm.src = ref(scratch_, Expr(dram_off));
    }
    dm.rows = Expr(parts);
    dm.row_bytes = bytes;
    (store ? dm.dst_stride : dm.src_stride) = stride;
    (store ? dm.src_stride : dm.dst_stride) = bytes;
    s.emit(dm, store ? Queue::kStore : Queue::kLoad, id, pass);
  };
  for (int64_t h = 0; h < KV; ++h) chunk_loop(h, false, isa::MaxMode::kUpdate);
  if (P > 1) {
    for (int64_t h = 0; h < KV; ++h)
      scratch_dma(true, rmax[static_cast<size_t>(h)], (c * KV + h) * mstride, rg * 4, 1, mstride);
    barrier(s, P, bar, id);
    for (int64_t h = 0; h < KV; ++h) {
      scratch_dma(false, mparts, h * mstride, rg * 4, P, KV * mstride);
      isa::Merge m;
      m.op = isa::MergeOp::kMax;
      m.parts = ref(mparts);
      m.out = ref(rmax[static_cast<size_t>(h)]);
      m.parts_count = P;
      m.count = rg;
      m.part_stride = rg;
      s.emit(m, Queue::kCompute, id, pass);
    }
  }
  for (int64_t h = 0; h < KV; ++h) chunk_loop(h, true, isa::MaxMode::kNone);
  if (P > 1) {
    for (int64_t h = 0; h < KV; ++h)
      scratch_dma(true, sum[static_cast<size_t>(h)], sum_base + (c * KV + h) * sstride,
                  rg * (hd + 1) * 8, 1, sstride);
    barrier(s, P, bar, id);
  }
  // Outputs: KV heads in blocks whose columns are a whole number of DMA-aligned bytes; the
  // owner of a block (blocks dealt round-robin) merges, normalises and stores it.
  int64_t hb = 1;
  while (hb < KV && ((hb * g * hd * 2) % o_.target.dma_align != 0 || KV % hb != 0)) ++hb;
  for (int64_t h0 = 0; h0 < KV; h0 += hb) {
    if ((h0 / hb) % P != c) continue;
    for (int64_t h = h0; h < h0 + hb; ++h) {
      int32_t src = sum[static_cast<size_t>(h)];
      if (P > 1) {
        scratch_dma(false, sparts, sum_base + h * sstride, rg * (hd + 1) * 8, P, KV * sstride);
        isa::Merge m;
        m.op = isa::MergeOp::kSum;
        m.parts = ref(sparts);
        m.out = ref(src);
        m.parts_count = P;
        m.count = rg * (hd + 1);
        m.part_stride = rg * (hd + 1);
        s.emit(m, Queue::kCompute, id, pass);
      }
      isa::AttnOut o;
      o.acc = ref(src, Expr(rg * 8));
      o.esum = ref(src);
      o.params = ref(prm);
      o.y = ref(yt, Expr(h * g * hd * 2));
      o.rows = rows;
      o.kv_head = h;
      o.attn = ai.desc;
      s.emit(o, Queue::kCompute, id, pass);
    }
    isa::Dma st;
    st.src = ref(yt, Expr(h0 * g * hd * 2));
    st.dst = ref(y.buf, Expr(y.col + h0 * g * hd * 2) + row0 * Expr(y.stride));
    st.rows = rows;
    st.row_bytes = hb * g * hd * 2;
    st.src_stride = H * hd * 2;
    st.dst_stride = y.stride;
    s.emit(st, Queue::kStore, id, pass);
  }
  s.end_loop();
}

Status Compiler::lower(const ModeRequest& m, isa::Phase phase, isa::Program* prog) {
  prog->phase = phase;
  prog->max_seq = phase == isa::Phase::kPrefill ? o_.chunk : 1;
  const int64_t cap = prog->max_seq;
  const int P = m.cores;
  prog_prefix_ = std::string(isa::scheme_name(m.scheme)) + "." + isa::phase_name(phase) + ".";
  const auto& nodes = g_.nodes();
  for (int c = 0; c < P; ++c) {
    isa::CoreProgram cp;
    cp.core = c;
    Stream s(&cp.code);
    int32_t bar = 0;
    stage_ = 0;
    for (size_t i = 0; i < nodes.size(); ++i) {
      const Node& n = nodes[i];
      const int id = static_cast<int>(i);
      switch (n.op) {
        case Op::kInput:
        case Op::kSlice:
          continue;
        case Op::kQLinear:
          lower_linear(n, id, s, c, P, cap);
          break;
        case Op::kAttention:
          lower_attention(n, id, s, c, P, cap, &bar);
          break;
        case Op::kLinear:
          return internal_error(node_label(n), ": float linear reached lowering");
        default:
          lower_rows(n, id, s, c, P, cap);
          break;
      }
      ++stage_;
      barrier(s, P, &bar, id);
    }
    prog->cores.push_back(std::move(cp));
  }
  return ok_status();
}

Status Compiler::plan_tiles() {
  QBC_RETURN_IF_ERROR(ir::verify(g_));
  QBC_RETURN_IF_ERROR(check());
  const Target& t = o_.target;
  b_.target = t.name;
  b_.target_cores = t.cores();
  b_.target_clusters = t.clusters;
  b_.sram_bytes = t.sram_bytes;
  b_.dram_bytes = t.dram_bytes;
  b_.dma_align = t.dma_align;
  b_.max_cache = o_.max_cache;
  b_.chunk = o_.chunk;
  b_.batch = o_.batch;
  budget_ = t.sram_bytes;
  sram_peak_.assign(static_cast<size_t>(t.cores()), 0);
  for (const Node& n : g_.nodes()) b_.nodes.push_back(n.name);
  const auto& nodes = g_.nodes();
  for (size_t i = 0; i < nodes.size(); ++i) {
    const Node& n = nodes[i];
    const int id = static_cast<int>(i);
    if (n.op == Op::kRope) {
      QBC_ASSIGN_OR_RETURN(const ir::RopeParams rp, ir::rope_params_of(n));
      isa::RopeDesc r;
      r.heads = rp.num_heads;
      r.head_dim = rp.head_dim;
      r.rotary_dim = rp.rotary_dim;
      r.inv_freq = rp.inv_freq;
      r.long_inv_freq = rp.long_inv_freq;
      r.attention_factor = rp.attention_factor;
      r.dynamic_factor = rp.dynamic_factor;
      r.original_max_positions = rp.original_max_positions;
      r.theta = rp.theta;
      b_.ropes.push_back(std::move(r));
      rope_[id].desc = static_cast<int32_t>(b_.ropes.size() - 1);
    } else if (n.op == Op::kQLinear) {
      QBC_RETURN_IF_ERROR(plan_linear(n, &lin_[id]));
    } else if (n.op == Op::kAttention) {
      QBC_RETURN_IF_ERROR(plan_attention(id, n, &attn_[id]));
    }
  }
  return ok_status();
}

Status Compiler::plan_memory() {
  layout_weights();
  QBC_RETURN_IF_ERROR(plan_dram());
  // Does it fit? Decided before any weight is read or program lowered.
  if (!o_.probe && o_.fit_check) QBC_RETURN_IF_ERROR(check_fit(b_, memory_report(b_)));
  return ok_status();
}

Status Compiler::lower_all() {
  for (const ModeRequest& m : o_.modes) {
    isa::Mode mode;
    mode.scheme = m.scheme;
    mode.cores_per_instance = m.cores;
    mode.instances = m.instances;
    QBC_RETURN_IF_ERROR(lower(m, isa::Phase::kPrefill, &mode.prefill));
    QBC_RETURN_IF_ERROR(lower(m, isa::Phase::kDecode, &mode.decode));
    b_.modes.push_back(std::move(mode));
  }
  return assign_tokens(b_);
}

/// V9 (docs/npu.md): the same graph compiled for twice the cache has the same SRAM
/// allocations and the same instruction streams' lengths; only DRAM sizes and trip counts
/// change.
Status Compiler::check_context(const ir::WeightReader& reader) {
  Options probe = o_;
  probe.max_cache = o_.max_cache * 2;
  probe.with_weights = false;
  probe.probe = true;
  Compiler other(g_, probe);
  isa::Bundle pb;
  QBC_RETURN_IF_ERROR(other.plan_tiles());
  QBC_RETURN_IF_ERROR(other.plan_memory());
  QBC_RETURN_IF_ERROR(other.fill_weights(reader, {}));
  QBC_RETURN_IF_ERROR(other.lower_all());
  const isa::Bundle& a = b_;
  const isa::Bundle& c = other.b_;
  auto sram = [](const isa::Bundle& x) {
    std::vector<const isa::Buffer*> v;
    for (const isa::Buffer& buf : x.buffers) {
      if (buf.space == isa::Space::kSram) v.push_back(&buf);
    }
    return v;
  };
  const auto sa = sram(a), sc = sram(c);
  const std::string where = "V9 (SRAM independent of the context): cache " +
                            std::to_string(o_.max_cache) + " vs " +
                            std::to_string(probe.max_cache) + ": ";
  if (sa.size() != sc.size()) {
    return internal_error(where, sa.size(), " SRAM buffers vs ", sc.size());
  }
  for (size_t i = 0; i < sa.size(); ++i) {
    if (sa[i]->name != sc[i]->name || sa[i]->offset != sc[i]->offset ||
        sa[i]->bytes != sc[i]->bytes || sa[i]->core != sc[i]->core) {
      return internal_error(where, "SRAM buffer '", sa[i]->name, "' is ", sa[i]->bytes,
                            " bytes at ", sa[i]->offset, ", but '", sc[i]->name, "' ", sc[i]->bytes,
                            " bytes at ", sc[i]->offset);
    }
  }
  for (size_t m = 0; m < a.modes.size(); ++m) {
    for (int ph = 0; ph < 2; ++ph) {
      const isa::Program& pa = ph == 0 ? a.modes[m].prefill : a.modes[m].decode;
      const isa::Program& pc = ph == 0 ? c.modes[m].prefill : c.modes[m].decode;
      for (size_t k = 0; k < pa.cores.size(); ++k) {
        const std::vector<isa::Instr>& ca = pa.cores[k].code;
        const std::vector<isa::Instr>& cc = pc.cores[k].code;
        if (ca.size() != cc.size()) {
          size_t i = 0;
          while (i < ca.size() && i < cc.size() && ca[i].op.index() == cc[i].op.index() &&
                 ca[i].node == cc[i].node)
            ++i;
          return internal_error(
              where, isa::scheme_name(a.modes[m].scheme), " ", isa::phase_name(pa.phase), " core ",
              k, " has ", ca.size(), " instructions vs ", cc.size(), "; first difference at #", i,
              ": ", i < ca.size() ? isa::print_instr(a, ca[i]) : std::string("(end)"), " vs ",
              i < cc.size() ? isa::print_instr(c, cc[i]) : std::string("(end)"));
        }
      }
    }
  }
  return ok_status();
}

/// The backend's unit for the pass manager: the compiler state and the bundle it builds.
struct Context {
  static constexpr const char* kStage = "npu";
  static constexpr const char* kDumpExtension = "npu.txt";
  enum : pass::ResourceSet { kTiles = 1, kMemory = 2, kImage = 4, kPrograms = 8 };
  Compiler* c = nullptr;
  const ir::WeightReader* reader = nullptr;
  const ir::Int8View* codes = nullptr;
  pass::ResourceSet have = 0;

  static std::string describe(pass::ResourceSet r) {
    std::string out;
    const std::pair<pass::ResourceSet, const char*> names[] = {{kTiles, "tile plan"},
                                                               {kMemory, "memory plan"},
                                                               {kImage, "weight image"},
                                                               {kPrograms, "programs"}};
    for (const auto& [bit, name] : names) {
      if ((r & bit) != 0) out += (out.empty() ? "" : ", ") + std::string(name);
    }
    return out;
  }
  pass::ResourceSet available() const { return have; }
  Status health() const { return ok_status(); }
  /// The program verifier (docs/npu.md V1..V8) once programs exist.
  Status verify() const {
    if ((have & kPrograms) == 0 || !c->options().verify) return ok_status();
    return isa::verify(c->bundle());
  }
  StatusOr<std::string> dump_text() const { return isa::print_bundle(c->bundle()); }
};

/// One backend pass: a named step of the Compiler with what it needs and provides.
class StepPass final : public pass::Pass<Context> {
 public:
  StepPass(std::string name, pass::ResourceSet needs, pass::ResourceSet provides,
           std::function<Status(Context&)> fn)
      : name_(std::move(name)), needs_(needs), provides_(provides), fn_(std::move(fn)) {}
  std::string name() const override { return name_; }
  pass::ResourceSet needs() const override { return needs_; }
  pass::ResourceSet provides() const override { return provides_; }
  StatusOr<bool> run(Context& ctx) override {
    QBC_RETURN_IF_ERROR(fn_(ctx));
    ctx.have |= provides_;
    return provides_ != 0;
  }

 private:
  std::string name_;
  pass::ResourceSet needs_, provides_;
  std::function<Status(Context&)> fn_;
};

}  // namespace

std::vector<std::string> backend_passes() {
  return {"plan-tiles", "plan-memory", "fill-weights", "lower", "check-context"};
}

StatusOr<isa::Bundle> compile(const ir::Graph& graph, const ir::WeightReader& weights,
                              const Options& options, const ir::Int8View& codes) {
  Compiler c(graph, options);
  Context ctx;
  ctx.c = &c;
  ctx.reader = &weights;
  ctx.codes = &codes;
  pass::PassManager<Context> pm;
  using C = Context;
  pm.add(std::make_unique<StepPass>("plan-tiles", 0, C::kTiles,
                                    [](C& x) { return x.c->plan_tiles(); }));
  pm.add(std::make_unique<StepPass>("plan-memory", C::kTiles, C::kMemory,
                                    [](C& x) { return x.c->plan_memory(); }));
  pm.add(std::make_unique<StepPass>("fill-weights", C::kMemory, C::kImage,
                                    [](C& x) { return x.c->fill_weights(*x.reader, *x.codes); }));
  if (!options.plan_only) {
    pm.add(std::make_unique<StepPass>("lower", C::kTiles | C::kMemory, C::kPrograms,
                                      [](C& x) { return x.c->lower_all(); }));
  }
  if (!options.plan_only && options.verify) {
    pm.add(std::make_unique<StepPass>("check-context", C::kPrograms, 0,
                                      [](C& x) { return x.c->check_context(*x.reader); }));
  }
  QBC_RETURN_IF_ERROR(pm.run(ctx));
  return c.take();
}

}  // namespace qbc::npu
