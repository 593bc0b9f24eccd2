// `qbc opt` (see qbc/driver/opt.h).
#include "qbc/driver/opt.h"

#include <cstring>
#include <memory>

#include "qbc/driver/backend.h"
#include "qbc/ir/text.h"
#include "qbc/isa/text.h"
#include "qbc/isa/text_parser.h"
#include "qbc/npu/assign_tokens.h"
#include "qbc/npu/compile.h"
#include "qbc/npu/plan.h"
#include "qbc/quant/pass.h"
#include "qbc/quant/pipeline.h"
#include "qbc/quant/weight_store.h"

namespace qbc::driver {
namespace {

/// The passes that run on program text (the others need the MBLT graph).
bool on_programs(const std::string& pass) { return pass == "assign-tokens"; }

/// Weights the text cannot carry: values in [-1, 1) from a hash of the name and the index,
/// so every run (and every pass reading a weight twice) sees the same ones.
Status synthetic_weight(const ir::Weight& w, std::vector<float>* out) {
  const int64_t n = w.type.num_elements();
  out->resize(static_cast<size_t>(n));
  uint64_t s = 0x9e3779b97f4a7c15ull;
  for (char c : w.name) s = (s ^ static_cast<unsigned char>(c)) * 0x100000001b3ull;
  for (int64_t i = 0; i < n; ++i) {
    uint64_t z = (s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    (*out)[static_cast<size_t>(i)] =
        static_cast<float>(static_cast<double>(z >> 11) * 0x1.0p-52 - 1.0);
  }
  return ok_status();
}

Status check_names(const std::vector<std::string>& passes, TextKind kind) {
  bool backend = false;
  for (const std::string& p : passes) {
    const bool quant = quant::quant_passes().contains(p);
    if (!quant && !npu::is_pass(p)) {
      return unimplemented("unknown pass '", p, "' (qbc opt --list-passes lists them)");
    }
    if (kind == TextKind::kPlan) {
      return unimplemented("pass '", p, "' needs MBLT text; plan text is verified (P1..P9) ",
                           "and printed, with no pass");
    }
    if (kind == TextKind::kProgram && !on_programs(p)) {
      return unimplemented("pass '", p, "' needs MBLT text; on NPU program text only ",
                           "assign-tokens runs");
    }
    if (quant && backend) {
      return invalid_argument("quant pass '", p, "' after a backend pass: the backend's input is ",
                              "the graph the quant passes leave");
    }
    backend |= !quant;
  }
  return ok_status();
}

StatusOr<std::string> run_on_program(const OptRequest& r) {
  QBC_ASSIGN_OR_RETURN(isa::Bundle b, isa::parse_bundle(r.text, r.label));
  if (!r.passes.empty()) {
    QBC_RETURN_IF_ERROR(npu::assign_tokens(b).with_context("pass assign-tokens"));
  }
  return isa::print_bundle(b);
}

/// Plan text: parsed, checked by the plan verifier (P1..P9 of docs/npu.md) and printed.
StatusOr<std::string> run_on_plan(const OptRequest& r) {
  QBC_ASSIGN_OR_RETURN(npu::Plan p, npu::parse_plan(r.text, r.label));
  QBC_RETURN_IF_ERROR(npu::verify_plan(p).with_context(r.label));
  return npu::print_plan(p);
}

StatusOr<std::string> run_on_mblt(const OptRequest& r) {
  QBC_ASSIGN_OR_RETURN(ir::Graph g, ir::parse_text(r.text, r.label));
  std::vector<std::unique_ptr<quant::Pass>> qpasses;
  std::vector<std::string> backend;
  for (const std::string& name : r.passes) {
    if (npu::is_pass(name)) {
      backend.push_back(name);
      continue;
    }
    QBC_ASSIGN_OR_RETURN(auto p, quant::quant_passes().create(name, r.cfg.options));
    qpasses.push_back(std::move(p));
  }
  quant::WeightStore store(synthetic_weight);
  if (!qpasses.empty()) {
    quant::PassContext cx;
    cx.graph = &g;
    cx.weights = &store;
    cx.options = &r.cfg.options;
    QBC_RETURN_IF_ERROR(quant::run_passes(qpasses, cx));
  }
  if (backend.empty()) return ir::print_text(g);
  QBC_ASSIGN_OR_RETURN(npu::Options o, backend_options(g, r.cfg));
  return npu::run_passes_text(backend, g, o, nullptr);
}

}  // namespace

std::vector<OptPass> opt_passes() {
  std::vector<OptPass> out;
  const auto& q = quant::quant_passes();
  for (const std::string& n : q.names()) out.push_back({n, "quant", q.summary(n), "mblt"});
  for (const std::string& n : npu::pass_names()) {
    out.push_back({n, "npu", npu::pass_summary(n), on_programs(n) ? "mblt, program" : "mblt"});
  }
  return out;
}

TextKind detect_kind(const std::string& text) {
  size_t i = 0;
  while (i < text.size() && (text[i] == ' ' || text[i] == '\n')) ++i;
  if (npu::is_plan_text(text)) return TextKind::kPlan;
  return text.compare(i, 7, "bundle ") == 0 ? TextKind::kProgram : TextKind::kMblt;
}

StatusOr<std::string> run_opt(const OptRequest& request) {
  const TextKind kind = request.kind == TextKind::kAuto ? detect_kind(request.text) : request.kind;
  QBC_RETURN_IF_ERROR(check_names(request.passes, kind));
  if (kind == TextKind::kPlan) return run_on_plan(request);
  return kind == TextKind::kProgram ? run_on_program(request) : run_on_mblt(request);
}

}  // namespace qbc::driver
