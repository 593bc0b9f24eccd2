// Integer expressions of NPU programs (see qbc/isa/expr.h).
#include "qbc/isa/expr.h"

#include <algorithm>
#include <sstream>

#include "qbc/support/check.h"

namespace qbc::isa {
namespace {

int64_t floor_div(int64_t a, int64_t b) {
  QBC_CHECK(b != 0) << "division by zero in an NPU program expression";
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}

}  // namespace

const char* sym_name(Sym s) {
  switch (s) {
    case Sym::kStart:
      return "start";
    case Sym::kSeq:
      return "seq";
    case Sym::kSlot:
      return "slot";
  }
  return "?";
}

Expr::Expr(int64_t c) { nodes_.push_back(Node{Op::kConst, c, -1, -1}); }

Expr Expr::sym(Sym s) {
  Expr e;
  e.nodes_[0] = Node{Op::kSym, static_cast<int64_t>(s), -1, -1};
  return e;
}

Expr Expr::loop(int var) {
  Expr e;
  e.nodes_[0] = Node{Op::kLoop, var, -1, -1};
  return e;
}

bool Expr::from_nodes(std::vector<Node> nodes, Expr* out) {
  if (nodes.empty() || nodes.size() > kMaxNodes) return false;
  for (size_t i = 0; i < nodes.size(); ++i) {
    const Node& n = nodes[i];
    const auto earlier = [&](int32_t k) { return k >= 0 && static_cast<size_t>(k) < i; };
    switch (n.op) {
      case Op::kConst:
        if (n.a != -1 || n.b != -1) return false;  // leaves have no operands
        break;
      case Op::kSym:
        if (n.value < 0 || n.value >= kNumSyms || n.a != -1 || n.b != -1) return false;
        break;
      case Op::kLoop:
        if (n.value < 0 || n.value > (int64_t{1} << 20) || n.a != -1 || n.b != -1) return false;
        break;
      case Op::kAdd:
      case Op::kSub:
      case Op::kMul:
      case Op::kFloorDiv:
      case Op::kCeilDiv:
      case Op::kMod:
      case Op::kMin:
      case Op::kMax:
        if (!earlier(n.a) || !earlier(n.b)) return false;
        break;
      default:
        return false;
    }
  }
  out->nodes_ = std::move(nodes);
  return true;
}

Expr Expr::bin(Op op, const Expr& o) const {
  // Constant folding keeps the common case (static shapes) a single node.
  if (is_const() && o.is_const()) {
    Expr e(constant());
    Expr tmp;
    tmp.nodes_ = {Node{Op::kConst, constant(), -1, -1}, Node{Op::kConst, o.constant(), -1, -1},
                  Node{op, 0, 0, 1}};
    e.nodes_[0].value = tmp.eval(Env{});
    return e;
  }
  if (op == Op::kAdd && o.is_const() && o.constant() == 0) return *this;
  if (op == Op::kAdd && is_const() && constant() == 0) return o;
  if (op == Op::kSub && o.is_const() && o.constant() == 0) return *this;
  if (op == Op::kMul && o.is_const() && o.constant() == 1) return *this;
  if (op == Op::kMul && is_const() && constant() == 1) return o;
  if (op == Op::kMul && ((o.is_const() && o.constant() == 0) || (is_const() && constant() == 0)))
    return Expr(0);
  Expr e;
  e.nodes_ = nodes_;
  const int32_t shift = static_cast<int32_t>(nodes_.size());
  for (Node n : o.nodes_) {
    if (n.a >= 0) n.a += shift;
    if (n.b >= 0) n.b += shift;
    e.nodes_.push_back(n);
  }
  e.nodes_.push_back(Node{op, 0, shift - 1, static_cast<int32_t>(e.nodes_.size()) - 1});
  return e;
}

int64_t Expr::eval(const Env& env) const {
  if (nodes_.size() == 1 && nodes_[0].op == Op::kConst) return nodes_[0].value;
  int64_t small[32];
  std::vector<int64_t> big;
  int64_t* v = small;
  if (nodes_.size() > 32) {
    big.resize(nodes_.size());
    v = big.data();
  }
  for (size_t i = 0; i < nodes_.size(); ++i) {
    const Node& n = nodes_[i];
    const int64_t a = n.a >= 0 ? v[n.a] : 0;
    const int64_t b = n.b >= 0 ? v[n.b] : 0;
    switch (n.op) {
      case Op::kConst:
        v[i] = n.value;
        break;
      case Op::kSym:
        v[i] = env.sym[n.value];
        break;
      case Op::kLoop:
        QBC_CHECK(n.value >= 0 && static_cast<size_t>(n.value) < env.loop.size())
            << "loop variable i" << n.value << " outside its loop";
        v[i] = env.loop[static_cast<size_t>(n.value)];
        break;
      case Op::kAdd:
        v[i] = a + b;
        break;
      case Op::kSub:
        v[i] = a - b;
        break;
      case Op::kMul:
        v[i] = a * b;
        break;
      case Op::kFloorDiv:
        v[i] = floor_div(a, b);
        break;
      case Op::kCeilDiv:
        v[i] = -floor_div(-a, b);
        break;
      case Op::kMod:
        v[i] = a - b * floor_div(a, b);
        break;
      case Op::kMin:
        v[i] = std::min(a, b);
        break;
      case Op::kMax:
        v[i] = std::max(a, b);
        break;
    }
  }
  return v[nodes_.size() - 1];
}

bool Expr::is_const() const { return nodes_.size() == 1 && nodes_[0].op == Op::kConst; }

int64_t Expr::constant() const {
  QBC_CHECK(is_const()) << "expression " << to_string() << " is not constant";
  return nodes_[0].value;
}

bool Expr::uses(Sym s) const {
  for (const Node& n : nodes_) {
    if (n.op == Op::kSym && n.value == static_cast<int64_t>(s)) return true;
  }
  return false;
}

std::vector<int> Expr::loops() const {
  std::vector<int> out;
  for (const Node& n : nodes_) {
    if (n.op == Op::kLoop &&
        std::find(out.begin(), out.end(), static_cast<int>(n.value)) == out.end())
      out.push_back(static_cast<int>(n.value));
  }
  return out;
}

std::string Expr::to_string() const {
  std::vector<std::string> s(nodes_.size());
  std::vector<bool> atomic(nodes_.size(), true);
  auto wrap = [&](int32_t i) {
    return atomic[static_cast<size_t>(i)] ? s[static_cast<size_t>(i)]
                                          : "(" + s[static_cast<size_t>(i)] + ")";
  };
  for (size_t i = 0; i < nodes_.size(); ++i) {
    const Node& n = nodes_[i];
    switch (n.op) {
      case Op::kConst:
        s[i] = std::to_string(n.value);
        break;
      case Op::kSym:
        s[i] = sym_name(static_cast<Sym>(n.value));
        break;
      case Op::kLoop:
        s[i] = "i" + std::to_string(n.value);
        break;
      case Op::kAdd:
        s[i] = s[static_cast<size_t>(n.a)] + " + " + s[static_cast<size_t>(n.b)];
        atomic[i] = false;
        break;
      case Op::kSub:
        s[i] = s[static_cast<size_t>(n.a)] + " - " + wrap(n.b);
        atomic[i] = false;
        break;
      case Op::kMul:
        s[i] = wrap(n.a) + "*" + wrap(n.b);
        break;
      case Op::kFloorDiv:
        s[i] = wrap(n.a) + "/" + wrap(n.b);
        break;
      case Op::kCeilDiv:
        s[i] = "ceil(" + s[static_cast<size_t>(n.a)] + ", " + s[static_cast<size_t>(n.b)] + ")";
        break;
      case Op::kMod:
        s[i] = wrap(n.a) + " mod " + wrap(n.b);
        atomic[i] = false;
        break;
      case Op::kMin:
        s[i] = "min(" + s[static_cast<size_t>(n.a)] + ", " + s[static_cast<size_t>(n.b)] + ")";
        break;
      case Op::kMax:
        s[i] = "max(" + s[static_cast<size_t>(n.a)] + ", " + s[static_cast<size_t>(n.b)] + ")";
        break;
    }
  }
  return s.back();
}

bool Expr::operator==(const Expr& o) const {
  if (nodes_.size() != o.nodes_.size()) return false;
  for (size_t i = 0; i < nodes_.size(); ++i) {
    const Node &x = nodes_[i], &y = o.nodes_[i];
    if (x.op != y.op || x.value != y.value || x.a != y.a || x.b != y.b) return false;
  }
  return true;
}

}  // namespace qbc::isa
