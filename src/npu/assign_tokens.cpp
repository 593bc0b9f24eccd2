// assign_tokens (see qbc/npu/assign_tokens.h and docs/npu.md "Tokens").
//
// A stream is a tree of regions: the top level and each loop body, whose elements are plain
// instructions and sub-loops. Regions are processed bottom-up:
//
// 1. Same-iteration order (every region). Elements in order; for element B and each other
//    queue X, the latest earlier element A with X activity that conflicts with B's activity
//    on its queue Y must be ordered before B. Each queue keeps a vector clock over the
//    region's elements (what it knows to have completed); when A is not yet known, a token
//    pair is added: signal at the first X instruction at or after A, wait at the last Y
//    instruction at or before B (carriers are inserted when none exists). Pairs on one
//    channel stay in the same order on both queues (counted semaphores match in order) and
//    never straddle a sub-loop that uses the channel (its first wait would take the token).
// 2. Iteration to iteration (loop bodies). A two-iteration simulation of the clocks tells
//    which conflicts between iteration k and a later one are already ordered (through
//    program order and the same-iteration pairs). For a channel X->Y with an unordered one,
//    the body's last X instruction signals and its first Y instruction waits, every
//    iteration; d carriers before the loop prime it and d carriers after it drain it, d the
//    smallest distance in iterations at which a conflict exists (1 unless the channel has no
//    other use in the body). The drain carriers tell the parent region that X's share of the
//    loop completed.
// 3. The tree is flattened back into the stream, with carriers where they were inserted.
//
// Conflicts between two plain instructions of a region are tested exactly at every sample
// point (domain.h), at the same loop values (same iteration) or d iterations apart; where a
#include "qbc/npu/assign_tokens.h"

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "backend.h"
#include "passes.h"
#include "qbc/isa/verify.h"
#include "token_streams.h"

namespace qbc::npu {
namespace tokens {

using isa::Instr;
using isa::Loop;

/// `code` without the carriers an earlier run inserted (node -1, pass `pass`), loop bodies
/// shortened to match, so that running the pass again gives the same program.
std::vector<Instr> strip_carriers(const std::vector<Instr>& code, int32_t pass) {
  std::vector<Instr> out;
  std::vector<std::pair<size_t, size_t>> open;  // (index in out, last original body index)
  for (size_t i = 0; i < code.size(); ++i) {
    while (!open.empty() && i > open.back().second) {
      std::get<Loop>(out[open.back().first].op).body =
          static_cast<int32_t>(out.size() - open.back().first - 1);
      open.pop_back();
    }
    const Instr& in = code[i];
    if (in.pass == pass && in.node < 0 && !std::holds_alternative<Loop>(in.op)) continue;
    out.push_back(in);
    if (const Loop* l = std::get_if<Loop>(&in.op)) {
      open.push_back({out.size() - 1, i + static_cast<size_t>(std::max(l->body, 0))});
    }
  }
  while (!open.empty()) {
    std::get<Loop>(out[open.back().first].op).body =
        static_cast<int32_t>(out.size() - open.back().first - 1);
    open.pop_back();
  }
  return out;
}

}  // namespace tokens

using isa::Bundle;
using isa::CoreProgram;
using isa::Instr;
using isa::Mode;
using isa::Program;
using isa::StreamShape;

Status assign_tokens(Bundle& b, Program& p, int instances) {
  QBC_RETURN_IF_ERROR(isa::verify_tables(b));
  {
    // The structure is checked as given, so that errors name the caller's indices.
    std::vector<StreamShape> shapes;
    QBC_RETURN_IF_ERROR(isa::verify_structure(b, p, instances, &shapes));
  }
  const auto it = std::find(b.passes.begin(), b.passes.end(), "npu-deps");
  const int32_t pass = static_cast<int32_t>(it - b.passes.begin());
  Program stripped = p;
  for (CoreProgram& cp : stripped.cores) cp.code = tokens::strip_carriers(cp.code, pass);
  const tokens::ProgramRef pr{b, stripped, instances};
  std::vector<StreamShape> shapes;
  QBC_RETURN_IF_ERROR(isa::verify_structure(b, stripped, instances, &shapes));
  std::vector<std::vector<Instr>> code(p.cores.size());
  int carriers = 0;
  for (size_t s = 0; s < p.cores.size(); ++s) {
    tokens::StreamDeps deps(b, pr, static_cast<int>(s), shapes[s], pass);
    int n = 0;
    QBC_RETURN_IF_ERROR(deps.run(&code[s], &n));
    carriers += n;
  }
  for (size_t s = 0; s < p.cores.size(); ++s) p.cores[s].code = std::move(code[s]);
  if (carriers > 0 && it == b.passes.end()) b.passes.push_back("npu-deps");
  return ok_status();
}

Status assign_tokens(Bundle& b) {
  for (Mode& m : b.modes) {
    for (Program* p : m.programs()) QBC_RETURN_IF_ERROR(assign_tokens(b, *p, m.instances));
  }
  return ok_status();
}

namespace {

/// The tokens of every instruction of `b`'s programs, in order (and the stream lengths):
/// what assign-tokens may change.
std::vector<int32_t> token_signature(const Bundle& b) {
  std::vector<int32_t> sig;
  for (const Mode& m : b.modes) {
    for (const Program* p : m.programs()) {
      for (const CoreProgram& cp : p->cores) {
        sig.push_back(static_cast<int32_t>(cp.code.size()));
        for (const Instr& in : cp.code) sig.push_back(in.wait << 8 | in.signal);
      }
    }
  }
  return sig;
}

/// assign-tokens: the dependency tokens of every program (see assign_tokens.h).
class AssignTokens final : public pass::Pass<Context> {
 public:
  std::string name() const override { return "assign-tokens"; }
  pass::ResourceSet needs() const override { return Context::kPrograms; }
  pass::ResourceSet provides() const override { return Context::kTokens; }
  StatusOr<bool> run(Context& cx) override {
    const std::vector<int32_t> before = token_signature(cx.b);
    QBC_RETURN_IF_ERROR(assign_tokens(cx.b));
    cx.have |= Context::kTokens;
    return token_signature(cx.b) != before;
  }
};

}  // namespace

PassPtr make_assign_tokens() { return std::make_unique<AssignTokens>(); }

}  // namespace qbc::npu
