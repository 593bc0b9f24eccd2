// print_text: the MBLT text form (grammar in docs/ir.md).
#include <charconv>
#include <nlohmann/json.hpp>
#include <sstream>

#include "qbc/ir/text.h"

namespace qbc::ir {
namespace {

std::string quote(const std::string& s) { return nlohmann::json(s).dump(); }

std::string num(double v) {
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), v);
  std::string s(buf, end);
  if (s.find_first_of(".eEn") == std::string::npos) s += ".0";  // stays a float when parsed back
  return s;
}

std::string attr_text(const AttrValue& v) {
  switch (attr_kind(v)) {
    case AttrKind::kInt: return std::to_string(std::get<int64_t>(v));
    case AttrKind::kFloat: return num(std::get<double>(v));
    case AttrKind::kString: return quote(std::get<std::string>(v));
    case AttrKind::kInts: {
      std::string s = "[";
      for (int64_t x : std::get<std::vector<int64_t>>(v)) s += (s.size() > 1 ? ", " : "") + std::to_string(x);
      return s + "]";
    }
    case AttrKind::kFloats: {
      std::string s = "[";
      for (double x : std::get<std::vector<double>>(v)) s += (s.size() > 1 ? ", " : "") + num(x);
      return s + "]";
    }
  }
  return "?";
}

}  // namespace

std::string print_text(const Graph& g) {
  std::ostringstream os;
  os << "mblt 1\n";
  os << "graph @" << g.name() << "\n";
  os << "source " << quote(g.source_path) << " format " << quote(g.source_format) << "\n";
  for (const SourceFile& f : g.files) {
    os << "file " << quote(f.path) << " size " << f.size << " xxh3 " << quote(f.xxh3_128) << "\n";
  }
  for (const auto& [k, v] : g.metadata) os << "meta " << quote(k) << " " << quote(v) << "\n";
  for (const auto& [name, w] : g.weights()) {
    os << "weight @" << name << " : " << w.type.to_string() << " = "
       << (w.source == WeightSource::kModel ? "model " : "sidecar ") << quote(w.tensor)
       << (w.role == WeightRole::kHostEmbedding ? " host" : "") << "\n";
  }
  for (const Node& n : g.nodes()) {
    os << "%" << n.name << " = " << op_info(n.op).name << "(";
    for (size_t i = 0; i < n.operands.size(); ++i) {
      const Operand& o = n.operands[i];
      os << (i ? ", " : "") << (o.is_weight() ? "@" + o.weight : "%" + g.node(o.value).name);
    }
    os << ")";
    if (!n.attrs.all().empty()) {
      os << " {";
      bool first = true;
      for (const auto& [k, v] : n.attrs.all()) {
        os << (first ? "" : ", ") << k << " = " << attr_text(v);
        first = false;
      }
      os << "}";
    }
    os << " : " << n.type.to_string();
    if (n.block >= 0) os << " block " << n.block;
    if (n.part == Part::kHead) os << " head";
    if (!n.origin.empty()) os << " from " << quote(n.origin);
    os << "\n";
  }
  os << "return";
  for (size_t i = 0; i < g.outputs().size(); ++i) {
    os << (i ? ", " : " ") << "%" << g.node(g.outputs()[i]).name;
  }
  os << "\n";
  return os.str();
}

}  // namespace qbc::ir
