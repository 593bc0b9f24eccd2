// Metadata against layout (see meta_check.h). The expected values are the writer's rules
// (src/driver/mxq_output.cpp, docs/mxq.md "Metadata").
#include "meta_check.h"

#include <algorithm>
#include <cmath>

#include "qbc/support/quote.h"

namespace qbc::mxq {
namespace {

Status check_io(const pb::IoSpec& io, const char* field, const char* name, const char* dtype,
                int64_t rows, int64_t cols, const std::string& where) {
  if (io.name() != name || io.dtype() != dtype || io.shape_size() != 2 || io.shape(0) != rows ||
      io.shape(1) != cols) {
    std::string shape;
    for (int64_t d : io.shape()) shape += (shape.empty() ? "" : ", ") + std::to_string(d);
    return data_loss(where, ": metadata ", field, " is ", quote_prefix(io.name()), " ",
                     quote_prefix(io.dtype()), " [", shape, "], the layout's is '", name, "' '",
                     dtype, "' [", rows, ", ", cols, "]");
  }
  return ok_status();
}

template <typename T>
Status same(const std::string& where, const std::string& field, T meta, T layout) {
  if (meta == layout) return ok_status();
  return data_loss(where, ": metadata ", field, " is ", meta, ", the layout says ", layout);
}

Status check_kv(const pb::KvLayer& k, size_t i, const isa::Bundle& b, const std::string& where) {
  const isa::AttnDesc& a = b.attentions[i];
  const std::string at =
      where + ": metadata kv[" + std::to_string(i) + "] (node " + quote_prefix(k.node()) + ")";
  const std::string kind = a.window > 0 && a.capacity < b.max_cache ? "ring" : "full";
  if (k.kind() != kind)
    return data_loss(at, ": kind ", quote_prefix(k.kind()), ", the layout's attention ", i, " is '",
                     kind, "'");
  QBC_RETURN_IF_ERROR(same<int64_t>(at, "attention", k.attention(), static_cast<int64_t>(i)));
  QBC_RETURN_IF_ERROR(same<int64_t>(at, "capacity", k.capacity(), a.capacity));
  QBC_RETURN_IF_ERROR(same<int64_t>(at, "window", k.window(), a.window));
  QBC_RETURN_IF_ERROR(same<int64_t>(at, "kv_heads", k.kv_heads(), a.kv_heads));
  QBC_RETURN_IF_ERROR(same<int64_t>(at, "head_dim", k.head_dim(), a.head_dim));
  QBC_RETURN_IF_ERROR(same<int64_t>(at, "k_bits", k.k_bits(), a.k_bits));
  QBC_RETURN_IF_ERROR(same<int64_t>(at, "v_bits", k.v_bits(), a.v_bits));
  QBC_RETURN_IF_ERROR(same<int64_t>(at, "batch", k.batch(), b.batch));
  QBC_RETURN_IF_ERROR(same<int64_t>(at, "bytes_per_sequence", k.bytes_per_sequence(),
                                    a.capacity * a.kv_heads * (a.key_record() + a.value_record())));
  const int64_t channels = a.kv_heads * a.head_dim;
  for (const auto* scales : {&k.k_scale(), &k.v_scale()}) {
    const char* name = scales == &k.k_scale() ? "k_scale" : "v_scale";
    if (!scales->empty() && scales->size() != channels)
      return data_loss(at, ": ", name, " has ", scales->size(), " values, expected ", channels,
                       " (kv_heads x head_dim) or none");
    for (float s : *scales)
      if (!std::isfinite(s) || s <= 0) return data_loss(at, ": ", name, " holds ", s);
  }
  return ok_status();
}

/// The programs' KV buffers of layer `k` (`<node>.kcache` and `.vcache`, as the backend names
/// them): DRAM KV buffers of shape [kv_heads, capacity, head_dim] holding a row of codes per
/// head and position.
Status check_kv_buffers(const pb::KvLayer& k, size_t i, const isa::Bundle& b,
                        const std::string& where) {
  const std::string at =
      where + ": metadata kv[" + std::to_string(i) + "] (node " + quote_prefix(k.node()) + ")";
  for (const auto& [suffix, bits] : {std::pair<const char*, int32_t>{".kcache", k.k_bits()},
                                     std::pair<const char*, int32_t>{".vcache", k.v_bits()}}) {
    const std::string name = k.node() + suffix;
    const isa::Buffer* buf = nullptr;
    for (const isa::Buffer& x : b.buffers)
      if (x.name == name) buf = &x;
    if (buf == nullptr || buf->space != isa::Space::kDram || buf->purpose != isa::Purpose::kKv)
      return data_loss(at, ": the programs have no DRAM KV buffer ", quote_prefix(name));
    const std::pair<const char*, int64_t> dims[] = {
        {"kv_heads", k.kv_heads()}, {"capacity", k.capacity()}, {"head_dim", k.head_dim()}};
    if (buf->shape.size() != 3)
      return data_loss(at, ": KV buffer ", quote_prefix(name), " has ", buf->shape.size(),
                       " dimensions, expected 3 [kv_heads, capacity, head_dim]");
    for (size_t d = 0; d < 3; ++d) {
      if (buf->shape[d] != dims[d].second)
        return data_loss(at, ": ", dims[d].first, " is ", dims[d].second, ", the KV buffer ",
                         quote_prefix(name), " holds ", buf->shape[d]);
    }
    const int64_t rows = k.kv_heads() * k.capacity();
    // A row per (KV head, position): its codes, with the KV4 rules their per-token fields.
    const isa::AttnDesc& a = b.attentions[i];
    const int64_t record = suffix[1] == 'k' ? a.key_record() : a.value_record();
    const int64_t need = rows * std::max<int64_t>((k.head_dim() * bits + 7) / 8, record);
    if (buf->bytes < need)
      return data_loss(at, ": ", rows, " rows of ", k.head_dim(), " ", bits, "-bit codes",
                       a.token_fields() ? " and their per-token fields" : "", " need ", need,
                       " bytes, the KV buffer ", quote_prefix(name), " holds ", buf->bytes);
  }
  return ok_status();
}

/// A feature bundle's metadata: no KV layers or token ids, its output the feature rows.
Status check_feature_meta(const pb::Meta& meta, const isa::Bundle& b, const std::string& where) {
  if (meta.kv_size() != 0)
    return data_loss(where, ": a feature bundle's metadata lists ", meta.kv_size(), " KV layers");
  QBC_RETURN_IF_ERROR(
      check_io(meta.output(), "output", "features", "fp32", b.output_rows, b.vocab, where));
  if (meta.target() != b.target)
    return data_loss(where, ": metadata target ", quote_prefix(meta.target()), ", the layout's is ",
                     quote_prefix(b.target));
  if (meta.bos_id() != -1 || meta.eos_id() != -1)
    return data_loss(where, ": a feature bundle's metadata has token ids");
  return ok_status();
}

/// The XXH3-128 of `name` among meta's source files ("" when not listed).
std::string source_digest(const pb::Meta& meta, const std::string& name) {
  for (const pb::SourceFile& f : meta.sources())
    if (f.name() == name) return f.xxh3_128();
  return "";
}

}  // namespace

Status check_vision_pair(const pb::Meta& meta, const isa::Bundle& b, const LoadedModel& vision,
                         const std::vector<HostAsset>& assets, const std::string& where) {
  const pb::VisionPart& v = meta.vision();
  const isa::Bundle& vb = *vision.bundle;
  const std::string mine = "the language part";
  if (vb.kind != isa::BundleKind::kFeatures)
    return data_loss(where, ": holds a decoder, not a vision tower's feature bundle");
  if (vision.vision != nullptr) return data_loss(where, ": holds a vision part of its own");
  if (vision.meta.model_hash() != v.model_hash())
    return data_loss(where, ": the vision part is of build ", vision.meta.model_hash(), ", ", mine,
                     " was compiled with vision part ", quote_prefix(v.model_hash()),
                     " (the parts come from different compiles)");
  const std::string cfg_v = source_digest(vision.meta, "config.json");
  const std::string cfg_l = source_digest(meta, "config.json");
  if (cfg_v != cfg_l)
    return data_loss(where, ": the vision part was compiled from config.json ",
                     quote_prefix(cfg_v.empty() ? "(none)" : cfg_v), ", ", mine, " from ",
                     quote_prefix(cfg_l.empty() ? "(none)" : cfg_l));
  if (vb.target != b.target)
    return data_loss(where, ": the vision part is compiled for target ", quote_prefix(vb.target),
                     ", ", mine, " for ", quote_prefix(b.target));
  if (v.deepstack_levels() < 0 || v.deepstack_levels() > 64 ||
      static_cast<size_t>(v.deepstack_levels()) != b.deepstack.size())
    return data_loss(where, ": the vision part gives ", v.deepstack_levels(), " DeepStack levels, ",
                     mine, " takes ", b.deepstack.size());
  if (vb.vocab != b.hidden * (1 + v.deepstack_levels()) || v.feature_width() != b.hidden)
    return data_loss(where, ": the vision part's features are ", vb.vocab, " wide (metadata ",
                     v.feature_width(), " and ", v.deepstack_levels(), " DeepStack levels), ", mine,
                     "'s hidden size is ", b.hidden);
  if (vb.output_rows != v.feature_rows())
    return data_loss(where, ": the vision part gives ", vb.output_rows,
                     " rows per image, the metadata ", v.feature_rows());
  if (v.tiles_per_side() < 0 || v.tiles_per_side() > 64)
    return data_loss(where, ": ", v.tiles_per_side(), " tiles per side (0 to 64)");
  if (v.image_size() * std::max<int64_t>(1, v.tiles_per_side()) > kMaxVisionImageSide)
    return data_loss(where, ": ", v.tiles_per_side(), " tiles of ", v.image_size(),
                     " pixels per side make an image larger than ", kMaxVisionImageSide);
  const int64_t views = vision_views(v);
  if (v.tokens_per_image() < 1 || v.drop_front_rows() < 0 ||
      v.tokens_per_image() != views * (v.feature_rows() - v.drop_front_rows()))
    return data_loss(where, ": ", v.tokens_per_image(), " image tokens are not ", views,
                     " call(s) of ", v.feature_rows(), " feature rows less ", v.drop_front_rows(),
                     " dropped");
  if (v.image_span_ids_size() > 0) {
    int64_t image_ids = 0;
    for (int32_t id : v.image_span_ids()) {
      if (id < 0 || id >= b.embed_rows)
        return data_loss(where, ": token id ", id, " of the image span is not one of the ",
                         b.embed_rows, " rows of the embedding");
      image_ids += id == v.image_token_id() ? 1 : 0;
    }
    if (image_ids != v.tokens_per_image())
      return data_loss(where, ": the image span holds ", image_ids, " image tokens, not the ",
                       v.tokens_per_image(), " rows an image gives");
    if (v.image_prefix_ids_size() + v.image_suffix_ids_size() > 0)
      return data_loss(where, ": an image span and prefix / suffix ids together");
  }
  if (v.image_token_id() < 0 || v.image_token_id() >= b.embed_rows)
    return data_loss(where, ": image token id ", v.image_token_id(), " is not one of the ",
                     b.embed_rows, " rows of the embedding");
  const auto token_ok = [&](int64_t id) { return id >= 0 && id < b.embed_rows; };
  if (v.has_prompt_token_id() && !token_ok(v.prompt_token_id()))
    return data_loss(where, ": image prompt token id ", v.prompt_token_id(), " is not one of the ",
                     b.embed_rows, " rows of the embedding");
  if (v.image_prefix_ids_size() + v.image_suffix_ids_size() > 64)
    return data_loss(where, ": ", v.image_prefix_ids_size(), " + ", v.image_suffix_ids_size(),
                     " tokens around an image (at most 64)");
  for (const auto* ids : {&v.image_prefix_ids(), &v.image_suffix_ids()}) {
    for (int32_t id : *ids) {
      if (!token_ok(id))
        return data_loss(where, ": token id ", id, " around an image is not one of the ",
                         b.embed_rows, " rows of the embedding");
    }
  }
  if (!std::isfinite(v.feature_divisor()) || v.feature_divisor() < 0)
    return data_loss(where, ": feature divisor ", v.feature_divisor());
  // The patch grid is image_size / patch_size whole patches (a remainder is not read, as HF's
  // "valid" patch convolution).
  if (v.image_size() < 1 || v.image_size() > 8192 || v.patch_size() < 1 ||
      v.image_size() < v.patch_size())
    return data_loss(where, ": image size ", v.image_size(), " and patch size ", v.patch_size());
  // An M-RoPE language model places an image's tokens on its merged grid, row-major; its (Qwen)
  // towers take whole merged patches.
  const int64_t merge = vision_merge(v);
  const int64_t grid = v.image_size() / v.patch_size();
  if (b.rope_inputs.present() && v.merge_size() <= 64 &&
      v.image_size() % (v.patch_size() * merge) != 0)
    return data_loss(where, ": image size ", v.image_size(), " is not whole ", v.patch_size(),
                     " x ", merge, " merged patches, which the M-RoPE grid takes");
  if (b.rope_inputs.present() && (v.merge_size() > 64 || grid % merge != 0 ||
                                  v.tokens_per_image() != (grid / merge) * (grid / merge)))
    return data_loss(where, ": ", v.tokens_per_image(), " image tokens are not the ", grid, "/",
                     merge, " x ", grid, "/", merge,
                     " grid the M-RoPE language model places them on");
  bool has_pre = false;
  for (const HostAsset& a : assets) has_pre = has_pre || a.name == v.preprocessor_asset();
  if (!has_pre)
    return data_loss(where, ": the preprocessing asset ", quote_prefix(v.preprocessor_asset()),
                     " is not in the file");
  return ok_status();
}

Status check_meta_against_layout(const pb::Meta& meta, const isa::Bundle& b,
                                 const std::string& where) {
  if (b.kind == isa::BundleKind::kFeatures) return check_feature_meta(meta, b, where);
  if (static_cast<size_t>(meta.kv_size()) != b.attentions.size())
    return data_loss(where, ": metadata lists ", meta.kv_size(), " KV layers, the layout has ",
                     b.attentions.size(), " attentions");
  for (int i = 0; i < meta.kv_size(); ++i)
    QBC_RETURN_IF_ERROR(check_kv(meta.kv(i), static_cast<size_t>(i), b, where));
  // The KV layers against the programs' KV buffers: two per layer, each of its shape.
  int64_t kv_buffers = 0;
  for (const isa::Buffer& x : b.buffers)
    kv_buffers += x.space == isa::Space::kDram && x.purpose == isa::Purpose::kKv ? 1 : 0;
  if (kv_buffers != 2 * int64_t{meta.kv_size()})
    return data_loss(where, ": metadata lists ", meta.kv_size(), " KV layers, the programs have ",
                     kv_buffers, " KV buffers (expected a K and a V buffer per layer)");
  for (int i = 0; i < meta.kv_size(); ++i)
    QBC_RETURN_IF_ERROR(check_kv_buffers(meta.kv(i), static_cast<size_t>(i), b, where));
  QBC_RETURN_IF_ERROR(
      check_io(meta.input(), "input", "inputs_embeds", "fp16", b.chunk, b.hidden, where));
  QBC_RETURN_IF_ERROR(check_io(meta.output(), "output", "logits", "fp32", b.chunk, b.vocab, where));
  if (meta.target() != b.target)
    return data_loss(where, ": metadata target ", quote_prefix(meta.target()), ", the layout's is ",
                     quote_prefix(b.target));
  bool schemes_match = static_cast<size_t>(meta.schemes_size()) == b.modes.size();
  for (size_t i = 0; schemes_match && i < b.modes.size(); ++i)
    schemes_match = meta.schemes(static_cast<int>(i)) == isa::scheme_name(b.modes[i].scheme);
  if (!schemes_match)
    return data_loss(where, ": metadata schemes do not list the layout's ", b.modes.size(),
                     " modes in order");
  // Token ids: -1 (none) or a row of the host embedding and a logit.
  const int64_t ids = std::min(b.vocab, b.embed_rows);
  for (const auto& [name, id] : {std::pair<const char*, int32_t>{"bos_id", meta.bos_id()},
                                 std::pair<const char*, int32_t>{"eos_id", meta.eos_id()}}) {
    if (id < -1 || id >= ids)
      return data_loss(where, ": metadata ", name, " ", id, " is outside the ", ids,
                       " token ids of the embedding and logits");
  }
  return ok_status();
}

}  // namespace qbc::mxq
