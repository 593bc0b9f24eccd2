// The runtime domain and its samples (see domain.h).
#include "qbc/isa/domain.h"

#include <algorithm>

#include "op_fields.h"

namespace qbc::isa {
namespace {

bool floor_div(int64_t a, int64_t b, int64_t* q) {
  if (b <= 0) return false;
  *q = a / b;
  if (a % b != 0 && a < 0) --*q;
  return true;
}

/// For each `mod` node of `e`: the loop variables its numerator reads (a bit mask) and the
/// divisor (0 when not constant).
void mod_uses(const Expr& e, std::vector<std::pair<uint64_t, int64_t>>* out) {
  const std::vector<Expr::Node>& nodes = e.nodes();
  std::vector<uint64_t> mask(nodes.size(), 0);
  for (size_t i = 0; i < nodes.size(); ++i) {
    const Expr::Node& n = nodes[i];
    if (n.op == Expr::Op::kLoop && n.value >= 0 && n.value < kMaxLoopVars) {
      mask[i] = uint64_t{1} << n.value;
    }
    if (n.a >= 0 && static_cast<size_t>(n.a) < i) mask[i] |= mask[static_cast<size_t>(n.a)];
    if (n.b >= 0 && static_cast<size_t>(n.b) < i) mask[i] |= mask[static_cast<size_t>(n.b)];
    if (n.op == Expr::Op::kMod && n.a >= 0 && static_cast<size_t>(n.a) < i && n.b >= 0 &&
        static_cast<size_t>(n.b) < i) {
      const Expr::Node& d = nodes[static_cast<size_t>(n.b)];
      out->push_back({mask[static_cast<size_t>(n.a)], d.op == Expr::Op::kConst ? d.value : 0});
    }
  }
}

}  // namespace

bool eval_checked(const Expr& e, const Env& env, int64_t* out) {
  const std::vector<Expr::Node>& nodes = e.nodes();
  if (nodes.empty()) return false;
  if (nodes.size() == 1 && nodes[0].op == Expr::Op::kConst) {
    *out = nodes[0].value;
    return true;
  }
  int64_t small[32];
  std::vector<int64_t> big;
  int64_t* v = small;
  if (nodes.size() > 32) {
    big.resize(nodes.size());
    v = big.data();
  }
  for (size_t i = 0; i < nodes.size(); ++i) {
    const Expr::Node& n = nodes[i];
    const bool binary =
        n.op != Expr::Op::kConst && n.op != Expr::Op::kSym && n.op != Expr::Op::kLoop;
    if (binary &&
        (n.a < 0 || n.b < 0 || static_cast<size_t>(n.a) >= i || static_cast<size_t>(n.b) >= i)) {
      return false;
    }
    const int64_t a = binary ? v[static_cast<size_t>(n.a)] : 0;
    const int64_t b = binary ? v[static_cast<size_t>(n.b)] : 0;
    int64_t q = 0;
    switch (n.op) {
      case Expr::Op::kConst:
        v[i] = n.value;
        break;
      case Expr::Op::kSym:
        if (n.value < 0 || n.value >= kNumSyms) return false;
        v[i] = env.sym[n.value];
        break;
      case Expr::Op::kLoop:
        if (n.value < 0 || static_cast<size_t>(n.value) >= env.loop.size()) return false;
        v[i] = env.loop[static_cast<size_t>(n.value)];
        break;
      case Expr::Op::kAdd:
        if (__builtin_add_overflow(a, b, &v[i])) return false;
        break;
      case Expr::Op::kSub:
        if (__builtin_sub_overflow(a, b, &v[i])) return false;
        break;
      case Expr::Op::kMul:
        if (__builtin_mul_overflow(a, b, &v[i])) return false;
        break;
      case Expr::Op::kFloorDiv:
        if (!floor_div(a, b, &v[i])) return false;
        break;
      case Expr::Op::kCeilDiv:
        if (a == INT64_MIN || !floor_div(-a, b, &q)) return false;
        v[i] = -q;
        break;
      case Expr::Op::kMod:
        if (!floor_div(a, b, &q)) return false;
        v[i] = a - b * q;
        break;
      case Expr::Op::kMin:
        v[i] = std::min(a, b);
        break;
      case Expr::Op::kMax:
        v[i] = std::max(a, b);
        break;
    }
  }
  *out = v[nodes.size() - 1];
  return true;
}

std::vector<SymPoint> sym_vertices(int64_t max_cache, int64_t max_seq, int64_t instances,
                                   bool all_slots) {
  std::vector<SymPoint> out;
  if (max_cache < 1 || max_seq < 1 || instances < 1) return out;
  const int64_t s = std::min(max_seq, max_cache);
  const int64_t starts_seqs[4][2] = {{0, 1}, {0, s}, {max_cache - 1, 1}, {max_cache - s, s}};
  std::vector<int64_t> slots = {instances - 1};
  if (all_slots && instances > 1) slots.insert(slots.begin(), 0);
  for (int64_t slot : slots) {
    for (const auto& ss : starts_seqs) {
      SymPoint p{ss[0], ss[1], slot};
      const bool seen = std::any_of(out.begin(), out.end(), [&](const SymPoint& o) {
        return o.start == p.start && o.seq == p.seq && o.slot == p.slot;
      });
      if (!seen) out.push_back(p);
    }
  }
  return out;
}

void set_syms(Env& env, const SymPoint& p) {
  env.sym[static_cast<int>(Sym::kStart)] = p.start;
  env.sym[static_cast<int>(Sym::kSeq)] = p.seq;
  env.sym[static_cast<int>(Sym::kSlot)] = p.slot;
  if (env.loop.size() < static_cast<size_t>(kMaxLoopVars)) env.loop.resize(kMaxLoopVars, 0);
}

std::string build_shape(const std::vector<Instr>& code, StreamShape* shape) {
  const size_t n = code.size();
  shape->parent.assign(n, -1);
  shape->depth.assign(n, 0);
  shape->window.assign(n, 0);
  std::vector<int32_t> open;  // loop instructions whose body contains the current one
  for (size_t i = 0; i < n; ++i) {
    while (!open.empty()) {
      const int32_t l = open.back();
      if (static_cast<size_t>(l) + static_cast<size_t>(std::get<Loop>(code[l].op).body) >= i) break;
      open.pop_back();
    }
    shape->parent[i] = open.empty() ? -1 : open.back();
    shape->depth[i] = static_cast<int32_t>(open.size());
    const Loop* loop = std::get_if<Loop>(&code[i].op);
    if (!loop) continue;
    const std::string at = "loop #" + std::to_string(i);
    if (loop->var < 0 || loop->var >= kMaxLoopVars) {
      return at + " has variable i" + std::to_string(loop->var) + " outside [0, " +
             std::to_string(kMaxLoopVars) + ")";
    }
    if (loop->body < 0 || static_cast<int64_t>(i) + loop->body >= static_cast<int64_t>(n)) {
      return at + " has a body of " + std::to_string(loop->body) +
             " instructions, which leaves the stream of " + std::to_string(n);
    }
    for (int32_t o : open) {
      const Loop& outer = std::get<Loop>(code[static_cast<size_t>(o)].op);
      if (outer.var == loop->var) {
        return at + " reuses the variable i" + std::to_string(loop->var) +
               " of its enclosing loop #" + std::to_string(o);
      }
    }
    if (!open.empty()) {
      const int32_t o = open.back();
      const int64_t outer_end = o + std::get<Loop>(code[static_cast<size_t>(o)].op).body;
      if (static_cast<int64_t>(i) + loop->body > outer_end) {
        return at + " ends at #" + std::to_string(i + static_cast<size_t>(loop->body)) +
               ", after the end #" + std::to_string(outer_end) + " of its enclosing loop #" +
               std::to_string(o);
      }
    }
    open.push_back(static_cast<int32_t>(i));
  }
  // Sample windows: a loop variable under `mod m` is sampled over a whole period.
  for (size_t i = 0; i < n; ++i) {
    if (std::holds_alternative<Loop>(code[i].op)) {
      shape->window[i] = std::max<int64_t>(shape->window[i], 2);
    }
    std::vector<std::pair<uint64_t, int64_t>> mods;
    for (const RefField& r : op_refs(code[i].op)) mod_uses(r.ref->offset, &mods);
    for (const ExprField& e : op_exprs(code[i].op)) mod_uses(*e.expr, &mods);
    if (mods.empty()) continue;
    for (int32_t l = shape->parent[i]; l >= 0; l = shape->parent[static_cast<size_t>(l)]) {
      const int var = std::get<Loop>(code[static_cast<size_t>(l)].op).var;
      for (const auto& [mask, divisor] : mods) {
        if (!(mask & (uint64_t{1} << var))) continue;
        const int64_t m = divisor <= 0 || divisor > kMaxModWindow ? kMaxModWindow : divisor;
        shape->window[static_cast<size_t>(l)] =
            std::max(shape->window[static_cast<size_t>(l)], m + 1);
      }
    }
  }
  return "";
}

uint64_t used_vars(const std::vector<Instr>& code, const StreamShape& shape, int32_t i) {
  uint64_t mask = 0;
  const auto add = [&](const Expr& e) {
    for (int var : e.loops()) {
      if (var >= 0 && var < kMaxLoopVars) mask |= uint64_t{1} << var;
    }
  };
  const Instr& in = code[static_cast<size_t>(i)];
  for (const RefField& r : op_refs(in.op)) add(r.ref->offset);
  for (const ExprField& e : op_exprs(in.op)) add(*e.expr);
  for (int32_t l = shape.parent[static_cast<size_t>(i)]; l >= 0;
       l = shape.parent[static_cast<size_t>(l)]) {
    add(std::get<Loop>(code[static_cast<size_t>(l)].op).trip);
  }
  return mask;
}

std::vector<int32_t> enclosing_loops(const StreamShape& shape, int32_t i) {
  std::vector<int32_t> chain;
  for (int32_t l = shape.parent[static_cast<size_t>(i)]; l >= 0;
       l = shape.parent[static_cast<size_t>(l)]) {
    chain.push_back(l);
  }
  std::reverse(chain.begin(), chain.end());
  return chain;
}

std::vector<int64_t> loop_samples(int64_t trip, int64_t window) {
  std::vector<int64_t> out;
  if (trip <= 0) return out;
  const int64_t w = std::max<int64_t>(window, 1);
  for (int64_t v = 0; v < std::min(w, trip); ++v) out.push_back(v);
  for (int64_t v = std::max(w, trip - w); v < trip; ++v) out.push_back(v);
  return out;
}

std::string env_text(const Env& env, const std::vector<Instr>& code,
                     const std::vector<int32_t>& chain) {
  std::string s = "start=" + std::to_string(env.sym[0]) + " seq=" + std::to_string(env.sym[1]) +
                  " slot=" + std::to_string(env.sym[2]);
  for (int32_t l : chain) {
    const int var = std::get<Loop>(code[static_cast<size_t>(l)].op).var;
    s += " i" + std::to_string(var) + "=" + std::to_string(env.loop[static_cast<size_t>(var)]);
  }
  return s;
}

}  // namespace qbc::isa
