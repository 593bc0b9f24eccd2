#include "gguf_codes.h"

#include <cstring>

#include "gguf_blocks.h"
#include "gguf_model.h"

namespace qbc::frontend::gguf_codes {
namespace {

constexpr int64_t kBlock = 32;

// HF linear weights the graph reads as one linear each.
bool is_linear_weight(std::string_view name) {
  static constexpr std::string_view kSuffixes[] = {
      ".self_attn.q_proj.weight", ".self_attn.k_proj.weight", ".self_attn.v_proj.weight",
      ".self_attn.o_proj.weight", ".mlp.gate_proj.weight",    ".mlp.up_proj.weight",
      ".mlp.down_proj.weight"};
  if (name == "lm_head.weight") return true;
  if (name.rfind("model.layers.", 0) != 0) return false;
  for (std::string_view s : kSuffixes) {
    if (name.size() > s.size() && name.substr(name.size() - s.size()) == s) return true;
  }
  return false;
}

// The signed codes of one block (before the sign of its scale is folded in).
void block_codes(GgmlType type, const uint8_t* b, int32_t* q) {
  switch (type) {
    case GgmlType::kQ8_0:
      for (int j = 0; j < 32; ++j) q[j] = static_cast<int8_t>(b[2 + j]);
      return;
    case GgmlType::kQ4_0:
      for (int j = 0; j < 16; ++j) {
        q[j] = (b[2 + j] & 0x0F) - 8;
        q[j + 16] = (b[2 + j] >> 4) - 8;
      }
      return;
    case GgmlType::kQ4_1:  // {d, m, qs[16]}: unsigned codes, moved down by 8
      for (int j = 0; j < 16; ++j) {
        q[j] = (b[4 + j] & 0x0F) - 8;
        q[j + 16] = (b[4 + j] >> 4) - 8;
      }
      return;
    case GgmlType::kQ5_0:
    case GgmlType::kQ5_1: {  // {d, qh[4], qs[16]} and {d, m, qh[4], qs[16]}
      const uint8_t* h = b + (type == GgmlType::kQ5_1 ? 4 : 2);
      const uint32_t qh = gguf_blocks::load_u32(h);
      for (int j = 0; j < 16; ++j) {
        const int32_t h0 = static_cast<int32_t>(((qh >> j) << 4) & 0x10);
        const int32_t h1 = static_cast<int32_t>((qh >> (j + 12)) & 0x10);
        q[j] = ((h[4 + j] & 0x0F) | h0) - 16;
        q[j + 16] = ((h[4 + j] >> 4) | h1) - 16;
      }
      return;
    }
    default:
      return;
  }
}

}  // namespace

std::optional<WeightQuantArgs> keepable(GgmlType type) {
  WeightQuantArgs a;
  a.group_size = kBlock;
  a.symmetric = false;  // a block with a negative scale has zero point -1
  switch (type) {
    case GgmlType::kQ8_0:
      a.bits = 8;
      a.symmetric = true;  // d = amax / 127 is never negative
      return a;
    case GgmlType::kQ5_0:
      a.bits = 5;
      return a;
    case GgmlType::kQ4_0:
      a.bits = 4;
      return a;
    case GgmlType::kQ4_1:  // zero point -8 and the block's minimum as a float offset
      a.bits = 4;
      return a;
    case GgmlType::kQ5_1:
      a.bits = 5;
      return a;
    default:
      return std::nullopt;
  }
}

std::optional<Found> find_linears(const std::vector<TensorInfo>& tensors, const GgufFile& gguf) {
  Found f;
  f.config.method = "gguf";
  f.config.format = "ggml blocks";
  f.config.source = gguf.path().string();
  for (const TensorInfo& info : tensors) {
    if (!is_linear_weight(info.name) || info.shape.size() != 2) continue;
    if (info.transform == TensorTransform::kSubtractOne) continue;
    const GgufTensor* t = gguf.find_tensor(info.name_in_file);
    if (t == nullptr || info.shape[1] % kBlock != 0) continue;
    const std::optional<WeightQuantArgs> args = keepable(t->type);
    if (!args) continue;
    PackedTensorRef ref;
    ref.module = info.name.substr(0, info.name.size() - std::string_view(".weight").size());
    ref.layout = PackLayout::kGgufBlocks;
    ref.args = *args;
    ref.shape = info.shape;
    ref.parts = {info.name_in_file};
    ref.file = info.file;
    f.linears.push_back(std::move(ref));
    const std::string type_name(ggml_type_name(t->type));
    bool listed = false;
    for (const PrequantScheme& s : f.config.schemes) listed = listed || s.name == type_name;
    if (!listed) {
      PrequantScheme s;
      s.name = type_name;
      s.layout = PackLayout::kGgufBlocks;
      s.args = *args;
      f.config.schemes.push_back(s);
    }
  }
  if (f.linears.empty()) return std::nullopt;
  return f;
}

StatusOr<PackedLinear> read_linear(const GgufFile& gguf, const TensorInfo& info,
                                   const PackedTensorRef& ref) {
  const GgufTensor* t = gguf.find_tensor(info.name_in_file);
  const GgmlTypeTraits* traits = t ? ggml_type_traits(static_cast<uint32_t>(t->type)) : nullptr;
  if (t == nullptr || traits == nullptr || !keepable(t->type)) {
    return invalid_argument(info.file.string(), ": tensor '", info.name_in_file, "' (", info.name,
                            ") is not a Q8_0, Q5_0, Q5_1, Q4_0 or Q4_1 linear");
  }
  PackedLinear p;
  p.module = ref.module;
  p.layout = PackLayout::kGgufBlocks;
  p.out = ref.shape.at(0);
  p.in = ref.shape.at(1);
  p.bits = ref.args.bits;
  p.symmetric = false;
  p.group_size = kBlock;
  p.num_groups = p.in / kBlock;
  const size_t blocks = static_cast<size_t>(p.out * p.num_groups);
  if (t->data.size != blocks * traits->type_size) {
    return invalid_argument(info.file.string(), ": tensor '", info.name_in_file, "' holds ",
                            t->data.size, " bytes, expected ", blocks * traits->type_size, " for ",
                            blocks, " blocks of ", traits->name);
  }
  // Codes and per-block scale and zero point, in the stored (GGUF) row order.
  std::vector<int32_t> codes(static_cast<size_t>(p.out * p.in)), zeros(blocks);
  std::vector<float> scales(blocks), mins;
  const bool with_min = t->type == GgmlType::kQ4_1 || t->type == GgmlType::kQ5_1;
  if (with_min) mins.resize(blocks);
  const int32_t half = with_min ? 1 << (p.bits - 1) : 0;  // the unsigned codes' shift
  int32_t q[32];
  for (size_t blk = 0; blk < blocks; ++blk) {
    const uint8_t* b = t->data.data + blk * traits->type_size;
    float d = gguf_blocks::load_fp16(b);
    block_codes(t->type, b, q);
    int32_t z = 0;
    if (with_min) {  // d·u + m with u = q + half: codes q, zero point −half, offset m
      mins[blk] = gguf_blocks::load_fp16(b + 2);
      z = -half;
      if (d < 0) {  // (−d)·((−q − 1) − (half − 1)) = d·(q + half)
        for (int32_t& v : q) v = -v - 1;
        d = -d;
        z = half - 1;
      } else if (d == 0) {  // every weight is m: u = 0 under any scale
        for (int32_t& v : q) v = -half;
        d = 1.0f / 16384;
      }
    } else if (d < 0) {
      for (int32_t& v : q) v = -v - 1;
      d = -d;
      z = -1;
    } else if (d == 0) {
      for (int32_t& v : q) v = 0;
      d = 1.0f / 16384;  // 2^-14, fp16's smallest normal: any scale stands for zeros
    }
    std::copy_n(q, kBlock, codes.data() + blk * kBlock);
    scales[blk] = d;
    zeros[blk] = z;
  }
  // The rows are permuted like the tensor's values (llama.cpp's q/k rope layout).
  QBC_RETURN_IF_ERROR(gguf_model::reorder_rows(info, &codes));
  QBC_RETURN_IF_ERROR(gguf_model::reorder_rows(info, &scales));
  QBC_RETURN_IF_ERROR(gguf_model::reorder_rows(info, &zeros));
  if (with_min) QBC_RETURN_IF_ERROR(gguf_model::reorder_rows(info, &mins));
  p.codes = std::move(codes);
  p.scales = std::move(scales);
  p.zeros = std::move(zeros);
  p.mins = std::move(mins);
  return p;
}

}  // namespace qbc::frontend::gguf_codes
