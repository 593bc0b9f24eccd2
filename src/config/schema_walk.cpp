#include "schema_walk.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "qbc/support/check.h"
#include "qbc/support/json_parse.h"
#include "qbc/support/quote.h"
#include "qbc/support/utf8.h"

namespace qbc::config::detail {
namespace {

std::string normalize_key(const std::string& key) {
  std::string out;
  for (char c : key) {
    if (c == '_' || c == '-') continue;
    out += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  }
  return out;
}

std::string location(const Source& src, const YAML::Mark& mark) {
  Origin o{src.label, src.has_lines ? mark.line + 1 : 0, src.has_lines ? mark.column + 1 : 0};
  return o.to_string();
}

Origin origin_of(const Source& src, const YAML::Mark& mark) {
  return Origin{src.label, src.has_lines ? mark.line + 1 : 0, src.has_lines ? mark.column + 1 : 0};
}

// Every leaf key path of the schema, for "it belongs under ..." hints.
const std::vector<std::string>& all_paths() {
  static const std::vector<std::string> paths = [] {
    std::vector<std::string> out;
    for_each_field(CompileOptions::descriptor(), "",
                   [&](const std::string& p, const pb::FieldDescriptor*) { out.push_back(p); });
    return out;
  }();
  return paths;
}

std::string unknown_key_message(const pb::Descriptor* desc, const std::string& prefix,
                                const std::string& key) {
  std::ostringstream os;
  os << "unknown key " << quote_prefix(key);
  if (!prefix.empty()) os << " in section '" << prefix << "'";
  // No spelling hints for a key no schema name is near (and edit distances over a megabyte-long
  // key would take minutes).
  if (key.size() > 2 * kQuotePrefixBytes) return os.str();
  // Closest sibling key.
  std::string best;
  size_t best_d = std::numeric_limits<size_t>::max();
  for (int i = 0; i < desc->field_count(); ++i) {
    const std::string& name = desc->field(i)->json_name();
    size_t d = edit_distance(normalize_key(key), normalize_key(name));
    if (d < best_d) {
      best_d = d;
      best = name;
    }
  }
  size_t limit = std::max<size_t>(2, key.size() / 3);
  if (!best.empty() && best_d <= limit) {
    os << "; did you mean '" << best << "'?";
    return os.str();
  }
  // The same key elsewhere in the schema.
  for (const std::string& p : all_paths()) {
    size_t dot = p.rfind('.');
    std::string last = dot == std::string::npos ? p : p.substr(dot + 1);
    if (normalize_key(last) == normalize_key(key)) {
      os << "; '" << last << "' is a key of '" << p.substr(0, dot == std::string::npos ? 0 : dot)
         << "' (full path " << p << ")";
      return os.str();
    }
  }
  os << "; valid keys here: ";
  for (int i = 0; i < desc->field_count(); ++i)
    os << (i ? ", " : "") << desc->field(i)->json_name();
  return os.str();
}

Status type_error(const std::string& loc, const std::string& path, const pb::FieldDescriptor* f,
                  const YAML::Node& node) {
  std::string got;
  switch (node.Type()) {
    case YAML::NodeType::Null:
      got = "nothing";
      break;
    case YAML::NodeType::Sequence:
      got = "a list";
      break;
    case YAML::NodeType::Map:
      got = "a mapping";
      break;
    default:
      got = quote_prefix(node.Scalar());
  }
  return invalid_argument(loc, ": ", path, ": expected ", type_text(f), ", got ", got);
}

Status check_range(const std::string& loc, const std::string& path, const pb::FieldDescriptor* f,
                   double v, const std::string& text) {
  const FieldSpec& spec = field_spec(f);
  bool bad = false;
  if (spec.choices_size() > 0) {
    bad = std::none_of(spec.choices().begin(), spec.choices().end(),
                       [&](int64_t c) { return static_cast<double>(c) == v; });
  }
  if (spec.has_min() && (v < spec.min() || (spec.min_exclusive() && v == spec.min()))) bad = true;
  if (spec.has_max() && v > spec.max()) bad = true;
  if (bad)
    return invalid_argument(loc, ": ", path, ": value ", clip_prefix(text),
                            " is out of range (allowed: ", range_text(f), ")");
  return ok_status();
}

// Converts one scalar node and appends/sets it on `msg`.
Status set_scalar(const YAML::Node& node, pb::Message& msg, const pb::FieldDescriptor* f,
                  const std::string& path, const std::string& loc) {
  if (!node.IsScalar()) return type_error(loc, path, f, node);
  const std::string& text = node.Scalar();
  // A value from a YAML escape or a --set argument: the same UTF-8 rule as the text.
  if (Status s = check_utf8_value(text, "the value"); !s.ok())
    return invalid_argument(loc, ": ", path, ": ", s.message());
  const bool quoted = node.Tag() == "!";
  const pb::Reflection* r = msg.GetReflection();
  const bool rep = f->is_repeated();
  switch (f->cpp_type()) {
    case pb::FieldDescriptor::CPPTYPE_BOOL: {
      bool v;
      if (quoted) return type_error(loc, path, f, node);
      if (text == "true" || text == "True" || text == "TRUE") {
        v = true;
      } else if (text == "false" || text == "False" || text == "FALSE") {
        v = false;
      } else {
        return type_error(loc, path, f, node);
      }
      rep ? r->AddBool(&msg, f, v) : r->SetBool(&msg, f, v);
      return ok_status();
    }
    case pb::FieldDescriptor::CPPTYPE_INT32:
    case pb::FieldDescriptor::CPPTYPE_INT64: {
      int64_t v = 0;
      auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
      if (quoted || text.empty() || ec != std::errc() || end != text.data() + text.size()) {
        return type_error(loc, path, f, node);
      }
      if (f->cpp_type() == pb::FieldDescriptor::CPPTYPE_INT32 &&
          (v < std::numeric_limits<int32_t>::min() || v > std::numeric_limits<int32_t>::max())) {
        return invalid_argument(loc, ": ", path, ": value ", clip_prefix(text),
                                " does not fit a 32-bit integer");
      }
      QBC_RETURN_IF_ERROR(check_range(loc, path, f, static_cast<double>(v), text));
      if (f->cpp_type() == pb::FieldDescriptor::CPPTYPE_INT32) {
        rep ? r->AddInt32(&msg, f, static_cast<int32_t>(v))
            : r->SetInt32(&msg, f, static_cast<int32_t>(v));
      } else {
        rep ? r->AddInt64(&msg, f, v) : r->SetInt64(&msg, f, v);
      }
      return ok_status();
    }
    // No unsigned field in compile_options.proto today; read them like the signed ones, so a new
    // one is not an "unhandled field type" (emit and value_text print them already).
    case pb::FieldDescriptor::CPPTYPE_UINT32:
    case pb::FieldDescriptor::CPPTYPE_UINT64: {
      uint64_t v = 0;
      auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
      if (quoted || text.empty() || ec != std::errc() || end != text.data() + text.size()) {
        return type_error(loc, path, f, node);
      }
      if (f->cpp_type() == pb::FieldDescriptor::CPPTYPE_UINT32 &&
          v > std::numeric_limits<uint32_t>::max()) {
        return invalid_argument(loc, ": ", path, ": value ", clip_prefix(text),
                                " does not fit an unsigned 32-bit integer");
      }
      QBC_RETURN_IF_ERROR(check_range(loc, path, f, static_cast<double>(v), text));
      if (f->cpp_type() == pb::FieldDescriptor::CPPTYPE_UINT32) {
        rep ? r->AddUInt32(&msg, f, static_cast<uint32_t>(v))
            : r->SetUInt32(&msg, f, static_cast<uint32_t>(v));
      } else {
        rep ? r->AddUInt64(&msg, f, v) : r->SetUInt64(&msg, f, v);
      }
      return ok_status();
    }
    case pb::FieldDescriptor::CPPTYPE_DOUBLE:
    case pb::FieldDescriptor::CPPTYPE_FLOAT: {
      double v = 0;
      auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
      if (quoted || text.empty() || ec != std::errc() || end != text.data() + text.size() ||
          !std::isfinite(v)) {
        return type_error(loc, path, f, node);
      }
      QBC_RETURN_IF_ERROR(check_range(loc, path, f, v, text));
      if (f->cpp_type() == pb::FieldDescriptor::CPPTYPE_DOUBLE) {
        rep ? r->AddDouble(&msg, f, v) : r->SetDouble(&msg, f, v);
      } else {
        rep ? r->AddFloat(&msg, f, static_cast<float>(v))
            : r->SetFloat(&msg, f, static_cast<float>(v));
      }
      return ok_status();
    }
    case pb::FieldDescriptor::CPPTYPE_STRING:
      rep ? r->AddString(&msg, f, text) : r->SetString(&msg, f, text);
      return ok_status();
    case pb::FieldDescriptor::CPPTYPE_ENUM: {
      const pb::EnumDescriptor* e = f->enum_type();
      for (int i = 0; i < e->value_count(); ++i) {
        if (e->value(i)->number() == 0) continue;  // UNSPECIFIED is not spellable.
        if (enum_spelling(e->value(i)) == text) {
          rep ? r->AddEnumValue(&msg, f, e->value(i)->number())
              : r->SetEnumValue(&msg, f, e->value(i)->number());
          return ok_status();
        }
      }
      std::ostringstream os;
      os << loc << ": " << path << ": " << quote_prefix(text) << " is not one of " << range_text(f);
      for (int i = 0; i < e->value_count(); ++i) {
        std::string s = enum_spelling(e->value(i));
        if (e->value(i)->number() != 0 &&
            edit_distance(normalize_key(s), normalize_key(text)) <= 2) {
          os << "; did you mean '" << s << "'?";
          break;
        }
      }
      return invalid_argument(os.str());
    }
    case pb::FieldDescriptor::CPPTYPE_MESSAGE:
      break;
  }
  return internal_error(loc, ": ", path, ": unhandled field type");
}

}  // namespace

std::string join_path(const std::string& prefix, const std::string& key) {
  return prefix.empty() ? key : prefix + "." + key;
}

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      cur[j] =
          std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
    }
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

const FieldSpec& field_spec(const pb::FieldDescriptor* field) {
  return field->options().GetExtension(spec);
}

std::string enum_spelling(const pb::EnumValueDescriptor* value) {
  const std::string& s = value->options().GetExtension(spelling);
  return s.empty() ? value->name() : s;
}

const pb::FieldDescriptor* find_field(const pb::Descriptor* desc, const std::string& key) {
  for (int i = 0; i < desc->field_count(); ++i) {
    const pb::FieldDescriptor* f = desc->field(i);
    if (f->json_name() == key || f->name() == key) return f;
  }
  const std::string norm = normalize_key(key);
  for (int i = 0; i < desc->field_count(); ++i) {
    if (normalize_key(desc->field(i)->json_name()) == norm) return desc->field(i);
  }
  return nullptr;
}

StatusOr<YAML::Node> parse_document(const std::string& text, const std::string& label,
                                    bool is_json) {
  // Every string of a configuration ends up in JSON (dump-config, the copy inside MBLT and MXQ
  // files), which holds UTF-8 only: a byte outside it is refused here, where its line and column
  // are known. A UTF-16/32 stream (byte-order mark) is yaml-cpp's to convert; its scalars are
  // checked one by one in set_scalar.
  const bool utf16_or_32 = text.size() >= 2 && ((text[0] == '\xFF' && text[1] == '\xFE') ||
                                                (text[0] == '\xFE' && text[1] == '\xFF') ||
                                                (text[0] == '\0' && text[1] == '\0'));
  if (!utf16_or_32) QBC_RETURN_IF_ERROR(check_utf8_text(text, label, "the text"));
  if (is_json) {
    // yaml-cpp accepts JSON, but also accepts things JSON does not (comments,
    // trailing garbage). Validate strictly first so JSON errors read as JSON errors
    // (syntax, and number literals that overflow a double, located by line and key).
    JsonParseOptions options;
    options.error_label = "malformed JSON";
    StatusOr<nlohmann::json> parsed = parse_json_text(text, label, options);
    if (!parsed.ok()) return parsed.status();
  }
  try {
    return YAML::Load(text);
  } catch (const YAML::Exception& e) {
    return invalid_argument(label, ":", e.mark.line + 1, ":", e.mark.column + 1, ": malformed ",
                            is_json ? "JSON" : "YAML", ": ", clip_prefix(e.msg, 160));
  } catch (const std::exception& e) {  // e.g. std::bad_alloc inside yaml-cpp on absurd input
    return invalid_argument(label, ": malformed ", is_json ? "JSON" : "YAML", ": ",
                            clip_prefix(e.what(), 160));
  }
}

Status apply_node(const YAML::Node& node, pb::Message& msg, const std::string& prefix,
                  const Source& source, Origins* origins) {
  if (!node || node.IsNull()) return ok_status();
  const std::string here = location(source, node.Mark());
  if (!node.IsMap()) {
    return invalid_argument(here, ": ", prefix.empty() ? std::string("top level") : prefix,
                            ": expected a mapping of keys, got ",
                            node.IsSequence() ? "a list" : quote_prefix(node.Scalar()));
  }
  const pb::Descriptor* desc = msg.GetDescriptor();
  const pb::Reflection* refl = msg.GetReflection();
  std::set<const pb::FieldDescriptor*> seen;
  for (auto it = node.begin(); it != node.end(); ++it) {
    // Copies, not references: yaml-cpp's iterator returns a temporary pair, so a reference to
    // it->first dangles at the end of the statement (found by fuzz_compile_config_json).
    const YAML::Node key_node = it->first;
    const YAML::Node value = it->second;
    const std::string key_loc = location(source, key_node.Mark());
    if (!key_node.IsScalar()) {
      return invalid_argument(key_loc, ": ", prefix.empty() ? "top level" : prefix,
                              ": keys must be plain names");
    }
    const std::string key = key_node.Scalar();
    const pb::FieldDescriptor* f = find_field(desc, key);
    if (f == nullptr) {
      return invalid_argument(key_loc, ": ", clip_prefix(join_path(prefix, key)), ": ",
                              unknown_key_message(desc, prefix, key));
    }
    const std::string path = join_path(prefix, f->json_name());
    if (!seen.insert(f).second) {
      return invalid_argument(key_loc, ": ", path, ": key given twice in the same section");
    }
    // A missing value has no position of its own; point at its key.
    const std::string value_loc = value.IsNull() ? key_loc : location(source, value.Mark());
    if (f->cpp_type() == pb::FieldDescriptor::CPPTYPE_MESSAGE) {
      if (f->is_repeated()) return internal_error(path, ": repeated sections are not supported");
      if (!value.IsNull() && !value.IsMap()) return type_error(value_loc, path, f, value);
      QBC_RETURN_IF_ERROR(apply_node(value, *refl->MutableMessage(&msg, f), path, source, origins));
      continue;
    }
    if (f->is_repeated()) {
      // A list replaces the lower layer's list as a whole.
      if (!value.IsSequence()) return type_error(value_loc, path, f, value);
      refl->ClearField(&msg, f);
      for (size_t i = 0; i < value.size(); ++i) {
        const YAML::Node& item = value[i];
        QBC_RETURN_IF_ERROR(set_scalar(item, msg, f, path + "[" + std::to_string(i) + "]",
                                       location(source, item.Mark())));
      }
    } else {
      if (value.IsNull()) return type_error(value_loc, path, f, value);
      QBC_RETURN_IF_ERROR(set_scalar(value, msg, f, path, value_loc));
    }
    if (origins) (*origins)[path] = origin_of(source, value.Mark());
  }
  return ok_status();
}

void apply_defaults(pb::Message& msg, const std::string& prefix, Origins* origins) {
  const pb::Descriptor* desc = msg.GetDescriptor();
  const pb::Reflection* refl = msg.GetReflection();
  for (int i = 0; i < desc->field_count(); ++i) {
    const pb::FieldDescriptor* f = desc->field(i);
    const std::string path = join_path(prefix, f->json_name());
    if (f->cpp_type() == pb::FieldDescriptor::CPPTYPE_MESSAGE) {
      apply_defaults(*refl->MutableMessage(&msg, f), path, origins);
      continue;
    }
    refl->ClearField(&msg, f);
    const std::string& def = field_spec(f).default_value();
    if (!def.empty()) {
      Status s = set_scalar(YAML::Load(def), msg, f, path, "default");
      QBC_CHECK(s.ok()) << "bad default in compile_options.proto: " << s.message();
    }
    if (origins) (*origins)[path] = Origin{"default", 0, 0};
  }
}

void for_each_leaf(const pb::Message& msg, const std::string& prefix,
                   const std::function<void(const std::string&, const pb::FieldDescriptor*,
                                            const pb::Message&)>& fn) {
  const pb::Descriptor* desc = msg.GetDescriptor();
  const pb::Reflection* refl = msg.GetReflection();
  for (int i = 0; i < desc->field_count(); ++i) {
    const pb::FieldDescriptor* f = desc->field(i);
    const std::string path = join_path(prefix, f->json_name());
    if (f->cpp_type() == pb::FieldDescriptor::CPPTYPE_MESSAGE && !f->is_repeated()) {
      for_each_leaf(refl->GetMessage(msg, f), path, fn);
    } else {
      fn(path, f, msg);
    }
  }
}

void for_each_field(const pb::Descriptor* desc, const std::string& prefix,
                    const std::function<void(const std::string&, const pb::FieldDescriptor*)>& fn) {
  for (int i = 0; i < desc->field_count(); ++i) {
    const pb::FieldDescriptor* f = desc->field(i);
    const std::string path = join_path(prefix, f->json_name());
    fn(path, f);
    if (f->cpp_type() == pb::FieldDescriptor::CPPTYPE_MESSAGE) {
      for_each_field(f->message_type(), path, fn);
    }
  }
}

std::string format_double(double v) {
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), v);
  std::string s(buf, end);
  // Keep a float recognisable as one in YAML/JSON output.
  if (s.find_first_of(".eEn") == std::string::npos) s += ".0";
  return s;
}

namespace {
std::string quote(const std::string& s) { return nlohmann::json(s).dump(); }

std::string one_value(const pb::Message& m, const pb::FieldDescriptor* f, int index) {
  const pb::Reflection* r = m.GetReflection();
  const bool rep = index >= 0;
  switch (f->cpp_type()) {
    case pb::FieldDescriptor::CPPTYPE_BOOL:
      return (rep ? r->GetRepeatedBool(m, f, index) : r->GetBool(m, f)) ? "true" : "false";
    case pb::FieldDescriptor::CPPTYPE_INT32:
      return std::to_string(rep ? r->GetRepeatedInt32(m, f, index) : r->GetInt32(m, f));
    case pb::FieldDescriptor::CPPTYPE_INT64:
      return std::to_string(rep ? r->GetRepeatedInt64(m, f, index) : r->GetInt64(m, f));
    case pb::FieldDescriptor::CPPTYPE_UINT32:
      return std::to_string(rep ? r->GetRepeatedUInt32(m, f, index) : r->GetUInt32(m, f));
    case pb::FieldDescriptor::CPPTYPE_UINT64:
      return std::to_string(rep ? r->GetRepeatedUInt64(m, f, index) : r->GetUInt64(m, f));
    case pb::FieldDescriptor::CPPTYPE_DOUBLE:
      return format_double(rep ? r->GetRepeatedDouble(m, f, index) : r->GetDouble(m, f));
    case pb::FieldDescriptor::CPPTYPE_FLOAT:
      return format_double(rep ? r->GetRepeatedFloat(m, f, index) : r->GetFloat(m, f));
    case pb::FieldDescriptor::CPPTYPE_STRING:
      return quote(rep ? r->GetRepeatedString(m, f, index) : r->GetString(m, f));
    case pb::FieldDescriptor::CPPTYPE_ENUM:
      return enum_spelling(rep ? r->GetRepeatedEnum(m, f, index) : r->GetEnum(m, f));
    case pb::FieldDescriptor::CPPTYPE_MESSAGE:
      break;
  }
  return "?";
}
}  // namespace

std::string value_text(const pb::Message& parent, const pb::FieldDescriptor* field) {
  if (!field->is_repeated()) return one_value(parent, field, -1);
  const int n = parent.GetReflection()->FieldSize(parent, field);
  std::string out = "[";
  for (int i = 0; i < n; ++i) out += (i ? ", " : "") + one_value(parent, field, i);
  return out + "]";
}

std::string type_text(const pb::FieldDescriptor* f) {
  std::string base;
  switch (f->cpp_type()) {
    case pb::FieldDescriptor::CPPTYPE_BOOL:
      base = "bool";
      break;
    case pb::FieldDescriptor::CPPTYPE_INT32:
    case pb::FieldDescriptor::CPPTYPE_INT64:
      base = "int";
      break;
    case pb::FieldDescriptor::CPPTYPE_UINT32:
    case pb::FieldDescriptor::CPPTYPE_UINT64:
      base = "unsigned int";
      break;
    case pb::FieldDescriptor::CPPTYPE_DOUBLE:
    case pb::FieldDescriptor::CPPTYPE_FLOAT:
      base = "number";
      break;
    case pb::FieldDescriptor::CPPTYPE_STRING:
      base = "string";
      break;
    case pb::FieldDescriptor::CPPTYPE_ENUM:
      base = "one of " + range_text(f);
      break;
    case pb::FieldDescriptor::CPPTYPE_MESSAGE:
      base = "section";
      break;
  }
  return f->is_repeated() ? "list of " + base : base;
}

std::string range_text(const pb::FieldDescriptor* f) {
  if (f->cpp_type() == pb::FieldDescriptor::CPPTYPE_ENUM) {
    std::string out;
    const pb::EnumDescriptor* e = f->enum_type();
    for (int i = 0; i < e->value_count(); ++i) {
      if (e->value(i)->number() == 0) continue;
      out += (out.empty() ? "" : " | ") + enum_spelling(e->value(i));
    }
    return out;
  }
  const FieldSpec& s = field_spec(f);
  if (s.choices_size() > 0) {
    std::string out;
    for (int64_t c : s.choices()) out += (out.empty() ? "" : " | ") + std::to_string(c);
    return out;
  }
  auto num = [&](double v) {
    return f->cpp_type() == pb::FieldDescriptor::CPPTYPE_DOUBLE ? format_double(v)
                                                                : std::to_string(int64_t(v));
  };
  if (s.has_min() && s.has_max()) {
    return (s.min_exclusive() ? "> " : "") + num(s.min()) + " .. " + num(s.max());
  }
  if (s.has_min()) return (s.min_exclusive() ? "> " : ">= ") + num(s.min());
  if (s.has_max()) return "<= " + num(s.max());
  return "";
}

}  // namespace qbc::config::detail

namespace qbc::config {

std::string Origin::to_string() const {
  if (line <= 0) return source;
  std::ostringstream os;
  os << source << ":" << line;
  if (column > 0) os << ":" << column;
  return os.str();
}

}  // namespace qbc::config
