// Printing a configuration: YAML, JSON, an origins table and the Markdown key
// reference. All walk the schema in declaration order, so output is stable.
#include <algorithm>
#include <nlohmann/json.hpp>
#include <sstream>

#include "qbc/config/config.h"
#include "schema_walk.h"

namespace qbc::config {
namespace {

namespace pb = google::protobuf;

void yaml_message(const pb::Message& msg, int indent, std::ostringstream& os) {
  const pb::Descriptor* desc = msg.GetDescriptor();
  const pb::Reflection* refl = msg.GetReflection();
  const std::string pad(indent, ' ');
  for (int i = 0; i < desc->field_count(); ++i) {
    const pb::FieldDescriptor* f = desc->field(i);
    if (f->cpp_type() == pb::FieldDescriptor::CPPTYPE_MESSAGE) {
      os << pad << f->json_name() << ":\n";
      yaml_message(refl->GetMessage(msg, f), indent + 2, os);
    } else {
      os << pad << f->json_name() << ": " << detail::value_text(msg, f) << "\n";
    }
  }
}

nlohmann::ordered_json json_scalar(const pb::Message& m, const pb::FieldDescriptor* f, int index) {
  const pb::Reflection* r = m.GetReflection();
  const bool rep = index >= 0;
  switch (f->cpp_type()) {
    case pb::FieldDescriptor::CPPTYPE_BOOL: return rep ? r->GetRepeatedBool(m, f, index) : r->GetBool(m, f);
    case pb::FieldDescriptor::CPPTYPE_INT32: return rep ? r->GetRepeatedInt32(m, f, index) : r->GetInt32(m, f);
    case pb::FieldDescriptor::CPPTYPE_INT64: return rep ? r->GetRepeatedInt64(m, f, index) : r->GetInt64(m, f);
    case pb::FieldDescriptor::CPPTYPE_UINT32: return rep ? r->GetRepeatedUInt32(m, f, index) : r->GetUInt32(m, f);
    case pb::FieldDescriptor::CPPTYPE_UINT64: return rep ? r->GetRepeatedUInt64(m, f, index) : r->GetUInt64(m, f);
    case pb::FieldDescriptor::CPPTYPE_DOUBLE: return rep ? r->GetRepeatedDouble(m, f, index) : r->GetDouble(m, f);
    case pb::FieldDescriptor::CPPTYPE_FLOAT: return rep ? r->GetRepeatedFloat(m, f, index) : r->GetFloat(m, f);
    case pb::FieldDescriptor::CPPTYPE_STRING: return rep ? r->GetRepeatedString(m, f, index) : r->GetString(m, f);
    case pb::FieldDescriptor::CPPTYPE_ENUM:
      return detail::enum_spelling(rep ? r->GetRepeatedEnum(m, f, index) : r->GetEnum(m, f));
    case pb::FieldDescriptor::CPPTYPE_MESSAGE: break;
  }
  return nullptr;
}

nlohmann::ordered_json json_message(const pb::Message& msg) {
  nlohmann::ordered_json out = nlohmann::ordered_json::object();
  const pb::Descriptor* desc = msg.GetDescriptor();
  const pb::Reflection* refl = msg.GetReflection();
  for (int i = 0; i < desc->field_count(); ++i) {
    const pb::FieldDescriptor* f = desc->field(i);
    if (f->cpp_type() == pb::FieldDescriptor::CPPTYPE_MESSAGE) {
      out[f->json_name()] = json_message(refl->GetMessage(msg, f));
    } else if (f->is_repeated()) {
      nlohmann::ordered_json list = nlohmann::ordered_json::array();
      for (int k = 0; k < refl->FieldSize(msg, f); ++k) list.push_back(json_scalar(msg, f, k));
      out[f->json_name()] = list;
    } else {
      out[f->json_name()] = json_scalar(msg, f, -1);
    }
  }
  return out;
}

std::string md_escape(std::string s) {
  std::string out;
  for (char c : s) {
    if (c == '|') out += "\\|";
    else out += c;
  }
  return out;
}

}  // namespace

std::string to_yaml(const CompileOptions& options) {
  std::ostringstream os;
  os << "# qbc effective configuration (qbc dump-config)\n";
  yaml_message(options, 0, os);
  return os.str();
}

std::string to_json(const CompileOptions& options) {
  return json_message(options).dump(2) + "\n";
}

std::vector<OriginRow> origin_rows(const CompileOptions& options, const Origins& origins) {
  std::vector<OriginRow> rows;
  detail::for_each_leaf(options, "",
                        [&](const std::string& path, const pb::FieldDescriptor* f,
                            const pb::Message& parent) {
                          auto it = origins.find(path);
                          rows.push_back({path, detail::value_text(parent, f),
                                          it == origins.end() ? std::string("default")
                                                              : it->second.to_string()});
                        });
  return rows;
}

std::string origins_table(const CompileOptions& options, const Origins& origins) {
  const std::vector<OriginRow> rows = origin_rows(options, origins);
  size_t width = 0;
  for (const OriginRow& r : rows) width = std::max(width, r.path.size() + 3 + r.value.size());
  std::ostringstream os;
  for (const OriginRow& r : rows) {
    const std::string line = r.path + " = " + r.value;
    os << line << std::string(width - line.size() + 2, ' ') << "# " << r.origin << "\n";
  }
  return os.str();
}

std::string reference_markdown() {
  std::ostringstream os;
  const CompileOptions defs = defaults();
  std::string section;
  auto section_header = [&](const std::string& path, const pb::Descriptor* d) {
    os << "\n### `" << (path.empty() ? "(top level)" : path) << "`\n\n";
    const std::string& doc = d->options().GetExtension(section_doc);
    if (!doc.empty()) os << doc << "\n\n";
    os << "| key | type | default | allowed | meaning |\n|---|---|---|---|---|\n";
  };
  std::function<void(const pb::Message&, const std::string&)> walk =
      [&](const pb::Message& msg, const std::string& prefix) {
        const pb::Descriptor* d = msg.GetDescriptor();
        section_header(prefix, d);
        std::vector<std::pair<const pb::FieldDescriptor*, std::string>> children;
        for (int i = 0; i < d->field_count(); ++i) {
          const pb::FieldDescriptor* f = d->field(i);
          const std::string path = detail::join_path(prefix, f->json_name());
          if (f->cpp_type() == pb::FieldDescriptor::CPPTYPE_MESSAGE) {
            os << "| `" << path << "` | section | | | see below |\n";
            children.emplace_back(f, path);
            continue;
          }
          const FieldSpec& spec = detail::field_spec(f);
          os << "| `" << path << "` | " << md_escape(f->enum_type() ? std::string("enum") : detail::type_text(f)) << " | `"
             << md_escape(detail::value_text(msg, f)) << "` | " << md_escape(detail::range_text(f))
             << " | " << md_escape(spec.doc()) << " |\n";
        }
        for (const auto& [f, path] : children) {
          walk(msg.GetReflection()->GetMessage(msg, f), path);
        }
      };
  walk(defs, "");
  return os.str();
}

}  // namespace qbc::config
