// The summary `qbc inspect` shows of an MBLT graph (see graph_summary.h).
#include "graph_summary.h"

#include <algorithm>
#include <map>
#include <sstream>

#include "qbc/driver/source_types.h"
#include "qbc/ir/op.h"

namespace qbc::driver {
namespace {

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

}  // namespace

nlohmann::ordered_json graph_summary_json(const ir::Graph& g, const std::string& path) {
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
  j["source"]["dtype_counts"] = count_by_dtype(source_dtypes);
  return j;
}

std::string graph_summary_text(const nlohmann::ordered_json& j) {
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

}  // namespace qbc::driver
