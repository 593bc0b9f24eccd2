// `qbc inspect MODEL.mxq` (see qbc/driver/inspect_mxq.h).
#include "qbc/driver/inspect_mxq.h"

#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "compiled_cost.h"
#include "qbc/driver/source_types.h"
#include "qbc/isa/text.h"
#include "qbc/npu/memory_plan.h"

namespace qbc::driver {
namespace {

std::string hex64(uint64_t v) {
  char buf[24];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

nlohmann::ordered_json summary_json(const mxq::LoadedModel& m) {
  const mxq::pb::Meta& meta = m.meta;
  const isa::Bundle& b = *m.bundle;
  nlohmann::ordered_json j;
  j["files"] = m.files;
  j["format"] = "qbc MXQ " + std::to_string(mxq::kMajorVersion) + "." +
                std::to_string(m.containers.front().minor_version());
  j["producer"] = meta.producer() + " " + meta.producer_version();
  j["model"] = meta.model_name();
  j["architecture"] = meta.architecture();
  j["model_hash"] = meta.model_hash();
  j["target"] = b.target;
  j["target_word"] = hex64(m.containers.front().header().target_word);
  j["schemes"] = nlohmann::ordered_json::array();
  for (const isa::Mode& mode : b.modes) {
    j["schemes"].push_back({{"scheme", isa::scheme_name(mode.scheme)},
                            {"cores_per_instance", mode.cores_per_instance},
                            {"instances", mode.instances},
                            {"prefill_max_seq", mode.prefill.max_seq},
                            {"span_program", mode.has_span()}});
  }
  j["embedding"] = {{"rows", b.embed_rows},
                    {"hidden", b.hidden},
                    {"dtype", b.embedding_is_i8()                  ? "int8"
                              : !b.embedding_bf16_view.empty() ? "bf16"
                                                               : "fp32"}};
  j["max_cache"] = b.max_cache;
  j["chunk"] = b.chunk;
  j["batch"] = b.batch;
  j["blocks"] = meta.blocks();
  j["parts"] = nlohmann::ordered_json::array();
  for (size_t p = 0; p < m.containers.size(); ++p) {
    const mxq::Container& c = m.containers[p];
    nlohmann::ordered_json part = {{"file", c.path()}, {"bytes", c.file_size()}};
    nlohmann::ordered_json secs = nlohmann::ordered_json::array();
    for (size_t i = 0; i < c.sections().size(); ++i) {
      const mxq::SectionEntry& e = c.sections()[i];
      nlohmann::ordered_json s = {{"index", i},
                                  {"kind", mxq::section_kind_name(e.kind)},
                                  {"offset", e.offset},
                                  {"bytes", e.size},
                                  {"xxh3_128", mxq::digest_hex(e.digest)}};
      if (e.bundle >= 0) s["mode"] = e.bundle;
      if (e.core >= 0) s["core"] = e.core;
      if (e.block >= 0) s["block"] = e.block;
      secs.push_back(s);
    }
    part["sections"] = secs;
    j["parts"].push_back(part);
  }
  j["kv"] = nlohmann::ordered_json::array();
  for (const mxq::pb::KvLayer& k : meta.kv()) {
    j["kv"].push_back({{"node", k.node()},
                       {"kind", k.kind()},
                       {"capacity", k.capacity()},
                       {"window", k.window()},
                       {"kv_heads", k.kv_heads()},
                       {"head_dim", k.head_dim()},
                       {"k_bits", k.k_bits()},
                       {"v_bits", k.v_bits()},
                       {"batch", k.batch()},
                       {"bytes_per_sequence", k.bytes_per_sequence()}});
  }
  nlohmann::ordered_json sources = nlohmann::ordered_json::array();
  for (const mxq::pb::SourceFile& f : meta.sources())
    sources.push_back({{"name", f.name()}, {"bytes", f.bytes()}, {"xxh3_128", f.xxh3_128()}});
  j["provenance"] = {{"source_format", meta.source_format()}, {"sources", sources}};
  const std::map<std::string, std::string> dtypes = parse_source_dtypes(meta.source_dtypes_json());
  j["provenance"]["tensor_dtypes"] = dtypes;
  j["provenance"]["dtype_counts"] = count_by_dtype(dtypes);
  if (!meta.calibration_json().empty()) {
    auto cal = nlohmann::ordered_json::parse(meta.calibration_json(), nullptr, false);
    j["provenance"]["calibration"] =
        cal.is_discarded() ? nlohmann::ordered_json(meta.calibration_json()) : cal;
  }
  if (!meta.weights_json().empty()) {
    auto w = nlohmann::ordered_json::parse(meta.weights_json(), nullptr, false);
    j["provenance"]["weights"] = w.is_discarded() ? nlohmann::ordered_json(meta.weights_json()) : w;
  }
  j["assets"] = nlohmann::ordered_json::array();
  for (const mxq::HostAsset& a : m.assets)
    j["assets"].push_back({{"name", a.name}, {"bytes", a.bytes.size()}});
  if (m.vision != nullptr) {
    const mxq::pb::VisionPart& v = meta.vision();
    const isa::Bundle& vb = *m.vision->bundle;
    nlohmann::ordered_json vj = {{"family", v.family()},
                                 {"model_hash", v.model_hash()},
                                 {"architecture", m.vision->meta.architecture()},
                                 {"image_size", v.image_size()},
                                 {"patch_size", v.patch_size()},
                                 {"feature_rows", v.feature_rows()},
                                 {"feature_width", v.feature_width()},
                                 {"deepstack_levels", v.deepstack_levels()},
                                 {"drop_front_rows", v.drop_front_rows()},
                                 {"image_token_id", v.image_token_id()},
                                 {"tokens_per_image", v.tokens_per_image()},
                                 {"tiles_per_side", v.tiles_per_side()},
                                 {"image_span_tokens", v.image_span_ids_size()},
                                 {"weight_bytes", vb.image_size()},
                                 {"schemes", nlohmann::ordered_json::array()}};
    for (const isa::Mode& mode : vb.modes) vj["schemes"].push_back(isa::scheme_name(mode.scheme));
    if (v.has_prompt_token_id()) vj["prompt_token_id"] = v.prompt_token_id();
    if (v.has_language_rotation_seed()) vj["language_rotation_seed"] = v.language_rotation_seed();
    if (v.image_prefix_ids_size() + v.image_suffix_ids_size() > 0) {
      vj["image_prefix_ids"] =
          std::vector<int32_t>(v.image_prefix_ids().begin(), v.image_prefix_ids().end());
      vj["image_suffix_ids"] =
          std::vector<int32_t>(v.image_suffix_ids().begin(), v.image_suffix_ids().end());
    }
    if (v.feature_divisor() != 0.0) vj["feature_divisor"] = v.feature_divisor();
    auto cal = nlohmann::ordered_json::parse(v.calibration(), nullptr, false);
    vj["calibration"] = cal.is_discarded() ? nlohmann::ordered_json(v.calibration()) : cal;
    j["vision"] = vj;
  }
  return j;
}

std::string summary_text(const nlohmann::ordered_json& j) {
  std::ostringstream os;
  os << j["format"].get<std::string>() << " by " << j["producer"].get<std::string>() << "\n";
  os << "model        " << j["model"].get<std::string>() << " ("
     << j["architecture"].get<std::string>() << "), " << j["blocks"].get<int>() << " blocks, hash "
     << j["model_hash"].get<std::string>() << "\n";
  os << "target       " << j["target"].get<std::string>() << " (word "
     << j["target_word"].get<std::string>() << ")\n";
  os << "schemes     ";
  for (const auto& s : j["schemes"])
    os << " " << s["scheme"].get<std::string>() << " (" << s["cores_per_instance"].get<int>()
       << " core" << (s["cores_per_instance"].get<int>() > 1 ? "s" : "") << " x "
       << s["instances"].get<int>() << ")";
  os << "\ncontext      cache " << j["max_cache"].get<int64_t>() << " positions, prefill chunk "
     << j["chunk"].get<int64_t>() << ", batch " << j["batch"].get<int64_t>();
  if (!j["schemes"].empty() && j["schemes"][0]["span_program"].get<bool>())
    os << "; span programs (each image one bidirectional call)";
  os << "\n";
  os << "embedding    " << j["embedding"]["rows"].get<int64_t>() << " x "
     << j["embedding"]["hidden"].get<int64_t>() << " " << j["embedding"]["dtype"].get<std::string>()
     << " (host table)\n";
  for (const auto& p : j["parts"]) {
    os << "file         " << p["file"].get<std::string>() << " (" << p["bytes"].get<uint64_t>()
       << " bytes)\n";
    for (const auto& s : p["sections"]) {
      char line[200];
      std::string what = s["kind"].get<std::string>();
      if (s.contains("mode")) what += " mode " + std::to_string(s["mode"].get<int>());
      if (s.contains("core")) what += " core " + std::to_string(s["core"].get<int>());
      if (s.contains("block")) what += " from block " + std::to_string(s["block"].get<int>());
      std::snprintf(line, sizeof(line), "  %3d %-26s %12llu bytes at %10llu  %s\n",
                    s["index"].get<int>(), what.c_str(),
                    static_cast<unsigned long long>(s["bytes"].get<uint64_t>()),
                    static_cast<unsigned long long>(s["offset"].get<uint64_t>()),
                    s["xxh3_128"].get<std::string>().c_str());
      os << line;
    }
  }
  os << "kv cache    ";
  for (const auto& k : j["kv"])
    os << " " << k["kind"].get<std::string>() << ":" << k["capacity"].get<int64_t>() << "x"
       << k["kv_heads"].get<int>() << "x" << k["head_dim"].get<int>() << " k"
       << k["k_bits"].get<int>() << "v" << k["v_bits"].get<int>();
  os << "\nsources     ";
  for (const auto& s : j["provenance"]["sources"])
    os << " " << s["name"].get<std::string>() << " ("
       << s["xxh3_128"].get<std::string>().substr(0, 12) << "…)";
  if (!j["provenance"]["dtype_counts"].empty()) {
    os << "\nsource types";
    for (const auto& [dt, n] : j["provenance"]["dtype_counts"].items()) {
      os << " " << dt << " " << n.get<int>();
    }
    os << " (tensors; per tensor: --json provenance.tensor_dtypes)";
  }
  if (j["provenance"].contains("weights") && j["provenance"]["weights"].is_object()) {
    const auto& w = j["provenance"]["weights"];
    os << "\nweights      pre-quantized " << w.value("config", "") << ": codes kept "
       << w.value("kept", 0) << " of " << w.value("imported", 0);
  }
  os << "\nassets      ";
  for (const auto& a : j["assets"]) os << " " << a["name"].get<std::string>();
  if (j.contains("vision")) {
    const auto& v = j["vision"];
    os << "\nvision       " << v["architecture"].get<std::string>() << ", build "
       << v["model_hash"].get<std::string>().substr(0, 12) << "…: image "
       << v["image_size"].get<int64_t>() << "x" << v["image_size"].get<int64_t>() << " (patch "
       << v["patch_size"].get<int64_t>() << ")"
       << (v.value("tiles_per_side", 0) > 1
               ? " a tile, " + std::to_string(v.value("tiles_per_side", 0)) + " x " +
                     std::to_string(v.value("tiles_per_side", 0)) + " tiles and a global view"
               : std::string())
       << " -> " << v["feature_rows"].get<int64_t>() << " x "
       << v["feature_width"].get<int64_t>() << " features"
       << (v.value("deepstack_levels", 0) > 0
               ? " (+ " + std::to_string(v.value("deepstack_levels", 0)) + " DeepStack levels)"
               : std::string())
       << ", " << v["tokens_per_image"].get<int64_t>()
       << " spliced at token " << v["image_token_id"].get<int64_t>() << "; weights "
       << npu::human_bytes(v["weight_bytes"].get<int64_t>());
  }
  os << "\n";
  return os.str();
}

}  // namespace

StatusOr<mxq::LoadedModel> open_compiled(const std::string& path, bool verify_digests) {
  mxq::ReadOptions ro;
  ro.verify_digests = verify_digests;
  return mxq::load_model(path, ro);
}

StatusOr<Inspection> inspect_compiled(const std::string& path, const mxq::LoadedModel& m,
                                      const CompiledInspectRequest& r) {
  if (r.cost) return compiled_cost(path, m, r.json, r.prompt_tokens);
  Inspection out;
  if (r.memory || r.program) {
    if (r.memory) {
      const npu::MemoryReport mr = npu::memory_report(*m.bundle);
      out.text += r.json ? npu::memory_json(mr) : npu::memory_text(*m.bundle, mr);
    }
    if (r.program) out.text += isa::print_bundle(*m.bundle);
    return out;
  }
  const nlohmann::ordered_json j = summary_json(m);
  out.event = "inspect";
  out.event_json = j.dump();
  out.text = r.json ? j.dump(2) + "\n" : summary_text(j);
  return out;
}

}  // namespace qbc::driver
