// qbc parse, qbc inspect: importing a model into MBLT and looking at the result.
#include <chrono>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli.h"
#include "qbc/driver/backend.h"
#include "qbc/driver/generate.h"
#include "qbc/driver/model_loader.h"
#include "qbc/driver/source_types.h"
#include "qbc/driver/vision_import.h"
#include "qbc/ir/serialize.h"
#include "qbc/ir/text.h"
#include "qbc/isa/text.h"
#include "qbc/mxq/model_file.h"
#include "qbc/npu/compile.h"
#include "qbc/npu/memory_plan.h"
#include "qbc/support/file_util.h"
#include "qbc/support/logging.h"
#include "qbc/support/progress.h"
#include "qbc_git_describe.h"

namespace qbc::cli {
namespace {

struct ParseOptions {
  ConfigFlags config;
  std::string model;
  std::string output;
};

Status run_parse(const ParseOptions& o) {
  if (o.output.empty()) return invalid_argument("parse: -o OUT.mblt is required");
  if (!driver::is_mblt_path(o.output))
    return invalid_argument("parse: output ", o.output, " must end in .mblt");
  const auto t0 = std::chrono::steady_clock::now();
  // A VLM's vision tower goes to its own MBLT next to the language one (docs/multimodal.md).
  // A tower not built yet is reported (exit 3) after the language graph is written.
  StatusOr<std::optional<ir::Graph>> vision = driver::import_vision_graph(o.model);
  if (!vision.ok() && vision.status().code() != Code::kUnimplemented) return vision.status();
  if (vision.ok() && *vision) {
    ir::Graph& vg = **vision;
    const std::string path = driver::vision_mblt_path(o.output);
    vg.metadata["producer"] = "qbc " QBC_VERSION " (" QBC_GIT_DESCRIBE ")";
    QBC_RETURN_IF_ERROR(ir::save(vg, path));
    events::summary("parse", "wrote " + path + " (vision: " + std::to_string(vg.nodes().size()) +
                                 " nodes, " + std::to_string(vg.weights().size()) +
                                 " weights, image " + vg.metadata["vision.image_size"] + ")");
  }
  QBC_ASSIGN_OR_RETURN(config::ResolvedConfig cfg, resolve_for_model(o.config, o.model));
  QBC_ASSIGN_OR_RETURN(driver::LoadedModel m, driver::import_model(o.model, cfg));
  m.graph.metadata["producer"] = "qbc " QBC_VERSION " (" QBC_GIT_DESCRIBE ")";
  QBC_RETURN_IF_ERROR(ir::save(m.graph, o.output));
  std::error_code ec;
  const auto bytes = static_cast<int64_t>(std::filesystem::file_size(o.output, ec));
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  nlohmann::ordered_json r = {{"output", o.output},
                              {"bytes", bytes},
                              {"nodes", m.graph.nodes().size()},
                              {"weights", m.graph.weights().size()},
                              {"seconds", secs}};
  events::result("parse", r.dump());
  events::summary("parse",
                  "wrote " + o.output + " (" + std::to_string(bytes) + " bytes; " +
                      std::to_string(m.graph.nodes().size()) + " nodes, " +
                      std::to_string(m.graph.weights().size()) +
                      " weights referenced in the source) in " + progress::format_duration(secs),
                  r.dump());
  return vision.ok() ? ok_status() : vision.status();
}

std::string human_count(int64_t n) {
  std::ostringstream os;
  if (n >= 1000000000) {
    os.precision(3);
    os << n / 1e9 << "B";
  } else if (n >= 1000000) {
    os.precision(3);
    os << n / 1e6 << "M";
  } else if (n >= 1000) {
    os.precision(3);
    os << n / 1e3 << "K";
  } else {
    os << n;
  }
  return os.str();
}

nlohmann::ordered_json summary(const ir::Graph& g, const std::string& path) {
  nlohmann::ordered_json j;
  j["file"] = path;
  j["graph"] = g.name();
  auto meta = [&](const char* k) {
    auto it = g.metadata.find(k);
    return it == g.metadata.end() ? std::string() : it->second;
  };
  j["producer"] = meta("producer");
  j["architecture"] = meta("architecture");
  j["source"] = {{"path", g.source_path}, {"format", g.source_format}};
  nlohmann::ordered_json files = nlohmann::ordered_json::array();
  for (const ir::SourceFile& f : g.files)
    files.push_back({{"path", f.path}, {"size", f.size}, {"xxh3_128", f.xxh3_128}});
  j["source"]["files"] = files;
  if (const std::string w = meta("qbc.imported_weights"); !w.empty()) {
    auto parsed = nlohmann::ordered_json::parse(w, nullptr, false);
    j["source"]["weights"] = parsed.is_discarded() ? nlohmann::ordered_json(w) : parsed;
  }
  nlohmann::ordered_json inputs = nlohmann::ordered_json::array();
  std::map<std::string, int> ops;
  int blocks = 0;
  for (const ir::Node& n : g.nodes()) {
    if (n.op == ir::Op::kInput) inputs.push_back({{"name", n.name}, {"type", n.type.to_string()}});
    ++ops[std::string(ir::op_info(n.op).name)];
    blocks = std::max(blocks, n.block + 1);
  }
  j["inputs"] = inputs;
  nlohmann::ordered_json outputs = nlohmann::ordered_json::array();
  for (ir::ValueId o : g.outputs())
    outputs.push_back({{"name", g.node(o).name}, {"type", g.node(o).type.to_string()}});
  j["outputs"] = outputs;
  j["blocks"] = blocks;
  j["nodes"] = g.nodes().size();
  j["ops"] = ops;
  // Parameters by part: which nodes use each weight.
  std::map<std::string, std::string> part_of;
  for (const ir::Node& n : g.nodes()) {
    for (const ir::Operand& op : n.operands) {
      if (op.is_weight()) part_of[op.weight] = n.part == ir::Part::kHead ? "head" : "body";
    }
  }
  int64_t host = 0, body = 0, head = 0;
  std::map<std::string, int64_t> by_dtype;
  std::string host_tensor, tied;
  for (const auto& [name, w] : g.weights()) {
    if (w.role == ir::WeightRole::kHostEmbedding) host_tensor = w.tensor;
  }
  for (const auto& [name, w] : g.weights()) {
    const int64_t n = w.type.num_elements();
    by_dtype[std::string(ir::dtype_name(w.type.dtype))] += n;
    if (w.role == ir::WeightRole::kHostEmbedding) {
      host += n;
    } else if (part_of[name] == "head") {
      head += n;
      if (w.tensor == host_tensor) tied = w.tensor;  // the head reads the embedding table
    } else {
      body += n;
    }
  }
  j["parameters"] = {{"host_embedding", host},
                     {"body", body},
                     {"head", head},
                     {"head_tied_to", tied},
                     {"by_dtype", by_dtype}};
  // The storage type of every source tensor (a GGUF's ggml types), when recorded at import.
  const std::map<std::string, std::string> source_dtypes = driver::source_dtypes(g);
  j["source"]["tensor_dtypes"] = source_dtypes;
  j["source"]["dtype_counts"] = driver::count_by_dtype(source_dtypes);
  return j;
}

std::string summary_text(const nlohmann::ordered_json& j) {
  std::ostringstream os;
  os << j["file"].get<std::string>() << "\n";
  os << "  architecture  " << j["architecture"].get<std::string>() << " (graph @"
     << j["graph"].get<std::string>() << ")\n";
  os << "  producer      " << j["producer"].get<std::string>() << "\n";
  os << "  source        " << j["source"]["path"].get<std::string>() << " ("
     << j["source"]["format"].get<std::string>() << ")\n";
  for (const auto& f : j["source"]["files"]) {
    os << "                " << f["path"].get<std::string>() << "  " << f["size"].get<uint64_t>()
       << " bytes  xxh3:" << f["xxh3_128"].get<std::string>() << "\n";
  }
  if (!j["source"]["dtype_counts"].empty()) {
    os << "  source types  ";
    bool first_type = true;
    for (const auto& [dt, n] : j["source"]["dtype_counts"].items()) {
      os << (first_type ? "" : ", ") << dt << " " << n.get<int>()
         << (n.get<int>() == 1 ? " tensor" : " tensors");
      first_type = false;
    }
    os << " (per tensor: --json source.tensor_dtypes)\n";
  }
  if (j["source"].contains("weights") && j["source"]["weights"].is_object()) {
    const auto& w = j["source"]["weights"];
    os << "  weights       pre-quantized " << w.value("config", "") << ": codes kept "
       << w.value("kept", 0) << " of " << w.value("imported", 0) << "\n";
    for (const auto& k : w["kinds"]) {
      os << "                " << k.value("kind", "") << ": kept " << k.value("kept", 0) << " of "
         << k.value("imported", 0);
      for (const auto& [why, n] : k["requantized"].items())
        os << "; " << n.get<int>() << " " << why;
      os << "\n";
    }
    if (w.contains("act_order")) {
      os << "                act-order: " << w["act_order"].value("permuted", 0)
         << " kept as a column permutation, " << w["act_order"].value("requantized", 0)
         << " re-quantized\n";
    }
  }
  os << "  inputs        ";
  for (const auto& i : j["inputs"])
    os << i["name"].get<std::string>() << " " << i["type"].get<std::string>() << "  ";
  os << "\n  outputs       ";
  for (const auto& o : j["outputs"])
    os << o["name"].get<std::string>() << " " << o["type"].get<std::string>() << "  ";
  os << "\n  blocks        " << j["blocks"].get<int>() << "\n  nodes         "
     << j["nodes"].get<size_t>() << " (";
  bool first = true;
  for (const auto& [op, n] : j["ops"].items()) {
    os << (first ? "" : ", ") << op << " " << n.get<int>();
    first = false;
  }
  const auto& p = j["parameters"];
  const int64_t host = p["host_embedding"], body = p["body"], head = p["head"];
  os << ")\n  parameters    body " << human_count(body) << ", head " << human_count(head);
  if (!p["head_tied_to"].get<std::string>().empty()) os << " (tied to the embedding)";
  os << ", host embedding " << human_count(host) << "; total "
     << human_count(body + host + (p["head_tied_to"].get<std::string>().empty() ? head : 0))
     << "\n";
  os << "  dtypes        ";
  for (const auto& [dt, n] : p["by_dtype"].items())
    os << dt << " " << human_count(n.get<int64_t>()) << "  ";
  os << "\n";
  return os.str();
}

struct InspectOptions {
  std::string file;
  bool graph = false;
  bool json = false;
  bool memory = false;
  bool program = false;
  bool no_verify = false;
  bool cost = false;
  int64_t prompt_tokens = 240;
  std::string trace;
  ConfigFlags config;
};

/// `inspect --memory` / `--program`: compiles the quantized MBLT for the configured target in
/// memory (shapes only for --memory) and prints the memory plan or the programs.
Status inspect_backend(const InspectOptions& o) {
  const char* what = o.memory ? "--memory" : "--program";
  // The backend lowers quantized graphs only: a float model has no memory plan or program
  // yet. Its plan before quantizing is `qbc plan` (from config.json, no weights read).
  if (!driver::is_mblt_path(o.file)) {
    return invalid_argument("inspect ", what, ": ", o.file,
                            " is not a quantized .mblt (qbc quantize) or a compiled .mxq; a model "
                            "folder or .gguf is a float model, which the backend does not lower: "
                            "for its memory plan and speed before quantizing, run `qbc plan ",
                            o.file, "`");
  }
  QBC_ASSIGN_OR_RETURN(config::ResolvedConfig cfg, resolve_for_model(o.config, o.file));
  QBC_ASSIGN_OR_RETURN(driver::LoadedModel m, driver::open_model(o.file, cfg));
  if (!driver::is_quantized(m.graph)) {
    return invalid_argument("inspect ", what, ": ", o.file,
                            " is a float graph (from `qbc parse`), which the backend does not "
                            "lower; for its memory plan and speed before quantizing run `qbc "
                            "plan` on the model it was parsed from (",
                            m.graph.source_path, "), or inspect the .mblt of `qbc quantize`");
  }
  QBC_ASSIGN_OR_RETURN(npu::Options opts, driver::backend_options(m.graph, cfg));
  // Shapes only: the programs do not depend on the weights' values.
  QBC_ASSIGN_OR_RETURN(isa::Bundle b, npu::run_pipeline("npu-compile", m.graph, opts, nullptr));
  std::string out;
  if (o.memory) {
    const npu::MemoryReport r = npu::memory_report(b);
    out += o.json ? npu::memory_json(r) : npu::memory_text(b, r);
  }
  if (o.program) out += isa::print_bundle(b);
  return emit_output("", out);
}

/// True for the text form of MBLT (the --dump-after files).
bool is_mblt_text_path(const std::string& path) {
  const std::string ext = ".mblt.txt";
  return path.size() > ext.size() && path.compare(path.size() - ext.size(), ext.size(), ext) == 0;
}

Status run_inspect(const InspectOptions& o) {
  if (mxq::is_mxq_file(o.file))
    return inspect_mxq(o.file, o.json, o.memory, o.program, o.no_verify, o.cost, o.prompt_tokens,
                       o.trace);
  if (!o.trace.empty()) {
    return invalid_argument("inspect --trace: ", o.file,
                            " is not an .mxq (the trace is the cost model's schedule of the "
                            "programs inside a compiled file)");
  }
  if (o.cost) {
    return invalid_argument("inspect --cost: ", o.file,
                            " is not an .mxq (the cost model times the programs inside a compiled "
                            "file; for a model folder or config.json use qbc plan)");
  }
  if (o.memory || o.program) return inspect_backend(o);
  ir::Graph g;
  if (is_mblt_text_path(o.file)) {
    QBC_ASSIGN_OR_RETURN(std::string text, read_text_file(o.file));
    QBC_ASSIGN_OR_RETURN(g, ir::parse_text(text, o.file));
  } else if (driver::is_mblt_path(o.file)) {
    QBC_ASSIGN_OR_RETURN(g, ir::load(o.file));
  } else {
    return invalid_argument("inspect: ", o.file,
                            " is not an .mblt file (or .mblt.txt, the text form)");
  }
  const nlohmann::ordered_json j = summary(g, o.file);
  events::result("inspect", j.dump());
  std::string out = o.json ? j.dump(2) + "\n" : summary_text(j);
  if (o.graph) out += (o.json ? "" : "\n") + ir::print_text(g);
  return emit_output("", out);
}

}  // namespace

void register_parse(CLI::App& app, Action& action) {
  auto o = std::make_shared<ParseOptions>();
  CLI::App* cmd = app.add_subcommand(
      "parse",
      "Import a model (HF folder with config.json + safetensors, or a .gguf file) into an MBLT "
      "graph.\n"
      "Checks every tensor against the architecture; weights are referenced, not copied.");
  cmd->add_option("model", o->model, "HF model folder or .gguf file")->required();
  cmd->add_option("-o,--output", o->output, "Output .mblt file")->required();
  add_config_flags(*cmd, o->config);
  cmd->callback([o, &action] { action = [o] { return run_parse(*o); }; });
}

void register_inspect(CLI::App& app, Action& action) {
  auto o = std::make_shared<InspectOptions>();
  CLI::App* cmd = app.add_subcommand("inspect",
                                     "Summarise an MBLT file (architecture, inputs/outputs, "
                                     "parameters by part, dtypes, provenance)\n"
                                     "or a compiled MXQ (header, sections with sizes and digests, "
                                     "schemes, KV layout, provenance)");
  cmd->add_option("file", o->file,
                  ".mblt file, its text form .mblt.txt (qbc quantize --dump-after), or an .mxq "
                  "(or manifest)")
      ->required();
  cmd->add_flag("--no-verify", o->no_verify, "MXQ: skip the section digests");
  cmd->add_flag("--graph", o->graph, "Also print the graph in MBLT text form");
  cmd->add_flag("--json", o->json, "Print the summary (or the --memory plan) as JSON");
  cmd->add_flag("--memory", o->memory,
                "Compile for the configured target (shapes only; an .mxq: its own plan) and print "
                "the memory plan: "
                "DRAM map (weights, KV cache, activations, scratch, io, reserve vs the device), "
                "SRAM peak per core, program size; exit 4 when it does not fit");
  cmd->add_flag("--program", o->program,
                "Compile for the configured target and print the NPU programs in text form "
                "(docs/npu.md)");
  cmd->add_flag("--cost", o->cost,
                "MXQ: the cost model on the file's own programs, per scheme (TTFT, decode tok/s, "
                "roofline fraction, bound) and per node of the decode step (DRAM bytes, MACs, "
                "bound, time)");
  cmd->add_option("--prompt-tokens", o->prompt_tokens, "--cost: prompt length of the TTFT")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--trace", o->trace,
                  "MXQ: write the cost model's schedule of one prefill chunk and one decode step "
                  "(first scheme), every instruction on every core and queue, as a Chrome trace "
                  "event JSON file for ui.perfetto.dev or chrome://tracing");
  add_config_flags(*cmd, o->config);
  cmd->callback([o, &action] { action = [o] { return run_inspect(*o); }; });
}

}  // namespace qbc::cli
