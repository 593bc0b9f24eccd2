// The chat-template renderer: walks the tree with the messages and tokens of a ChatContext,
// within the bounds of chat_template_internal.h (steps, output size, nesting).
#include <algorithm>
#include <cstdint>
#include <map>
#include <utility>

#include "chat_template_internal.h"
#include "qbc/support/quote.h"

namespace qbc::tokenizer::chat {
namespace {

// ------------------------------------------------------------------------------ rendering

class Renderer {
  int64_t steps_ = 0;

 public:
  Renderer(std::string_view text, std::string source) : text_(text), source_(std::move(source)) {}

  Status error(size_t at, const std::string& what) const {
    return invalid_argument(source_, ":", where(text_, at), ": ", what);
  }

  std::vector<std::map<std::string, Value>> scopes;

  Value lookup(const std::string& name) const {
    for (auto it = scopes.rbegin(); it != scopes.rend(); ++it) {
      auto f = it->find(name);
      if (f != it->end()) return f->second;
    }
    return Value();
  }

  // Bounds a value's text before it is built: namespaces can hold themselves (a cycle) and
  // repeated [x, x] doubles a value each time, so the walk counts steps, nesting and an
  // upper estimate of the text's bytes, and refuses past any bound.
  Status check_text(const Value& v, size_t at, int depth, size_t* bytes) {
    QBC_RETURN_IF_ERROR(step(at));
    if (depth > kMaxDepth)
      return error(at, "a value nested deeper than " + std::to_string(kMaxDepth) +
                           " levels (or holding itself) cannot be printed");
    *bytes += v.kind == Value::kString ? 2 * v.s.size() + 2 : 24;
    if (*bytes > kMaxOutput)
      return error(at, "a value's text exceeds " + std::to_string(kMaxOutput >> 20) + " MiB");
    if (v.kind == Value::kList)
      for (const Value& x : *v.list) QBC_RETURN_IF_ERROR(check_text(x, at, depth + 1, bytes));
    if (v.kind == Value::kMap)
      for (const auto& [k, x] : *v.map) {
        *bytes += 2 * k.size() + 4;
        QBC_RETURN_IF_ERROR(check_text(x, at, depth + 1, bytes));
      }
    return ok_status();
  }
  // Whether `v` holds the mapping `target`. Only namespaces change after they are made, and
  // this check keeps them from holding themselves, so values stay acyclic (no reference cycle
  // of shared maps, which would also never be freed) and the walk ends; steps bound it.
  StatusOr<bool> holds(const Value& v, const void* target, size_t at) {
    QBC_RETURN_IF_ERROR(step(at));
    if (v.kind == Value::kMap) {
      if (v.map.get() == target) return true;
      for (const auto& [k, x] : *v.map) {
        QBC_ASSIGN_OR_RETURN(const bool h, holds(x, target, at));
        if (h) return true;
      }
    }
    if (v.kind == Value::kList)
      for (const Value& x : *v.list) {
        QBC_ASSIGN_OR_RETURN(const bool h, holds(x, target, at));
        if (h) return true;
      }
    return false;
  }

  StatusOr<std::string> text(const Value& v, size_t at) {
    size_t bytes = 0;
    if (v.kind == Value::kList || v.kind == Value::kMap)
      QBC_RETURN_IF_ERROR(check_text(v, at, 0, &bytes));
    return text_of(v);
  }
  StatusOr<std::string> json(const Value& v, size_t at) {
    size_t bytes = 0;
    QBC_RETURN_IF_ERROR(check_text(v, at, 0, &bytes));
    return json_of(v);
  }

  Status step(size_t at) {
    if (++steps_ > kMaxSteps)
      return error(at, "rendering takes more than " + std::to_string(kMaxSteps) + " steps");
    return ok_status();
  }

  StatusOr<Value> eval(const Expr& e) {
    QBC_RETURN_IF_ERROR(step(e.at));
    switch (e.kind) {
      case Expr::kLiteral:
        return e.literal;
      case Expr::kName:
        return lookup(e.name);
      case Expr::kAttr: {
        QBC_ASSIGN_OR_RETURN(Value a, eval(*e.args[0]));
        const Value* v = a.find(e.name);
        return v != nullptr ? *v : Value();
      }
      case Expr::kIndex: {
        QBC_ASSIGN_OR_RETURN(Value a, eval(*e.args[0]));
        QBC_ASSIGN_OR_RETURN(Value i, eval(*e.args[1]));
        if (a.kind == Value::kMap && i.kind == Value::kString) {
          const Value* v = a.find(i.s);
          return v != nullptr ? *v : Value();
        }
        if ((a.kind == Value::kList || a.kind == Value::kString) && i.kind == Value::kInt) {
          const auto n = static_cast<int64_t>(a.kind == Value::kList ? a.list->size() : a.s.size());
          const int64_t k = i.i < 0 ? i.i + n : i.i;
          if (k < 0 || k >= n) return Value();
          if (a.kind == Value::kList) return (*a.list)[k];
          return Value::string(a.s.substr(k, 1));
        }
        return Value();
      }
      case Expr::kSlice: {
        QBC_ASSIGN_OR_RETURN(Value a, eval(*e.args[0]));
        if (a.kind != Value::kList && a.kind != Value::kString)
          return error(e.at, "slicing needs a list or a string");
        const auto n = static_cast<int64_t>(a.kind == Value::kList ? a.list->size() : a.s.size());
        int64_t bounds[2] = {0, n};
        for (int k = 0; k < 2; ++k) {
          if (!e.args[1 + k]) continue;
          QBC_ASSIGN_OR_RETURN(Value b, eval(*e.args[1 + k]));
          if (b.kind != Value::kInt) return error(e.at, "slice bounds must be integers");
          bounds[k] = std::clamp<int64_t>(b.i < 0 ? b.i + n : b.i, 0, n);
        }
        const int64_t lo = bounds[0], hi = std::max(bounds[0], bounds[1]);
        if (a.kind == Value::kString) return Value::string(a.s.substr(lo, hi - lo));
        Value out = Value::new_list();
        out.list->assign(a.list->begin() + lo, a.list->begin() + hi);
        return out;
      }
      case Expr::kCall:
        return call(e);
      case Expr::kFilter:
        return filter(e);
      case Expr::kTest:
        return test(e);
      case Expr::kUnary: {
        QBC_ASSIGN_OR_RETURN(Value a, eval(*e.args[0]));
        if (e.name == "not") return Value::boolean(!truthy(a));
        if (a.kind != Value::kInt) return error(e.at, "unary - needs an integer");
        if (a.i == INT64_MIN) return error(e.at, "integer overflow");
        return Value::integer(-a.i);
      }
      case Expr::kBinary:
        return binary(e);
      case Expr::kTernary: {
        QBC_ASSIGN_OR_RETURN(Value c, eval(*e.args[1]));
        if (truthy(c)) return eval(*e.args[0]);
        if (!e.args[2]) return Value();
        return eval(*e.args[2]);
      }
      case Expr::kList: {
        Value out = Value::new_list();
        for (const ExprPtr& a : e.args) {
          QBC_ASSIGN_OR_RETURN(Value v, eval(*a));
          out.list->push_back(std::move(v));
        }
        return out;
      }
      case Expr::kMap: {
        Value out = Value::new_map();
        for (size_t k = 0; k + 1 < e.args.size(); k += 2) {
          QBC_ASSIGN_OR_RETURN(Value key, eval(*e.args[k]));
          if (key.kind != Value::kString)
            return error(e.args[k]->at, "mapping keys must be strings");
          QBC_ASSIGN_OR_RETURN(Value v, eval(*e.args[k + 1]));
          out.set(key.s, std::move(v));
        }
        return out;
      }
    }
    return Value();
  }

  StatusOr<Value> binary(const Expr& e) {
    QBC_ASSIGN_OR_RETURN(Value a, eval(*e.args[0]));
    const std::string& op = e.name;
    if (op == "and") {
      if (!truthy(a)) return a;
      return eval(*e.args[1]);
    }
    if (op == "or") {
      if (truthy(a)) return a;
      return eval(*e.args[1]);
    }
    QBC_ASSIGN_OR_RETURN(Value b, eval(*e.args[1]));
    if (op == "==") return Value::boolean(equal(a, b));
    if (op == "!=") return Value::boolean(!equal(a, b));
    if (op == "~") {
      QBC_ASSIGN_OR_RETURN(std::string ta, text(a, e.at));
      QBC_ASSIGN_OR_RETURN(std::string tb, text(b, e.at));
      return Value::string(ta + tb);
    }
    if (op == "in" || op == "not in") {
      bool found = false;
      if (b.kind == Value::kString && a.kind == Value::kString) {
        found = b.s.find(a.s) != std::string::npos;
      } else if (b.kind == Value::kList) {
        for (const Value& v : *b.list) found = found || equal(a, v);
      } else if (b.kind == Value::kMap && a.kind == Value::kString) {
        found = b.find(a.s) != nullptr;
      } else if (b.kind != Value::kUndefined) {
        return error(e.at, "'in' needs a string, list or mapping on its right");
      }
      return Value::boolean(op == "in" ? found : !found);
    }
    if (op == "+" && a.kind == Value::kString && b.kind == Value::kString)
      return Value::string(a.s + b.s);
    if (op == "+" && a.kind == Value::kList && b.kind == Value::kList) {
      Value out = Value::new_list();
      *out.list = *a.list;
      out.list->insert(out.list->end(), b.list->begin(), b.list->end());
      return out;
    }
    if (op == "<" || op == ">" || op == "<=" || op == ">=") {
      int c = 0;
      if (a.kind == Value::kInt && b.kind == Value::kInt)
        c = a.i < b.i ? -1 : a.i > b.i ? 1 : 0;
      else if (a.kind == Value::kString && b.kind == Value::kString)
        c = a.s.compare(b.s) < 0 ? -1 : a.s.compare(b.s) > 0 ? 1 : 0;
      else
        return error(e.at, "'" + op + "' compares two integers or two strings");
      return Value::boolean(op == "<" ? c < 0 : op == ">" ? c > 0 : op == "<=" ? c <= 0 : c >= 0);
    }
    if (a.kind != Value::kInt || b.kind != Value::kInt)
      return error(e.at, "'" + op + "' needs two integers (or two strings for +)");
    int64_t r = 0;
    if (op == "+" || op == "-" || op == "*") {
      const bool overflow = op == "+"   ? __builtin_add_overflow(a.i, b.i, &r)
                            : op == "-" ? __builtin_sub_overflow(a.i, b.i, &r)
                                        : __builtin_mul_overflow(a.i, b.i, &r);
      if (overflow) return error(e.at, "integer overflow");
      return Value::integer(r);
    }
    if (op == "/") return error(e.at, "'/' gives a float, which is not supported (use //)");
    if (b.i == 0) return error(e.at, "division by zero");
    if (b.i == -1)
      return op == "//" ? (a.i == INT64_MIN ? error(e.at, "integer overflow")
                                            : StatusOr<Value>(Value::integer(-a.i)))
                        : StatusOr<Value>(Value::integer(0));
    // Python's floor division and modulo (Jinja's // and %): the sign of the divisor.
    int64_t q = a.i / b.i, m = a.i % b.i;
    if (m != 0 && ((m < 0) != (b.i < 0))) {
      --q;
      m += b.i;
    }
    return Value::integer(op == "//" ? q : m);
  }

  StatusOr<std::vector<Value>> args(const Expr& e, size_t from) {
    std::vector<Value> out;
    for (size_t k = from; k < e.args.size(); ++k) {
      QBC_ASSIGN_OR_RETURN(Value v, eval(*e.args[k]));
      out.push_back(std::move(v));
    }
    return out;
  }

  StatusOr<Value> call(const Expr& e) {
    const Expr& callee = *e.args[0];
    QBC_ASSIGN_OR_RETURN(std::vector<Value> a, args(e, 1));
    if (callee.kind == Expr::kName && callee.name == "namespace") {
      Value ns = Value::new_map();
      ns.ns = true;
      for (size_t k = 0; k < a.size(); ++k) ns.set(e.keywords[k], std::move(a[k]));
      return ns;
    }
    if (callee.kind == Expr::kName) {  // raise_exception
      std::string message;
      if (!a.empty()) {
        QBC_ASSIGN_OR_RETURN(message, text(a[0], e.at));
      }
      return error(e.at, "raise_exception: " + message);
    }
    QBC_ASSIGN_OR_RETURN(Value self, eval(*callee.args[0]));
    const std::string& m = callee.name;
    auto str_arg = [&](size_t k) -> StatusOr<std::string> {
      if (k >= a.size() || a[k].kind != Value::kString)
        return error(e.at, "." + m + "() needs a string argument " + std::to_string(k + 1));
      return a[k].s;
    };
    if (self.kind == Value::kMap && m == "items" && a.empty()) {
      Value out = Value::new_list();
      for (const auto& [k, v] : *self.map) {
        Value pair = Value::new_list();
        pair.list->push_back(Value::string(k));
        pair.list->push_back(v);
        out.list->push_back(std::move(pair));
      }
      return out;
    }
    if (self.kind == Value::kMap && m == "get" && !a.empty() && a[0].kind == Value::kString) {
      const Value* v = self.find(a[0].s);
      return v != nullptr ? *v : (a.size() > 1 ? a[1] : Value::none());
    }
    if (self.kind != Value::kString)
      return error(e.at, "method ." + m +
                             "() is supported on strings only (and items/get on "
                             "mappings)");
    const std::string& s = self.s;
    auto strip = [&](bool left, bool right) {
      const char* ws = " \t\r\n";
      size_t b = left ? s.find_first_not_of(ws) : 0;
      if (b == std::string::npos) return std::string();
      size_t end = right ? s.find_last_not_of(ws) + 1 : s.size();
      return s.substr(b, end - b);
    };
    if (m == "strip") return Value::string(strip(true, true));
    if (m == "lstrip") return Value::string(strip(true, false));
    if (m == "rstrip") return Value::string(strip(false, true));
    if (m == "upper" || m == "lower") {
      std::string out = s;
      for (char& c : out)
        c = static_cast<char>(m == "upper" ? std::toupper(static_cast<unsigned char>(c))
                                           : std::tolower(static_cast<unsigned char>(c)));
      return Value::string(out);
    }
    if (m == "startswith" || m == "endswith") {
      QBC_ASSIGN_OR_RETURN(std::string p, str_arg(0));
      const bool hit = p.size() <= s.size() &&
                       (m == "startswith" ? s.compare(0, p.size(), p) == 0
                                          : s.compare(s.size() - p.size(), p.size(), p) == 0);
      return Value::boolean(hit);
    }
    if (m == "split") {
      QBC_ASSIGN_OR_RETURN(std::string sep, str_arg(0));
      if (sep.empty()) return error(e.at, ".split(): empty separator");
      Value out = Value::new_list();
      size_t from = 0;
      for (size_t hit; (hit = s.find(sep, from)) != std::string::npos; from = hit + sep.size())
        out.list->push_back(Value::string(s.substr(from, hit - from)));
      out.list->push_back(Value::string(s.substr(from)));
      return out;
    }
    if (m == "replace") {
      QBC_ASSIGN_OR_RETURN(std::string from, str_arg(0));
      QBC_ASSIGN_OR_RETURN(std::string to, str_arg(1));
      if (from.empty()) return error(e.at, ".replace(): empty pattern");
      std::string out;
      size_t at = 0;
      for (size_t hit; (hit = s.find(from, at)) != std::string::npos; at = hit + from.size())
        out += s.substr(at, hit - at) + to;
      return Value::string(out + s.substr(at));
    }
    return error(e.at, "method ." + m + "() is not supported");
  }

  StatusOr<Value> filter(const Expr& e) {
    QBC_ASSIGN_OR_RETURN(Value a, eval(*e.args[0]));
    QBC_ASSIGN_OR_RETURN(std::vector<Value> extra, args(e, 1));
    const std::string& f = e.name;
    if (f == "trim") {
      QBC_ASSIGN_OR_RETURN(const std::string s, text(a, e.at));
      const size_t b = s.find_first_not_of(" \t\r\n");
      if (b == std::string::npos) return Value::string("");
      return Value::string(s.substr(b, s.find_last_not_of(" \t\r\n") + 1 - b));
    }
    if (f == "length" || f == "count") {
      if (a.kind == Value::kString) return Value::integer(static_cast<int64_t>(a.s.size()));
      if (a.kind == Value::kList) return Value::integer(static_cast<int64_t>(a.list->size()));
      if (a.kind == Value::kMap) return Value::integer(static_cast<int64_t>(a.map->size()));
      return error(e.at, "|" + f + " needs a string, list or mapping");
    }
    if (f == "upper" || f == "lower") {
      QBC_ASSIGN_OR_RETURN(std::string s, text(a, e.at));
      for (char& c : s)
        c = static_cast<char>(f == "upper" ? std::toupper(static_cast<unsigned char>(c))
                                           : std::tolower(static_cast<unsigned char>(c)));
      return Value::string(s);
    }
    if (f == "capitalize") {  // Jinja: the first character upper case, the rest lower (ASCII)
      QBC_ASSIGN_OR_RETURN(std::string s, text(a, e.at));
      for (size_t i = 0; i < s.size(); ++i) {
        const auto c = static_cast<unsigned char>(s[i]);
        s[i] = static_cast<char>(i == 0 ? std::toupper(c) : std::tolower(c));
      }
      return Value::string(std::move(s));
    }
    if (f == "string") {
      QBC_ASSIGN_OR_RETURN(std::string s, text(a, e.at));
      return Value::string(std::move(s));
    }
    if (f == "selectattr") return selectattr(e, a, extra);
    if (f == "default") {
      if (a.kind != Value::kUndefined) return a;
      return extra.empty() ? Value::string("") : extra[0];
    }
    QBC_ASSIGN_OR_RETURN(std::string j, json(a, e.at));  // tojson
    return Value::string(std::move(j));
  }

  // selectattr(name) keeps the mappings whose `name` is truthy; selectattr(name, test, value)
  // those whose `name` passes the test: equalto (eq, ==) or ne (!=) against `value`.
  StatusOr<Value> selectattr(const Expr& e, const Value& items, const std::vector<Value>& a) {
    if (items.kind == Value::kUndefined || items.kind == Value::kNone) return Value::new_list();
    // Jinja iterates a string's characters and a mapping's keys (strings, without attributes:
    // LLaVA's template given a string content selects no image and no text).
    Value seq = items;
    if (items.kind == Value::kString || items.kind == Value::kMap) {
      if (items.kind == Value::kString && items.s.size() > static_cast<size_t>(kMaxSteps))
        return error(e.at,
                     "|selectattr over a string of " + std::to_string(items.s.size()) + " bytes");
      seq = Value::new_list();
      if (items.kind == Value::kMap) {
        for (const auto& [k, v] : *items.map) seq.list->push_back(Value::string(k));
      } else {
        for (size_t i = 0; i < items.s.size();) {
          size_t n = 1;  // one UTF-8 character
          while (i + n < items.s.size() &&
                 (static_cast<unsigned char>(items.s[i + n]) & 0xC0) == 0x80)
            ++n;
          seq.list->push_back(Value::string(items.s.substr(i, n)));
          i += n;
        }
      }
    }
    if (seq.kind != Value::kList) return error(e.at, "|selectattr needs a list");
    if (a.empty() || a[0].kind != Value::kString || a.size() == 2 || a.size() > 3 ||
        (a.size() == 3 && a[1].kind != Value::kString))
      return error(e.at, "|selectattr takes (attribute) or (attribute, test, value)");
    std::string test;
    if (a.size() == 3) {
      test = a[1].s;
      if (test == "eq" || test == "==") test = "equalto";
      if (test == "!=") test = "ne";
      if (test != "equalto" && test != "ne")
        return error(e.at, "|selectattr test '" + a[1].s + "' is not supported (equalto, ne)");
    }
    Value out = Value::new_list();
    for (const Value& item : *seq.list) {
      QBC_RETURN_IF_ERROR(step(e.at));
      const Value* v = item.find(a[0].s);
      const Value got = v != nullptr ? *v : Value();
      const bool keep = test.empty()        ? truthy(got)
                        : test == "equalto" ? equal(got, a[2])
                                            : !equal(got, a[2]);
      if (keep) out.list->push_back(item);
    }
    return out;
  }

  StatusOr<Value> test(const Expr& e) {
    QBC_ASSIGN_OR_RETURN(Value a, eval(*e.args[0]));
    std::string t = e.name;
    const bool negate = t.rfind("not ", 0) == 0;
    if (negate) t = t.substr(4);
    bool r;
    if (t == "defined")
      r = a.kind != Value::kUndefined;
    else if (t == "undefined")
      r = a.kind == Value::kUndefined;
    else if (t == "none")
      r = a.kind == Value::kNone;
    else if (t == "string")
      r = a.kind == Value::kString;
    else if (t == "number")
      r = a.kind == Value::kInt;
    else if (t == "mapping")
      r = a.kind == Value::kMap;
    else if (t == "iterable" || t == "sequence")
      r = a.kind == Value::kList || a.kind == Value::kString || a.kind == Value::kMap;
    else
      return error(e.at, "test " + quote_prefix(t) + " is not supported");
    return Value::boolean(negate ? !r : r);
  }

  Status run(const Body& body, std::string& out) {
    for (const std::unique_ptr<Node>& n : body) {
      QBC_RETURN_IF_ERROR(step(n->at));
      if (out.size() > kMaxOutput)
        return error(n->at,
                     "the rendered text exceeds " + std::to_string(kMaxOutput >> 20) + " MiB");
      switch (n->kind) {
        case Node::kText:
          out += n->text;
          break;
        case Node::kOutput: {
          QBC_ASSIGN_OR_RETURN(Value v, eval(*n->expr));
          QBC_ASSIGN_OR_RETURN(std::string t, text(v, n->at));
          out += t;
          break;
        }
        case Node::kSet: {
          QBC_ASSIGN_OR_RETURN(Value v, eval(*n->expr));
          if (n->names.size() == 2) {  // a namespace's attribute
            Value ns = lookup(n->names[0]);
            if (ns.kind != Value::kMap || !ns.ns)
              return error(n->at, "{% set " + n->names[0] + "." + n->names[1] + " %}: '" +
                                      n->names[0] + "' is not a namespace()");
            QBC_ASSIGN_OR_RETURN(const bool cycle, holds(v, ns.map.get(), n->at));
            if (cycle)
              return error(n->at, "{% set " + n->names[0] + "." + n->names[1] +
                                      " %}: a namespace cannot hold itself");
            ns.set(n->names[1], std::move(v));
            break;
          }
          scopes.back()[n->names[0]] = std::move(v);
          break;
        }
        case Node::kIf: {
          size_t branch = 0;
          for (; branch < n->conditions.size(); ++branch) {
            QBC_ASSIGN_OR_RETURN(Value c, eval(*n->conditions[branch]));
            if (truthy(c)) break;
          }
          if (branch < n->bodies.size()) QBC_RETURN_IF_ERROR(run(n->bodies[branch], out));
          break;
        }
        case Node::kFor: {
          QBC_ASSIGN_OR_RETURN(Value it, eval(*n->expr));
          std::vector<Value> items;
          if (it.kind == Value::kList) {
            items = *it.list;
          } else if (it.kind == Value::kMap) {
            for (const auto& [k, v] : *it.map) items.push_back(Value::string(k));
          } else if (it.kind != Value::kUndefined && it.kind != Value::kNone) {
            return error(n->at, "{% for %} needs a list or a mapping");
          }
          if (items.empty()) {
            if (n->bodies.size() > 1) QBC_RETURN_IF_ERROR(run(n->bodies[1], out));
            break;
          }
          const auto len = static_cast<int64_t>(items.size());
          for (int64_t k = 0; k < len; ++k) {
            scopes.emplace_back();
            Value loop = Value::new_map();
            loop.set("index", Value::integer(k + 1));
            loop.set("index0", Value::integer(k));
            loop.set("revindex", Value::integer(len - k));
            loop.set("revindex0", Value::integer(len - k - 1));
            loop.set("first", Value::boolean(k == 0));
            loop.set("last", Value::boolean(k + 1 == len));
            loop.set("length", Value::integer(len));
            scopes.back()["loop"] = loop;
            if (n->names.size() == 1) {
              scopes.back()[n->names[0]] = items[k];
            } else {
              if (items[k].kind != Value::kList || items[k].list->size() != n->names.size())
                return error(n->at, "cannot unpack a loop item into " +
                                        std::to_string(n->names.size()) + " names");
              for (size_t v = 0; v < n->names.size(); ++v)
                scopes.back()[n->names[v]] = (*items[k].list)[v];
            }
            const Status s = run(n->bodies[0], out);
            scopes.pop_back();
            QBC_RETURN_IF_ERROR(s);
          }
          break;
        }
      }
    }
    return ok_status();
  }

 private:
  std::string_view text_;
  std::string source_;
};

}  // namespace

Status render_template(const Body& body, std::string_view text, const std::string& source,
                       const ChatContext& context, std::string& out) {
  Renderer r(text, source);
  r.scopes.emplace_back();
  Value messages = Value::new_list();
  for (const ChatMessage& m : context.messages) {
    Value v = Value::new_map();
    v.set("role", Value::string(m.role));
    if (m.parts.empty()) {
      v.set("content", Value::string(m.content));
    } else {  // HF's content list: {"type": "image"} and {"type": "text", "text": ...}
      Value parts = Value::new_list();
      for (const ChatPart& p : m.parts) {
        Value item = Value::new_map();
        item.set("type", Value::string(p.type));
        if (p.type == "text") item.set("text", Value::string(p.text));
        parts.list->push_back(std::move(item));
      }
      v.set("content", parts);
    }
    messages.list->push_back(std::move(v));
  }
  r.scopes.back()["messages"] = messages;
  r.scopes.back()["add_generation_prompt"] = Value::boolean(context.add_generation_prompt);
  r.scopes.back()["bos_token"] = Value::string(context.bos_token);
  r.scopes.back()["eos_token"] = Value::string(context.eos_token);
  return r.run(body, out);
}

}  // namespace qbc::tokenizer::chat
