// fill-weights (docs/npu.md "Passes", "Weight image"): the host embedding, and the DRAM
// weight image in the layout plan-memory chose: RMSNorm weights as fp32, each attention's
// fp32 parameter block (q/k/v scales, k/v offsets, rotating key offsets), and each qlinear's
// tiles (dense [nt, kt] code blocks, int4 two per byte low nibble first; then scale,
// zero-point and bias blocks). A host embedding the caller can view as stored bf16
// (Context::bf16) is held as that view, not copied. Without a weight reader (plans, the fit
// check, the context-independence probe) only the embedding's shape is recorded and the image
// stays empty.
#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "backend.h"
#include "compact_weights.h"
#include "passes.h"
#include "qbc/numerics/embedding_rows.h"
#include "qbc/numerics/fp16.h"

namespace qbc::npu {
namespace {

using ir::Node;
using ir::Op;
using isa::DType;

/// Little-endian stores into the image.
void put_f32(std::vector<uint8_t>& img, int64_t at, float v) {
  std::memcpy(img.data() + at, &v, 4);
}
void put_i32(std::vector<uint8_t>& img, int64_t at, int32_t v) {
  std::memcpy(img.data() + at, &v, 4);
}
void put_f16(std::vector<uint8_t>& img, int64_t at, uint16_t bits) {
  std::memcpy(img.data() + at, &bits, 2);
}
/// Element `i` of a packed int4 block at `at` (low nibble first).
void put_i4(std::vector<uint8_t>& img, int64_t at, int64_t i, int32_t v) {
  uint8_t& byte = img[static_cast<size_t>(at + i / 2)];
  const uint8_t nib = static_cast<uint8_t>(v & 0xF);
  byte = i % 2 == 0 ? static_cast<uint8_t>((byte & 0xF0) | nib)
                    : static_cast<uint8_t>((byte & 0x0F) | (nib << 4));
}

/// Fills the image of one compile.
class Filler {
 public:
  explicit Filler(Context& cx) : cx_(cx), img_(cx.b.image) {}

  Status read(const std::string& name, std::vector<float>* v) const;
  Status norm(const Node& n, int id);
  Status layer_norm(const Node& n, int id);
  Status attention(const Node& n, int id);
  Status linear(const Node& n, const LinearPlan& li);

 private:
  Status codes(const Node& n, const LinearPlan& li, int64_t nt, const int8_t* raw);
  Status scales(const Node& n, const LinearPlan& li, int64_t nt);
  Status put_scale(const Node& n, bool compact, int64_t at, int64_t e, float s, int64_t ch);
  int64_t offset(int32_t buf) const { return cx_.b.buffers[static_cast<size_t>(buf)].offset; }

  Context& cx_;
  std::vector<uint8_t>& img_;
  std::vector<float> v_, codes_, scales_, zeros_, mins_, bias_;
};

Status Filler::read(const std::string& name, std::vector<float>* v) const {
  const ir::Weight* w = cx_.g.find_weight(name);
  if (w == nullptr) return invalid_argument("unknown weight '", name, "'");
  QBC_RETURN_IF_ERROR((*cx_.weights)(*w, v).with_context("weight '", name, "'"));
  if (static_cast<int64_t>(v->size()) != w->type.num_elements())
    return invalid_argument("weight '", name, "': read ", v->size(), " values, expected ",
                            w->type.num_elements());
  return ok_status();
}

Status Filler::norm(const Node& n, int id) {
  QBC_RETURN_IF_ERROR(read(n.operands[1].weight, &v_));
  const int64_t base = offset(cx_.plan.nodes[static_cast<size_t>(id)].norm_weight);
  for (size_t j = 0; j < v_.size(); ++j) put_f32(img_, base + static_cast<int64_t>(4 * j), v_[j]);
  return ok_status();
}

/// layer_norm's parameters: the weight row, then the bias row (zeros without a bias).
Status Filler::layer_norm(const Node& n, int id) {
  const int64_t base = offset(cx_.plan.nodes[static_cast<size_t>(id)].norm_weight);
  QBC_RETURN_IF_ERROR(read(n.operands[1].weight, &v_));
  const int64_t w = static_cast<int64_t>(v_.size());
  for (int64_t j = 0; j < w; ++j) put_f32(img_, base + 4 * j, v_[static_cast<size_t>(j)]);
  if (n.operands.size() < 3) return ok_status();  // the image starts zeroed
  QBC_RETURN_IF_ERROR(read(n.operands[2].weight, &v_));
  for (int64_t j = 0; j < w; ++j) put_f32(img_, base + 4 * (w + j), v_[static_cast<size_t>(j)]);
  return ok_status();
}

Status Filler::attention(const Node& n, int id) {
  const AttentionPlan& ai = cx_.plan.nodes[static_cast<size_t>(id)].attention;
  const int64_t kvw = ai.kv_heads * ai.head_dim;
  int64_t at = offset(ai.params);
  auto put_list = [&](const char* key, int64_t count) -> Status {
    std::vector<double> x = n.attrs.has(key) ? n.attrs.get_floats(key) : std::vector<double>();
    if (!x.empty() && static_cast<int64_t>(x.size()) != count)
      return invalid_argument(ir::describe(n), ": ", key, " has ", x.size(), " values, expected ",
                              count);
    for (int64_t j = 0; j < count; ++j) {
      const double val = x.empty() ? 0.0 : x[static_cast<size_t>(j)];
      if (!std::isfinite(val)) return invalid_argument(ir::describe(n), ": ", key, " holds ", val);
      put_f32(img_, at, static_cast<float>(val));
      at += 4;
    }
    return ok_status();
  };
  QBC_RETURN_IF_ERROR(put_list("q_scale", ai.heads));
  QBC_RETURN_IF_ERROR(put_list("k_scale", kvw));
  QBC_RETURN_IF_ERROR(put_list("v_scale", kvw));
  QBC_RETURN_IF_ERROR(put_list("k_offset", kvw));
  QBC_RETURN_IF_ERROR(put_list("v_offset", kvw));
  return put_list("k_rot_offset", kvw);
}

/// The code blocks of channel tile `nt`: dense [nt, kn] tiles, one per K tile.
Status Filler::codes(const Node& n, const LinearPlan& li, int64_t nt, const int8_t* raw) {
  const LinearTiles& t = li.t;
  const DType wt = isa::code_type(li.w_bits);
  const int64_t base = offset(li.buf);
  const double hi = li.w_bits == 4 ? 7.0 : 127.0;
  for (int64_t kt = 0; kt < li.ktiles; ++kt) {
    const int64_t at = base + li.w_off[static_cast<size_t>(nt * li.ktiles + kt)];
    const int64_t k0 = kt * t.kt, kn = std::min(t.kt, li.k - k0);
    for (int64_t j = 0; j < t.nt; ++j) {
      const int64_t ch = nt * t.nt + j;
      if (ch >= li.n) break;
      const size_t row = static_cast<size_t>(ch * li.k + k0);
      if (raw != nullptr && wt == DType::kI8) {  // every int8 is an 8-bit code
        std::memcpy(&img_[static_cast<size_t>(at + j * kn)], raw + row, static_cast<size_t>(kn));
        continue;
      }
      for (int64_t kk = 0; kk < kn; ++kk) {
        const double c = raw != nullptr ? double{raw[row + static_cast<size_t>(kk)]}
                                        : double{codes_[row + static_cast<size_t>(kk)]};
        // In range first (NaN fails it), then integral: a conversion and a compare per
        // code instead of a libm call (this loop sees every weight of the model).
        const bool in_range = c >= -hi - 1.0 && c <= hi;
        const int q = in_range ? static_cast<int>(c) : 0;
        if (!in_range || static_cast<double>(q) != c) {
          return invalid_argument(ir::describe(n), ": weight code ", c, " at [", ch, ", ", k0 + kk,
                                  "] is not a ", li.w_bits, "-bit integer");
        }
        // Dense [nt, kn] tile: rows of this K tile's width; int4 low nibble first.
        if (wt == DType::kI8) {
          img_[static_cast<size_t>(at + j * kn + kk)] =
              static_cast<uint8_t>(static_cast<int8_t>(q));
        } else {
          uint8_t& byte = img_[static_cast<size_t>(at + j * isa::dtype_bytes(wt, kn) + kk / 2)];
          const uint8_t nib = static_cast<uint8_t>(q & 0xF);
          byte = kk % 2 == 0 ? static_cast<uint8_t>((byte & 0xF0) | nib)
                             : static_cast<uint8_t>((byte & 0x0F) | (nib << 4));
        }
      }
    }
  }
  return ok_status();
}

/// Value `e` of a scale (or offset) block at `at`: fp32, or fp16 in the compact image.
Status Filler::put_scale(const Node& n, bool compact, int64_t at, int64_t e, float s, int64_t ch) {
  if (!compact) {
    put_f32(img_, at + 4 * e, s);
  } else if (numerics::round_fp16(s) == s) {  // exact: the fp16 widens back to s
    put_f16(img_, at + 2 * e, numerics::fp16_bits(s));
  } else {
    return invalid_argument(ir::describe(n), ": weight scale or offset ", s, " of channel ", ch,
                            " is not an fp16 value (w_scale_f16)");
  }
  return ok_status();
}

/// The scale (zero-point, offset) blocks and the bias block of channel tile `nt`.
Status Filler::scales(const Node& n, const LinearPlan& li, int64_t nt) {
  const LinearTiles& t = li.t;
  const int64_t base = offset(li.buf);
  const int64_t sblocks = li.group > 0 ? li.ktiles : 1;
  const bool compact = compact_weights(n, li);
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
        const int64_t e = j * gtk + gg;  // dense [nt, gtk]
        QBC_RETURN_IF_ERROR(put_scale(n, compact, base + li.ws_off[bi], e, scales_[src], ch));
        if (li.min)
          QBC_RETURN_IF_ERROR(put_scale(n, compact, base + li.wm_off[bi], e, mins_[src], ch));
        if (!li.zero) continue;
        const float z = zeros_[src];
        // Compact: a code of the weights' width, [−2^(b−1), 2^(b−1) − 1].
        const float zmax = static_cast<float>((1 << (li.w_bits - 1)) - 1);
        if (z != std::nearbyint(z) || (compact && (z < -zmax - 1 || z > zmax)))
          return invalid_argument(ir::describe(n), ": zero point ", z, " is not ",
                                  compact ? "a " + std::to_string(li.w_bits) + "-bit integer"
                                          : std::string("an integer"));
        const int32_t zi = static_cast<int32_t>(z);
        if (compact && li.w_bits == 4) {
          put_i4(img_, base + li.wz_off[bi], e, zi);
        } else if (compact) {
          img_[static_cast<size_t>(base + li.wz_off[bi] + e)] =
              static_cast<uint8_t>(static_cast<int8_t>(zi));
        } else {
          put_i32(img_, base + li.wz_off[bi] + 4 * e, zi);
        }
      }
    }
  }
  for (int64_t j = 0; j < t.nt; ++j) {
    const int64_t ch = nt * t.nt + j;
    if (ch >= li.n) break;
    put_f32(img_, base + li.b_off[static_cast<size_t>(nt)] + 4 * j,
            li.bias ? bias_[static_cast<size_t>(ch)] : 0.0f);
  }
  return ok_status();
}

Status Filler::linear(const Node& n, const LinearPlan& li) {
  // The codes as stored (int8 in a sidecar) when the caller can view them, else as floats.
  const ir::Weight* cw = cx_.g.find_weight(n.operands[1].weight);
  if (cw == nullptr) return invalid_argument("unknown weight '", n.operands[1].weight, "'");
  const int8_t* raw = cx_.codes ? cx_.codes(*cw) : nullptr;
  if (raw == nullptr) QBC_RETURN_IF_ERROR(read(n.operands[1].weight, &codes_));
  QBC_RETURN_IF_ERROR(read(n.operands[2].weight, &scales_));
  const size_t min_at = li.zero ? 4 : 3, bias_at = min_at + (li.min ? 1 : 0);
  if (li.zero) QBC_RETURN_IF_ERROR(read(n.operands[3].weight, &zeros_));
  if (li.min) QBC_RETURN_IF_ERROR(read(n.operands[min_at].weight, &mins_));
  if (li.bias) QBC_RETURN_IF_ERROR(read(n.operands[bias_at].weight, &bias_));
  if (li.min && mins_.size() != scales_.size())
    return invalid_argument(ir::describe(n), ": ", mins_.size(), " offsets for ", scales_.size(),
                            " weight scales");
  if (static_cast<int64_t>(scales_.size()) != li.n * li.groups)
    return invalid_argument(ir::describe(n), ": ", scales_.size(), " weight scales, expected ",
                            li.n * li.groups);
  for (int64_t nt = 0; nt < li.ntiles; ++nt) {
    QBC_RETURN_IF_ERROR(codes(n, li, nt, raw));
    QBC_RETURN_IF_ERROR(scales(n, li, nt));
  }
  // The codes are in the image now: their view's pages may leave memory, so a large model's
  // image and its sidecar are never resident together.
  if (raw != nullptr && cx_.codes_done) cx_.codes_done(*cw);
  return ok_status();
}

/// With the graph's 8-bit embedding key (bit.embedding 8): the table read as floats becomes
/// int8 codes and row scales (docs/numerics.md "8-bit embedding"), and the floats go.
Status embedding_to_i8(const ir::Graph& g, const std::string& name, isa::Bundle* b) {
  const auto it = g.metadata.find(numerics::kEmbeddingBitsKey);
  if (it == g.metadata.end()) return ok_status();
  if (it->second != "8")
    return invalid_argument("graph metadata '", numerics::kEmbeddingBitsKey, "' is '", it->second,
                            "', expected 8");
  b->embedding_i8.resize(b->embedding.size());
  b->embedding_row_scales.resize(static_cast<size_t>(b->embed_rows));
  const int64_t bad =
      numerics::quantize_embedding_rows(b->embedding.data(), b->embed_rows, b->hidden,
                                        b->embedding_i8.data(), b->embedding_row_scales.data());
  if (bad >= 0)
    return invalid_argument("host embedding '", name, "' row ", bad,
                            " holds a value that is not finite");
  std::vector<float>().swap(b->embedding);
  return ok_status();
}

/// fill-weights: the embedding and the image (see the top of this file).
class FillWeights final : public pass::Pass<Context> {
 public:
  std::string name() const override { return "fill-weights"; }
  pass::ResourceSet needs() const override { return Context::kMemory; }
  pass::ResourceSet provides() const override { return Context::kImage; }
  StatusOr<bool> run(Context& cx) override {
    Filler f(cx);
    for (const auto& [name, w] : cx.g.weights()) {
      if (w.role != ir::WeightRole::kHostEmbedding) continue;
      cx.b.embed_rows = w.type.dims[0];
      if (cx.weights == nullptr) continue;
      // Stored as bf16 and kept as the host's table: viewed as it is (the fp32 values are
      // those bf16 widened, and the MXQ stores them as bf16 either way), which spares a 4-byte
      // copy of the largest table. An 8-bit table (bit.embedding) is coded from fp32 rows.
      const bool to_i8 = cx.g.metadata.count(numerics::kEmbeddingBitsKey) > 0;
      const uint16_t* bf16 = cx.bf16 && !to_i8 ? cx.bf16(w) : nullptr;
      if (bf16 != nullptr) {
        cx.b.embedding.clear();
        cx.b.embedding_bf16_view = {bf16, w.type.num_elements()};
      } else {
        QBC_RETURN_IF_ERROR(f.read(name, &cx.b.embedding));
        QBC_RETURN_IF_ERROR(embedding_to_i8(cx.g, name, &cx.b));
      }
    }
    if (cx.b.embed_rows == 0 && !cx.plan.features())  // a feature graph takes rows, not tokens
      return invalid_argument("graph '", cx.g.name(), "' has no host embedding");
    cx.have |= Context::kImage;
    if (cx.weights == nullptr) return true;  // the embedding's shape only
    cx.b.image_base = 0;
    cx.b.image.assign(static_cast<size_t>(cx.plan.regions.weights), 0);
    const auto& nodes = cx.g.nodes();
    for (size_t i = 0; i < nodes.size(); ++i) {
      const Node& n = nodes[i];
      const int id = static_cast<int>(i);
      if (n.op == Op::kRmsNorm) {
        QBC_RETURN_IF_ERROR(f.norm(n, id));
      } else if (n.op == Op::kLayerNorm) {
        QBC_RETURN_IF_ERROR(f.layer_norm(n, id));
      } else if (n.op == Op::kAttention || n.op == Op::kFullAttention) {
        QBC_RETURN_IF_ERROR(f.attention(n, id));
      } else if (n.op == Op::kQLinear) {
        const NodePlan& np = cx.plan.nodes[i];
        QBC_RETURN_IF_ERROR(f.linear(n, np.linear));
        if (np.has_second()) {  // the second weight image (bit.prefill / bit.decode)
          QBC_ASSIGN_OR_RETURN(const Node view, second_image_node(n, np));
          QBC_RETURN_IF_ERROR(f.linear(view, np.second));
        }
      }
    }
    return true;
  }
};

}  // namespace

PassPtr make_fill_weights() { return std::make_unique<FillWeights>(); }

}  // namespace qbc::npu
