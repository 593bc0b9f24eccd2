// The MXQ step of the driver (see qbc/driver/mxq_output.h).
#include "qbc/driver/mxq_output.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "qbc/driver/chat_prompt.h"
#include "qbc/driver/generate.h"
#include "qbc/driver/source_types.h"
#include "qbc/support/file_util.h"
#include "qbc/support/logging.h"
#include "qbc/tokenizer/chat_template.h"

namespace qbc::driver {
namespace {

namespace fs = std::filesystem;

std::string meta_value(const ir::Graph& g, const std::string& key) {
  auto it = g.metadata.find(key);
  return it == g.metadata.end() ? std::string() : it->second;
}

/// A VLM's chat template (the processor's, which writes the image markers) is often only in
/// chat_template.json ({"chat_template": "..."}): it travels as chat_template.jinja, which the
/// runtime prefers to tokenizer_config.json's, as HF's processor does. A folder that has
/// chat_template.jinja keeps it; a chat_template.json without a template (read_template_json's
/// errors) is warned about, naming the file, and not stored. Returns the file it took.
StatusOr<std::string> add_processor_chat_template(const fs::path& folder, mxq::WriteRequest* req) {
  for (const mxq::HostAsset& a : req->assets)
    if (a.name == "chat_template.jinja") return (folder / a.name).string();
  const fs::path p = folder / "chat_template.json";
  std::error_code ec;
  if (!fs::is_regular_file(p, ec)) return std::string();
  StatusOr<std::optional<std::string>> t = read_template_json(p);
  if (!t.ok()) {
    log("mxq").warn("{}; the MXQ carries no chat template from it", t.status().message());
    return std::string();
  }
  if (!*t) return std::string();
  req->assets.push_back({"chat_template.jinja", std::move(**t)});
  return p.string();
}

}  // namespace

int block_count(const ir::Graph& g) {
  int blocks = 0;
  for (const ir::Node& n : g.nodes()) blocks = std::max(blocks, n.block + 1);
  return blocks;
}

StatusOr<std::vector<int>> split_boundaries(const config::ResolvedConfig& cfg, const ir::Graph& g) {
  const int blocks = block_count(g);
  const config::CompileOptions& co = cfg.options;
  std::vector<int> out(co.split_blocks().begin(), co.split_blocks().end());
  if (!out.empty()) {
    QBC_RETURN_IF_ERROR(mxq::part_ranges(out, blocks, "splitBlocks").status());
    return out;
  }
  const int parts = co.split_parts();
  if (parts <= 1) return out;
  if (parts > blocks)
    return invalid_argument("splitParts: ", parts, " parts for a model of ", blocks, " blocks");
  for (int p = 1; p < parts; ++p) out.push_back(static_cast<int>(int64_t{p} * blocks / parts));
  return out;
}

namespace {

/// The vision part as its own single-file MXQ (meta: the language part's sources and
/// configuration, a "features" output, the constant inputs as assets), its bytes the vision section
/// of `req`, its model hash and the preprocessing asset recorded in req's metadata.
Status add_vision_part(const VisionBuild& v, mxq::WriteRequest* req) {
  mxq::WriteRequest vr;
  vr.bundle = &v.bundle;
  vr.blocks = 1;
  mxq::pb::Meta& m = vr.meta;
  m.set_producer("qbc");
  m.set_producer_version(req->meta.producer_version());
  m.set_model_name(v.graph_name);
  m.set_architecture(v.architecture);
  *m.mutable_sources() = req->meta.sources();
  m.set_source_format(req->meta.source_format());
  m.set_config_json(req->meta.config_json());
  m.set_calibration_json(v.calibration_json);
  m.set_bos_id(-1);
  m.set_eos_id(-1);
  mxq::pb::IoSpec* out = m.mutable_output();
  out->set_name("features");
  out->set_dtype("fp32");
  out->add_shape(v.bundle.output_rows);
  out->add_shape(v.bundle.vocab);
  out->set_scale(1.0);
  for (const isa::FeatureInput& in : v.bundle.feature_inputs) {
    if (in.name != "patches") continue;
    mxq::pb::IoSpec* i = m.mutable_input();
    i->set_name(in.name);
    i->set_dtype("fp16");
    i->add_shape(v.bundle.chunk);
    i->add_shape(in.width);
    i->set_scale(1.0);
  }
  for (const auto& [name, values] : v.constants) {
    std::string bytes(values.size() * sizeof(float), '\0');
    std::memcpy(bytes.data(), values.data(), bytes.size());
    vr.assets.push_back({mxq::vision_input_asset(name), std::move(bytes)});
  }
  if (!v.window_order.empty()) {
    std::string bytes(v.window_order.size() * sizeof(int64_t), '\0');
    std::memcpy(bytes.data(), v.window_order.data(), bytes.size());
    vr.assets.push_back({mxq::kVisionWindowOrderAsset, std::move(bytes)});
  }
  std::string hash;
  QBC_ASSIGN_OR_RETURN(req->vision, mxq::write_model_bytes(vr, &hash));
  *req->meta.mutable_vision() = v.part;
  req->meta.mutable_vision()->set_model_hash(hash);
  req->assets.push_back({kPreprocessorAsset, v.preprocessor_json});
  return ok_status();
}

/// The processor's text around an image span (VisionBuild::prefix_text / suffix_text) encoded
/// with the model's tokenizer, outside the span's own ids: without a tokenizer it is left out,
/// with a warning (a prompt can still write it).
Status add_span_text(const VisionBuild& v, const StatusOr<tokenizer::Tokenizer>& tok,
                     mxq::pb::VisionPart* part) {
  // Idefics3: the whole expansion of an image mark, special tokens written as text.
  if (!v.span_text.empty()) {
    if (!tok.ok())
      return invalid_argument(
          "the image span of a ", part->family(),
          " model is written with its tokenizer, which did not load: ", tok.status().message());
    const std::vector<int32_t> ids = tok->encode(v.span_text, false, /*parse_special=*/true);
    const auto images = std::count(ids.begin(), ids.end(), part->image_token_id());
    if (images != part->tokens_per_image())
      return invalid_argument("the tokenizer encodes the ", part->family(), " image span to ",
                              images, " image tokens (id ", part->image_token_id(), "), not ",
                              part->tokens_per_image(),
                              ": its vocabulary lacks the processor's image tokens");
    for (int32_t id : ids) part->add_image_span_ids(id);
    return ok_status();
  }
  if (v.prefix_text.empty() && v.suffix_text.empty()) return ok_status();
  if (!tok.ok()) {
    log("mxq").warn(
        "no tokenizer: the text the processor writes around an image is left out "
        "of the image span ({})",
        tok.status().message());
    return ok_status();
  }
  const std::vector<int32_t> pre = tok->encode(v.prefix_text, false);
  const std::vector<int32_t> post = tok->encode(v.suffix_text, false);
  std::vector<int32_t> prefix(pre);
  prefix.insert(prefix.end(), part->image_prefix_ids().begin(), part->image_prefix_ids().end());
  part->clear_image_prefix_ids();
  for (int32_t id : prefix) part->add_image_prefix_ids(id);
  for (int32_t id : post) part->add_image_suffix_ids(id);
  return ok_status();
}

}  // namespace

StatusOr<std::vector<mxq::WrittenFile>> write_mxq(const LoadedModel& model,
                                                  const isa::Bundle& bundle,
                                                  const config::ResolvedConfig& cfg,
                                                  const std::string& path,
                                                  const VisionBuild* vision) {
  const ir::Graph& g = model.graph;
  QBC_ASSIGN_OR_RETURN(std::vector<int> split, split_boundaries(cfg, g));

  mxq::WriteRequest req;
  req.bundle = &bundle;
  req.blocks = block_count(g);
  req.split_blocks = split;
  mxq::pb::Meta& m = req.meta;
  const std::string producer = meta_value(g, "producer");
  m.set_producer("qbc");
  m.set_producer_version(producer.rfind("qbc ", 0) == 0 ? producer.substr(4) : producer);
  m.set_model_name(g.name());
  m.set_architecture(meta_value(g, "architecture"));
  for (const ir::SourceFile& f : g.files) {
    mxq::pb::SourceFile* s = m.add_sources();
    s->set_name(fs::path(f.path).filename().string());  // never an absolute path
    s->set_bytes(static_cast<int64_t>(f.size));
    s->set_xxh3_128(f.xxh3_128);
  }
  m.set_source_format(g.source_format);
  m.set_config_json(config::to_json(cfg.options));
  m.set_calibration_json(meta_value(g, "qbc.calibration"));
  m.set_source_dtypes_json(meta_value(g, kSourceDtypesKey));
  m.set_weights_json(meta_value(g, "qbc.imported_weights"));
  mxq::pb::IoSpec* in = m.mutable_input();
  in->set_name("inputs_embeds");
  in->set_dtype("fp16");
  in->add_shape(bundle.chunk);
  in->add_shape(bundle.hidden);
  in->set_scale(1.0);
  mxq::pb::IoSpec* out = m.mutable_output();
  out->set_name("logits");
  out->set_dtype("fp32");
  out->add_shape(bundle.chunk);
  out->add_shape(bundle.vocab);
  out->set_scale(1.0);
  // KV layout per attention node, in graph order (the bundle's attention table order).
  size_t ai = 0;
  for (const ir::Node& n : g.nodes()) {
    if (n.op != ir::Op::kAttention || ai >= bundle.attentions.size()) continue;
    const isa::AttnDesc& a = bundle.attentions[ai];
    mxq::pb::KvLayer* k = m.add_kv();
    k->set_node(n.name);
    k->set_attention(static_cast<int32_t>(ai));
    k->set_kind(a.window > 0 && a.capacity < bundle.max_cache ? "ring" : "full");
    k->set_capacity(a.capacity);
    k->set_window(a.window);
    k->set_kv_heads(static_cast<int32_t>(a.kv_heads));
    k->set_head_dim(static_cast<int32_t>(a.head_dim));
    k->set_k_bits(a.k_bits);
    k->set_v_bits(a.v_bits);
    k->set_batch(bundle.batch);
    k->set_bytes_per_sequence(a.capacity * a.kv_heads * (a.key_record() + a.value_record()));
    for (const char* key : {"k_scale", "v_scale"}) {
      if (!n.attrs.has(key)) continue;
      for (double v : n.attrs.get_floats(key))
        (key[0] == 'k' ? k->add_k_scale(static_cast<float>(v))
                       : k->add_v_scale(static_cast<float>(v)));
    }
    ++ai;
  }
  // Token ids and the host assets: the tokenizer files beside the model's config.
  auto tok = load_tokenizer(model);
  if (tok.ok()) {
    m.set_bos_id(tok->bos_id());
    m.set_eos_id(tok->eos_id());
    m.set_add_bos(tok->add_bos_default());
  } else {
    m.set_bos_id(-1);
    m.set_eos_id(-1);
  }
  const fs::path& tp = model.source->tokenizer_path();
  bool has_tokenizer_json = false;
  std::string template_file;  // where the chat_template.jinja asset came from
  if (!tp.empty() && model.source->format() != "gguf") {
    for (const char* name : {"tokenizer.json", "tokenizer_config.json", "generation_config.json",
                             "chat_template.jinja"}) {
      const fs::path p = tp.parent_path() / name;
      std::error_code ec;
      if (!fs::exists(p, ec)) continue;
      QBC_ASSIGN_OR_RETURN(std::string bytes, read_text_file(p.string()));
      req.assets.push_back({name, std::move(bytes)});
      has_tokenizer_json = has_tokenizer_json || std::string(name) == "tokenizer.json";
    }
    QBC_ASSIGN_OR_RETURN(template_file, add_processor_chat_template(tp.parent_path(), &req));
  }
  // A GGUF keeps its chat template as the metadata string tokenizer.chat_template; it travels
  // as chat_template.jinja, the file an HF folder would have.
  if (model.source->format() == "gguf" && !model.source->chat_template().empty())
    req.assets.push_back({"chat_template.jinja", model.source->chat_template()});
  // A template outside the subset the runtime renders is still stored (generation does not
  // need it; Generator::apply_chat_template reports the parse error), but said now.
  for (const mxq::HostAsset& a : req.assets) {
    if (a.name != "chat_template.jinja") continue;
    const std::string where = model.source->format() == "gguf"
                                  ? model.source->path().string() + ": tokenizer.chat_template"
                                  : template_file;
    const StatusOr<tokenizer::ChatTemplate> t = tokenizer::ChatTemplate::parse(a.bytes, where);
    if (!t.ok())
      log("mxq").warn("{}; the MXQ carries it, but the runtime cannot apply it",
                      t.status().message());
  }
  // A vocabulary without tokenizer.json (a GGUF's metadata) travels as qbc_vocab.json, every
  // field of it, which the runtime's tokenizer reads without the GGUF reader (docs/mxq.md).
  if (tok.ok() && !has_tokenizer_json)
    req.assets.push_back({"qbc_vocab.json", tok->to_vocab_json()});
  const std::string config_json = meta_value(g, "config.json");
  if (!config_json.empty()) req.assets.push_back({"config.json", config_json});
  if (vision != nullptr) {
    QBC_RETURN_IF_ERROR(add_vision_part(*vision, &req));
    QBC_RETURN_IF_ERROR(add_span_text(*vision, tok, req.meta.mutable_vision()));
  }
  return mxq::write_model(path, req);
}

}  // namespace qbc::driver
