// The values of the chat-template engine: truthiness, text, JSON and equality
// (chat_template_internal.h).
#include <string>

#include "chat_template_internal.h"

namespace qbc::tokenizer::chat {

bool truthy(const Value& v) {
  switch (v.kind) {
    case Value::kUndefined:
    case Value::kNone:
      return false;
    case Value::kBool:
      return v.b;
    case Value::kInt:
      return v.i != 0;
    case Value::kString:
      return !v.s.empty();
    case Value::kList:
      return !v.list->empty();
    case Value::kMap:
      return !v.map->empty();
  }
  return false;
}

std::string text_of(const Value& v) {
  switch (v.kind) {
    case Value::kUndefined:
      return "";
    case Value::kNone:
      return "None";
    case Value::kBool:
      return v.b ? "True" : "False";
    case Value::kInt:
      return std::to_string(v.i);
    case Value::kString:
      return v.s;
    case Value::kList:
    case Value::kMap:
      return json_of(v);
  }
  return "";
}

std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\r':
        out += "\\r";
        break;
      default:
        if (c < 0x20) {
          static const char* hex = "0123456789abcdef";
          out += "\\u00";
          out.push_back(hex[c >> 4]);
          out.push_back(hex[c & 15]);
        } else {
          out.push_back(static_cast<char>(c));
        }
    }
  }
  return out + "\"";
}

std::string json_of(const Value& v) {
  switch (v.kind) {
    case Value::kUndefined:
    case Value::kNone:
      return "null";
    case Value::kBool:
      return v.b ? "true" : "false";
    case Value::kInt:
      return std::to_string(v.i);
    case Value::kString:
      return json_string(v.s);
    case Value::kList: {
      std::string out = "[";
      for (size_t k = 0; k < v.list->size(); ++k) out += (k ? ", " : "") + json_of((*v.list)[k]);
      return out + "]";
    }
    case Value::kMap: {
      std::string out = "{";
      for (size_t k = 0; k < v.map->size(); ++k)
        out +=
            (k ? ", " : "") + json_string((*v.map)[k].first) + ": " + json_of((*v.map)[k].second);
      return out + "}";
    }
  }
  return "null";
}

bool equal(const Value& a, const Value& b) {
  const bool an = a.kind == Value::kInt || a.kind == Value::kBool;
  const bool bn = b.kind == Value::kInt || b.kind == Value::kBool;
  if (an && bn) return (a.kind == Value::kBool ? a.b : a.i) == (b.kind == Value::kBool ? b.b : b.i);
  if (a.kind != b.kind) return false;
  switch (a.kind) {
    case Value::kString:
      return a.s == b.s;
    case Value::kList:
      if (a.list->size() != b.list->size()) return false;
      for (size_t k = 0; k < a.list->size(); ++k)
        if (!equal((*a.list)[k], (*b.list)[k])) return false;
      return true;
    case Value::kMap:
      return a.map == b.map;
    default:
      return true;  // undefined, none
  }
}

}  // namespace qbc::tokenizer::chat
