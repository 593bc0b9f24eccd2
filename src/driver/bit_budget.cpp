// Bits by budget (see qbc/driver/bit_budget.h).
#include "qbc/driver/bit_budget.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>
#include <numeric>
#include <utility>

#include "qbc/driver/imported_weights.h"
#include "qbc/driver/plan.h"
#include "qbc/driver/quantize.h"
#include "qbc/isa/scheme.h"
#include "qbc/npu/memory_plan.h"
#include "qbc/quant/quantize.h"
#include "qbc/quant/weight_store.h"
#include "qbc/support/logging.h"

namespace qbc::driver {
namespace {

using Kind = BitBudgetRequest::Kind;

/// The block projections' bit keys the choice writes, with their setters.
struct ProjectionKey {
  const char* key;
  void (config::ProjectionWeightBits::*set)(int32_t);
};
constexpr ProjectionKey kProjections[] = {
    {"bit.transformer.weight.query", &config::ProjectionWeightBits::set_query},
    {"bit.transformer.weight.key", &config::ProjectionWeightBits::set_key},
    {"bit.transformer.weight.value", &config::ProjectionWeightBits::set_value},
    {"bit.transformer.weight.output", &config::ProjectionWeightBits::set_output},
    {"bit.transformer.weight.ffn", &config::ProjectionWeightBits::set_ffn}};
constexpr const char* kEightKey = "bit.layerOverrides.weight8Bits";

/// `options` with every block projection at `bits` (the head keeps its bits).
config::CompileOptions with_projection_bits(const config::CompileOptions& options, int bits) {
  config::CompileOptions o = options;
  auto* w = o.mutable_bit()->mutable_transformer()->mutable_weight();
  for (const ProjectionKey& p : kProjections) (w->*p.set)(bits);
  return o;
}

/// What one plan predicted.
struct Prediction {
  int64_t weights_bytes = 0;
  double decode_tok_s = 0;
};

std::string tok_s_text(double r) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f", r);
  return buf;
}

}  // namespace

StatusOr<double> parse_size(const std::string& text, const std::string& flag) {
  size_t used = 0;
  double v = 0;
  try {
    v = std::stod(text, &used);
  } catch (...) {
    used = 0;
  }
  if (used == 0)
    return invalid_argument(flag, " '", text,
                            "': not a size (a number of GiB, or with a unit: 900MiB, 1.5GiB, "
                            "2GB, 4096B)");
  std::string unit = text.substr(used);
  unit.erase(std::remove(unit.begin(), unit.end(), ' '), unit.end());
  static const std::map<std::string, double> kUnits = {{"", 1024.0 * 1024 * 1024},
                                                       {"GiB", 1024.0 * 1024 * 1024},
                                                       {"MiB", 1024.0 * 1024},
                                                       {"KiB", 1024.0},
                                                       {"GB", 1e9},
                                                       {"MB", 1e6},
                                                       {"kB", 1e3},
                                                       {"KB", 1e3},
                                                       {"B", 1.0}};
  const auto it = kUnits.find(unit);
  if (it == kUnits.end())
    return invalid_argument(flag, " '", text, "': unknown unit '", unit,
                            "' (GiB, MiB, KiB, GB, MB, kB or B; a bare number is GiB)");
  const double bytes = v * it->second;
  if (!(bytes >= 1) || !std::isfinite(bytes))
    return invalid_argument(flag, " '", text, "': the size must be at least one byte");
  return bytes;
}

StatusOr<int64_t> largest_prefix(int64_t n, const std::function<StatusOr<bool>(int64_t)>& ok) {
  QBC_ASSIGN_OR_RETURN(const bool first, ok(0));
  if (!first) return int64_t{-1};
  if (n <= 0) return int64_t{0};
  QBC_ASSIGN_OR_RETURN(const bool last, ok(n));
  if (last) return n;
  int64_t lo = 0, hi = n;  // ok(lo), !ok(hi)
  while (hi - lo > 1) {
    const int64_t mid = lo + (hi - lo) / 2;
    QBC_ASSIGN_OR_RETURN(const bool m, ok(mid));
    (m ? lo : hi) = mid;
  }
  return lo;
}

std::vector<size_t> sensitivity_order(const std::vector<quant::LinearBitError>& errors) {
  std::vector<size_t> order(errors.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return errors[a].density() > errors[b].density(); });
  return order;
}

namespace {

/// Plans candidate configurations with `qbc plan`'s memory plan and cost model, counting
/// them in the choice; for a decode target it fixes the scheme on its first plan (the
/// fastest with every candidate at 8 bits) and times only that one afterwards.
class BudgetPlanner {
 public:
  BudgetPlanner(const LoadedModel& model, const config::ResolvedConfig& cfg,
                BitBudgetChoice* choice)
      : model_(model), cfg_(cfg), c_(choice) {}

  StatusOr<Prediction> predict(const config::CompileOptions& options) {
    config::ResolvedConfig at = cfg_;
    at.options = options;
    PlanOptions po;
    po.predictions = c_->request.kind == Kind::kDecode;
    po.schemes = schemes_;
    po.hparams = model_.source ? &model_.source->hparams() : nullptr;
    QBC_ASSIGN_OR_RETURN(const PlanResult r, plan(model_.graph, at, po));
    ++c_->plans;
    Prediction p;
    p.weights_bytes = r.memory.dram.weights;
    for (const SchemePlan& s : r.schemes) {
      const double rate = s.prediction.decode_s > 0 ? 1.0 / s.prediction.decode_s : 0.0;
      if (rate > p.decode_tok_s) {
        p.decode_tok_s = rate;
        if (schemes_.empty()) c_->scheme = isa::scheme_name(s.scheme);
      }
    }
    if (c_->request.kind == Kind::kDecode && schemes_.empty()) {
      if (c_->scheme.empty())
        return internal_error(c_->request.flag, ": the plan predicted no decode to compare with");
      for (const SchemePlan& s : r.schemes)
        if (c_->scheme == isa::scheme_name(s.scheme)) schemes_ = {s.scheme};
    }
    return p;
  }

  bool meets(const Prediction& p) const {
    return c_->request.kind == Kind::kSize
               ? static_cast<double>(p.weights_bytes) <= c_->request.target
               : p.decode_tok_s >= c_->request.target;
  }

 private:
  const LoadedModel& model_;
  const config::ResolvedConfig& cfg_;
  BitBudgetChoice* c_;
  std::vector<isa::Scheme> schemes_;  // kDecode: the one timed, once chosen
};

/// The two ends, from the configuration alone: every candidate at 8 bits (`eight`: the
/// configuration as the user gave it, projections at 8) and every candidate at 4 (`base`,
/// with the preset's 4-bit quantizer if it has one; the linears bit.layerOverrides fixes are
/// the same in both), so a target out of reach is refused before any measurement. Returns
/// {all 4, all 8}.
StatusOr<std::pair<Prediction, Prediction>> plan_ends(BudgetPlanner& planner,
                                                      const config::CompileOptions& eight,
                                                      const config::CompileOptions& base,
                                                      BitBudgetChoice& c) {
  // The fastest scheme is chosen with every candidate at 8 bits: plan that end first.
  QBC_ASSIGN_OR_RETURN(const Prediction hi, planner.predict(eight));
  QBC_ASSIGN_OR_RETURN(const Prediction lo, planner.predict(base));
  c.all8_bytes = hi.weights_bytes;
  c.all4_bytes = lo.weights_bytes;
  c.all8_tok_s = hi.decode_tok_s;
  c.all4_tok_s = lo.decode_tok_s;
  if (planner.meets(lo)) return std::make_pair(lo, hi);
  const std::string& flag = c.request.flag;
  if (c.request.kind == Kind::kSize)
    return invalid_argument(
        flag, ": out of reach: with every block linear at 4 bits the DRAM weights are ",
        npu::human_bytes(c.all4_bytes),
        " (the head at bit.transformer.weight.head=", base.bit().transformer().weight().head(),
        " and the linears bit.layerOverrides fixes keep their bits); all at 8 bits: ",
        npu::human_bytes(c.all8_bytes));
  return invalid_argument(
      flag,
      ": out of reach: with every block linear at 4 bits the predicted "
      "decode is ",
      tok_s_text(c.all4_tok_s), " tokens/s on ", c.scheme,
      " (an estimate of the cost model); all at 8 bits: ", tok_s_text(c.all8_tok_s));
}

/// The candidates (block linears the configuration leaves to the projection bits, at 4 in
/// `base`) with their sensitivity, measured on `cfg`'s calibration data.
StatusOr<std::vector<quant::LinearBitError>> measure_candidates(const LoadedModel& model,
                                                                const config::ResolvedConfig& cfg,
                                                                const config::CompileOptions& base,
                                                                const std::string& flag,
                                                                int threads) {
  size_t n = 0;
  quant::DeepStackSource deepstack;
  QBC_ASSIGN_OR_RETURN(const quant::SampleSource samples,
                       calibration_source(model, cfg, &n, &deepstack));
  const LoadedModel* m = &model;
  const quant::WeightStore store(
      [m](const ir::Weight& w, std::vector<float>* out) { return read_weight(*m, w, out); });
  ref::SessionOptions session;
  session.threads = threads;
  StatusOr<std::vector<quant::LinearBitError>> measured = quant::linear_bit_errors(
      model.graph, store, samples, n, base, session, deepstack ? &deepstack : nullptr);
  if (!measured.ok()) return measured.status().with_context(flag);
  std::vector<quant::LinearBitError> errors;
  for (const quant::LinearBitError& e : *measured)
    if (quant::linear_bits(e.node, false, base).weight == 4) errors.push_back(e);
  if (errors.empty())
    return invalid_argument(flag, ": every block linear of ", model.graph.name(),
                            " is fixed at 8 or 16 bits by bit.layerOverrides: nothing to choose");
  return errors;
}

/// `base` with the first k linears of `order` at 8 bits.
config::CompileOptions with_eight(const config::CompileOptions& base,
                                  const std::vector<std::string>& order, int64_t k) {
  config::CompileOptions o = base;
  auto* eight = o.mutable_bit()->mutable_layer_overrides();
  for (int64_t i = 0; i < k; ++i) eight->add_weight8_bits(order[static_cast<size_t>(i)]);
  return o;
}

}  // namespace

StatusOr<BitBudgetChoice> choose_bits(const LoadedModel& model, config::ResolvedConfig* cfg,
                                      const BitBudgetRequest& request, int threads) {
  const auto t0 = std::chrono::steady_clock::now();
  BitBudgetChoice c;
  c.request = request;
  QBC_ASSIGN_OR_RETURN(const std::optional<ImportedWeights> imported,
                       imported_weights(model, cfg->options));
  if (imported && imported->kept() > 0)
    return invalid_argument(request.flag, ": ", model.graph.name(),
                            " is a pre-quantized checkpoint whose ", imported->kept(),
                            " linears keep their codes and bit widths; bits by budget chooses "
                            "the bits of a float checkpoint");
  // Every candidate at 4 bits, with the preset's 4-bit weight quantizer when it has one (the
  // keys a user's own 4-bit setting would get), so the plans and the measurement see the
  // layout the compile will use.
  config::ResolvedConfig four = *cfg;
  four.options = with_projection_bits(cfg->options, 4);
  QBC_ASSIGN_OR_RETURN(const std::vector<std::string> four_bit_keys,
                       config::apply_four_bit_rule(four));
  const config::CompileOptions base = four.options;
  // All at 8 bits is the user's configuration as it is (no 4-bit quantizer).
  const config::CompileOptions eight = with_projection_bits(cfg->options, 8);
  if (base.bit().weight_group_size() == 0)
    log("quantize")
        .warn(
            "{}: the 4-bit linears are quantized per output channel (bit.weightGroupSize 0), the "
            "least accurate 4-bit layout; groups of 32 with zero points (--set "
            "bit.weightGroupSize=32 --set bit.weightZeroPoint=true{}) cost 0.6 bits a weight "
            "and recover most of it (docs/quantization.md)",
            request.flag, cfg->preset == "llm" ? "" : ", or --preset llm");

  BudgetPlanner planner(model, *cfg, &c);
  QBC_ASSIGN_OR_RETURN(const auto ends, plan_ends(planner, eight, base, c));
  QBC_ASSIGN_OR_RETURN(const std::vector<quant::LinearBitError> errors,
                       measure_candidates(model, *cfg, base, request.flag, threads));
  c.candidates = static_cast<int64_t>(errors.size());
  const std::vector<std::string>& order = c.order;  // the candidates, most sensitive first
  for (size_t i : sensitivity_order(errors)) {
    c.order.push_back(errors[i].node);
    c.density.push_back(errors[i].density());
  }

  // One plan per prefix length k (the ends are known), by bisection. Every k < cands has a
  // 4-bit linear, so the preset's 4-bit quantizer; k = cands is `eight`, without it.
  const int64_t cands = c.candidates;
  std::map<int64_t, Prediction> memo = {{0, ends.first}, {cands, ends.second}};
  auto predict = [&](int64_t k) -> StatusOr<Prediction> {
    if (auto it = memo.find(k); it != memo.end()) return it->second;
    QBC_ASSIGN_OR_RETURN(const Prediction p, planner.predict(with_eight(base, order, k)));
    memo[k] = p;
    return p;
  };
  QBC_ASSIGN_OR_RETURN(const int64_t k, largest_prefix(cands, [&](int64_t i) -> StatusOr<bool> {
                         QBC_ASSIGN_OR_RETURN(const Prediction p, predict(i));
                         return planner.meets(p);
                       }));
  if (k < 0) return internal_error(request.flag, ": the all-4-bit end met the target, then not");
  if (k == cands)
    log("quantize")
        .warn("{}: met with every block linear at 8 bits ({}); nothing goes to 4 bits",
              request.flag,
              request.kind == Kind::kSize ? npu::human_bytes(c.all8_bytes) + " of DRAM weights"
                                          : tok_s_text(c.all8_tok_s) + " tokens/s predicted");
  QBC_ASSIGN_OR_RETURN(const Prediction chosen, predict(k));
  c.weights_bytes = chosen.weights_bytes;
  c.decode_tok_s = chosen.decode_tok_s;
  c.eight.assign(order.begin(), order.begin() + k);

  // The effective configuration: the choice, with the flag as its origin (the user's own
  // globs stay first in the 8-bit list), and the preset's 4-bit keys if it set any.
  const config::Origin origin{request.flag};
  if (k == cands) {
    // Nothing at 4 bits: the projections at 8, the configuration otherwise as given.
    cfg->options = eight;
  } else {
    if (!four_bit_keys.empty())
      log("config").warn("{}", config::four_bit_note(four, four_bit_keys));
    const bool user_list = cfg->options.bit().layer_overrides().weight8_bits_size() > 0;
    const auto user_origin = cfg->origins.find(kEightKey);
    const std::string user_source = user_origin == cfg->origins.end()
                                        ? std::string("default")
                                        : user_origin->second.to_string();
    cfg->options = with_eight(base, order, k);
    cfg->origins = four.origins;
    if (k > 0)
      cfg->origins[kEightKey] =
          user_list ? config::Origin{user_source + " + " + request.flag} : origin;
  }
  for (const ProjectionKey& p : kProjections) cfg->origins[p.key] = origin;
  c.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  log("quantize").info("{}", bit_budget_text(c));
  return c;
}

std::string bit_budget_text(const BitBudgetChoice& c) {
  const int64_t eight = static_cast<int64_t>(c.eight.size());
  std::string s = "bits by budget (" + c.request.flag + "): " + std::to_string(eight) + " of " +
                  std::to_string(c.candidates) + " block linears at 8 bits, " +
                  std::to_string(c.candidates - eight) + " at 4; DRAM weights " +
                  npu::human_bytes(c.weights_bytes) + " (all at 4 bits " +
                  npu::human_bytes(c.all4_bytes) + ", all at 8 " + npu::human_bytes(c.all8_bytes) +
                  ")";
  if (c.request.kind == BitBudgetRequest::Kind::kDecode)
    s += ", decode " + tok_s_text(c.decode_tok_s) + " tokens/s on " + c.scheme + " (all at 4 " +
         tok_s_text(c.all4_tok_s) + ", all at 8 " + tok_s_text(c.all8_tok_s) + ")";
  char tail[96];
  std::snprintf(tail, sizeof(tail), ", estimates of %d plans in %.1f s", c.plans, c.seconds);
  return s + tail;
}

std::string bit_budget_json(const BitBudgetChoice& c) {
  const bool size = c.request.kind == BitBudgetRequest::Kind::kSize;
  nlohmann::json j;
  j["target"] = {{"kind", size ? "weights_bytes" : "decode_tok_s"},
                 {"value", c.request.target},
                 {"flag", c.request.flag}};
  j["candidates"] = c.candidates;
  j["eight_bit"] = c.eight;
  j["four_bit_count"] = c.candidates - static_cast<int64_t>(c.eight.size());
  nlohmann::json order = nlohmann::json::array();
  for (size_t i = 0; i < c.order.size(); ++i)
    order.push_back({{"linear", c.order[i]}, {"error_per_weight", c.density[i]}});
  j["sensitivity"] = order;
  j["predicted"] = {{"weights_bytes", c.weights_bytes},
                    {"all4_weights_bytes", c.all4_bytes},
                    {"all8_weights_bytes", c.all8_bytes}};
  if (!size) {
    j["predicted"]["scheme"] = c.scheme;
    j["predicted"]["decode_tok_s"] = c.decode_tok_s;
    j["predicted"]["all4_decode_tok_s"] = c.all4_tok_s;
    j["predicted"]["all8_decode_tok_s"] = c.all8_tok_s;
  }
  j["plans"] = c.plans;
  j["seconds"] = c.seconds;
  return j.dump();
}

}  // namespace qbc::driver
