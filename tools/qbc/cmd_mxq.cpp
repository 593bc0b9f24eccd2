// qbc inspect MODEL.mxq, qbc verify: looking at and checking compiled MXQ files.
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli.h"
#include "qbc/config/config.h"
#include "qbc/driver/plan.h"
#include "qbc/driver/source_types.h"
#include "qbc/isa/text.h"
#include "qbc/isa/verify.h"
#include "qbc/mxq/model_file.h"
#include "qbc/npu/cost_model.h"
#include "qbc/npu/memory_plan.h"
#include "qbc/runtime/model.h"
#include "qbc/runtime/verify_model.h"
#include "qbc/support/file_util.h"
#include "qbc/support/logging.h"

namespace qbc::cli {
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
                            {"prefill_max_seq", mode.prefill.max_seq}});
  }
  j["embedding"] = {{"rows", b.embed_rows},
                    {"hidden", b.hidden},
                    {"dtype", !b.embedding_bf16_view.empty() ? "bf16" : "fp32"}};
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
  const std::map<std::string, std::string> dtypes =
      driver::parse_source_dtypes(meta.source_dtypes_json());
  j["provenance"]["tensor_dtypes"] = dtypes;
  j["provenance"]["dtype_counts"] = driver::count_by_dtype(dtypes);
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
     << j["chunk"].get<int64_t>() << ", batch " << j["batch"].get<int64_t>() << "\n";
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
  os << "\n";
  return os.str();
}

/// `inspect --cost`: the cost model on the exact programs of the file, with the target
/// profile of its stored configuration.
Status inspect_cost(const std::string& path, const mxq::LoadedModel& m, bool json,
                    int64_t prompt_tokens) {
  QBC_ASSIGN_OR_RETURN(config::ResolvedConfig cfg, driver::stored_config(path, m));
  const npu::CostParams p = driver::cost_params(cfg.options.target());
  const isa::Bundle& b = *m.bundle;
  const int64_t prompt = std::max<int64_t>(1, std::min<int64_t>(prompt_tokens, b.max_cache - 1));
  nlohmann::ordered_json j;
  j["target"] = b.target;
  j["prompt_tokens"] = prompt;
  j["schemes"] = nlohmann::ordered_json::array();
  std::ostringstream os;
  os << "cost model of " << path << " on target '" << b.target << "' (" << prompt
     << " prompt tokens; profile of the stored configuration)\n";
  for (const isa::Mode& mode : b.modes) {
    QBC_ASSIGN_OR_RETURN(npu::ModePrediction r,
                         npu::predict_mode(b, mode, prompt, p, mode.instances));
    nlohmann::ordered_json e;
    e["scheme"] = isa::scheme_name(mode.scheme);
    e["ttft_ms"] = r.ttft_s * 1e3;
    e["decode_tok_s"] = r.decode_s > 0 ? 1.0 / r.decode_s : 0.0;
    e["decode_tok_s_at_end"] = r.decode_end_s > 0 ? 1.0 / r.decode_end_s : 0.0;
    e["roofline_fraction"] = r.roofline_fraction;
    e["bound"] = npu::bound_name(r.bound);
    e["layers"] = nlohmann::ordered_json::array();
    for (const npu::NodeCost& n : r.decode.nodes) {
      nlohmann::ordered_json l;
      l["node"] = npu::cost_node_label(b, n.node);
      l["dram_bytes"] = n.counts.dram_bytes();
      l["macs"] = n.counts.macs;
      l["vector_ops"] = n.counts.vector_ops;
      l["bound"] = npu::bound_name(n.bound);
      l["us"] = n.seconds * 1e6;
      e["layers"].push_back(std::move(l));
    }
    e["decode_total"] = {
        {"dram_bytes", r.decode.total.dram_bytes()}, {"macs", r.decode.total.macs},
        {"vector_ops", r.decode.total.vector_ops},   {"core_us", r.decode.core_seconds * 1e6},
        {"host_us", r.decode.host_seconds * 1e6},    {"us", r.decode.seconds * 1e6}};
    j["schemes"].push_back(std::move(e));
    char line[256];
    std::snprintf(line, sizeof(line),
                  "%s: TTFT %.1f ms, decode %.2f tok/s (%.2f with the cache full), %.1f %% of the "
                  "DRAM roofline, %s-bound; decode step by node:\n",
                  isa::scheme_name(mode.scheme), r.ttft_s * 1e3,
                  r.decode_s > 0 ? 1.0 / r.decode_s : 0.0,
                  r.decode_end_s > 0 ? 1.0 / r.decode_end_s : 0.0, 100.0 * r.roofline_fraction,
                  npu::bound_name(r.bound));
    os << line << npu::cost_table_text(b, r.decode);
  }
  events::result("inspect-cost", j.dump());
  return emit_output("", json ? j.dump(2) + "\n" : os.str());
}

}  // namespace

Status dump_config_mxq(const std::string& path, const std::string& format,
                       const std::string& output) {
  QBC_ASSIGN_OR_RETURN(mxq::LoadedModel m, mxq::load_model(path));
  QBC_ASSIGN_OR_RETURN(config::ResolvedConfig cfg, driver::stored_config(path, m));
  const std::string text =
      format == "json" ? config::to_json(cfg.options) : config::to_yaml(cfg.options);
  events::result("dump-config", config::to_json(cfg.options));
  QBC_RETURN_IF_ERROR(emit_output(output, text));
  if (!output.empty() && output != "-") {
    events::summary("dump-config", "wrote " + output + " (" + format + ", " +
                                       std::to_string(text.size()) + " bytes, the configuration " +
                                       path + " was compiled with)");
  }
  return ok_status();
}

Status inspect_mxq(const std::string& path, bool json, bool memory, bool program, bool no_verify,
                   bool cost, int64_t prompt_tokens, const std::string& trace) {
  mxq::ReadOptions ro;
  ro.verify_digests = !no_verify;
  QBC_ASSIGN_OR_RETURN(mxq::LoadedModel m, mxq::load_model(path, ro));
  if (!trace.empty()) return write_trace(path, m, trace);
  if (cost) return inspect_cost(path, m, json, prompt_tokens);
  std::string out;
  if (memory || program) {
    if (memory) {
      const npu::MemoryReport r = npu::memory_report(*m.bundle);
      out += json ? npu::memory_json(r) : npu::memory_text(*m.bundle, r);
    }
    if (program) out += isa::print_bundle(*m.bundle);
    return emit_output("", out);
  }
  const nlohmann::ordered_json j = summary_json(m);
  events::result("inspect", j.dump());
  return emit_output("", json ? j.dump(2) + "\n" : summary_text(j));
}

namespace {

struct VerifyOptions {
  std::string file;
  bool json = false;
  ConfigFlags target;  ///< --target-device / --target-profile: the target the file must be for
};

Status run_verify(const VerifyOptions& o) {
  // Every format rule and digest (the reader), then what run relies on beyond them
  // (runtime::verify_model: program verifier, device and session checks of every mode, the
  // host assets against the layout and metadata).
  QBC_ASSIGN_OR_RETURN(mxq::LoadedModel m, mxq::load_model(o.file));
  QBC_RETURN_IF_ERROR(check_mxq_target(o.file, m, o.target));
  QBC_ASSIGN_OR_RETURN(runtime::VerifyReport report, runtime::verify_model(m, o.file));
  const std::vector<std::string>& modes = report.modes;
  size_t sections = 0;
  uint64_t bytes = 0;
  for (const mxq::Container& c : m.containers) {
    sections += c.sections().size();
    bytes += c.file_size();
  }
  std::string mode_list;
  for (const std::string& s : modes) mode_list += (mode_list.empty() ? "" : ", ") + s;
  nlohmann::ordered_json j = {{"file", o.file},
                              {"ok", true},
                              {"parts", m.files.size()},
                              {"sections", sections},
                              {"bytes", bytes},
                              {"modes", modes},
                              {"model_hash", m.meta.model_hash()},
                              {"target", m.bundle->target}};
  events::summary("verify",
                  o.file + ": ok (" + std::to_string(m.files.size()) + " file" +
                      (m.files.size() > 1 ? "s" : "") + ", " + std::to_string(sections) +
                      " sections, " + std::to_string(bytes) + " bytes; digests, format rules, " +
                      "program verifier V1-V8, device checks of the modes " + mode_list +
                      ", tokenizer" + (report.chat_template ? ", chat template" : "") +
                      "; target '" + m.bundle->target + "')",
                  j.dump());
  if (o.json) return emit_output("", j.dump(2) + "\n");
  return ok_status();
}

}  // namespace

void register_verify(CLI::App& app, Action& action) {
  auto o = std::make_shared<VerifyOptions>();
  CLI::App* cmd = app.add_subcommand(
      "verify",
      "Check a compiled MXQ file or a split build's manifest: the header, the section table "
      "rules,\n"
      "every section's digest, the parts of a manifest (count, order, build), the decoded "
      "program\n"
      "against the verifier's invariants (docs/npu.md) and the device checks of every mode. "
      "Exit 0\n"
      "when every check passes, 2 with the file and section at fault otherwise.");
  cmd->add_option("file", o->file, ".mxq file or manifest")->required();
  cmd->add_flag("--json", o->json, "Print the result as JSON");
  cmd->add_option("--target-device", o->target.target_device,
                  "Also check that the file was compiled for this targetDevice (exit 2 naming "
                  "both otherwise)");
  cmd->add_option("--target-profile", o->target.target_profile,
                  "Also check that the file was compiled for this target profile (name or YAML "
                  "file)");
  cmd->callback([o, &action] { action = [o] { return run_verify(*o); }; });
}

}  // namespace qbc::cli
