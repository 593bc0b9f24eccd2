// Bits by budget (see qbc/driver/bit_budget.h).
#include "qbc/driver/bit_budget.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>
#include <numeric>

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

/// The configuration keys the choice writes.
constexpr const char* kWeightKeys[] = {
    "bit.transformer.weight.query", "bit.transformer.weight.key", "bit.transformer.weight.value",
    "bit.transformer.weight.output", "bit.transformer.weight.ffn"};
constexpr const char* kEightKey = "bit.layerOverrides.weight8Bits";

/// `options` with every block projection at `bits` (the head keeps its bits).
config::CompileOptions with_projection_bits(const config::CompileOptions& options, int bits) {
  config::CompileOptions o = options;
  auto* w = o.mutable_bit()->mutable_transformer()->mutable_weight();
  w->set_query(bits);
  w->set_key(bits);
  w->set_value(bits);
  w->set_output(bits);
  w->set_ffn(bits);
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
  const config::CompileOptions base = with_projection_bits(cfg->options, 4);
  if (base.bit().weight_group_size() == 0)
    log("quantize")
        .warn(
            "{}: the 4-bit linears are quantized per output channel (bit.weightGroupSize 0), the "
            "least accurate 4-bit layout; groups of 32 with zero points (--set "
            "bit.weightGroupSize=32 --set bit.weightZeroPoint=true) cost 0.6 bits a weight and "
            "recover most of it (docs/quantization.md)",
            request.flag);

  // The two ends first, from the configuration alone: every candidate at 4 bits (`base`) and
  // at 8 (the projection bits at 8; the linears bit.layerOverrides fixes are the same in both),
  // so a target out of reach is refused before any measurement.
  std::vector<isa::Scheme> schemes;  // kDecode: the one timed, once chosen
  const frontend::HParams* hp = model.source ? &model.source->hparams() : nullptr;
  auto predict_options = [&](const config::CompileOptions& options) -> StatusOr<Prediction> {
    config::ResolvedConfig at = *cfg;
    at.options = options;
    PlanOptions po;
    po.predictions = request.kind == Kind::kDecode;
    po.schemes = schemes;
    po.hparams = hp;
    QBC_ASSIGN_OR_RETURN(const PlanResult r, plan(model.graph, at, po));
    ++c.plans;
    Prediction p;
    p.weights_bytes = r.memory.dram.weights;
    for (const SchemePlan& s : r.schemes) {
      const double rate = s.prediction.decode_s > 0 ? 1.0 / s.prediction.decode_s : 0.0;
      if (rate > p.decode_tok_s) {
        p.decode_tok_s = rate;
        if (schemes.empty()) c.scheme = isa::scheme_name(s.scheme);
      }
    }
    if (request.kind == Kind::kDecode && schemes.empty()) {
      if (c.scheme.empty())
        return internal_error(request.flag, ": the plan predicted no decode to compare with");
      for (const SchemePlan& s : r.schemes)
        if (c.scheme == isa::scheme_name(s.scheme)) schemes = {s.scheme};
    }
    return p;
  };
  const config::CompileOptions eight_base = with_projection_bits(base, 8);
  // The fastest scheme is chosen with every candidate at 8 bits.
  QBC_ASSIGN_OR_RETURN(const Prediction hi, predict_options(eight_base));
  QBC_ASSIGN_OR_RETURN(const Prediction lo, predict_options(base));
  c.all8_bytes = hi.weights_bytes;
  c.all4_bytes = lo.weights_bytes;
  c.all8_tok_s = hi.decode_tok_s;
  c.all4_tok_s = lo.decode_tok_s;
  auto meets = [&](const Prediction& p) {
    return request.kind == Kind::kSize ? static_cast<double>(p.weights_bytes) <= request.target
                                       : p.decode_tok_s >= request.target;
  };
  if (!meets(lo)) {
    if (request.kind == Kind::kSize)
      return invalid_argument(
          request.flag, ": out of reach: with every block linear at 4 bits the DRAM weights are ",
          npu::human_bytes(c.all4_bytes),
          " (the head at bit.transformer.weight.head=", base.bit().transformer().weight().head(),
          " and the linears bit.layerOverrides fixes keep their bits); all at 8 bits: ",
          npu::human_bytes(c.all8_bytes));
    return invalid_argument(
        request.flag,
        ": out of reach: with every block linear at 4 bits the predicted "
        "decode is ",
        tok_s_text(c.all4_tok_s), " tokens/s on ", c.scheme,
        " (an estimate of the cost model); all at 8 bits: ", tok_s_text(c.all8_tok_s));
  }

  // Sensitivity of every block linear, on the calibration data.
  size_t n = 0;
  quant::DeepStackSource deepstack;
  QBC_ASSIGN_OR_RETURN(const quant::SampleSource samples,
                       calibration_source(model, *cfg, &n, &deepstack));
  const LoadedModel* m = &model;
  const quant::WeightStore store(
      [m](const ir::Weight& w, std::vector<float>* out) { return read_weight(*m, w, out); });
  ref::SessionOptions session;
  session.threads = threads;
  StatusOr<std::vector<quant::LinearBitError>> measured = quant::linear_bit_errors(
      model.graph, store, samples, n, base, session, deepstack ? &deepstack : nullptr);
  if (!measured.ok()) return measured.status().with_context(request.flag);
  // The candidates: linears the configuration leaves to the projection bits (now 4).
  std::vector<quant::LinearBitError> errors;
  for (const quant::LinearBitError& e : *measured)
    if (quant::linear_bits(e.node, false, base).weight == 4) errors.push_back(e);
  c.candidates = static_cast<int64_t>(errors.size());
  if (errors.empty())
    return invalid_argument(request.flag, ": every block linear of ", model.graph.name(),
                            " is fixed at 8 or 16 bits by bit.layerOverrides: nothing to choose");
  const std::vector<size_t> order = sensitivity_order(errors);

  // One plan per prefix length k: the first k of `order` at 8 bits (the ends are known).
  auto options_for = [&](int64_t k) {
    config::CompileOptions o = base;
    auto* eight = o.mutable_bit()->mutable_layer_overrides();
    for (int64_t i = 0; i < k; ++i)
      eight->add_weight8_bits(errors[order[static_cast<size_t>(i)]].node);
    return o;
  };
  const int64_t cands = c.candidates;
  std::map<int64_t, Prediction> memo = {{0, lo}, {cands, hi}};
  auto predict = [&](int64_t k) -> StatusOr<Prediction> {
    if (auto it = memo.find(k); it != memo.end()) return it->second;
    QBC_ASSIGN_OR_RETURN(const Prediction p, predict_options(options_for(k)));
    memo[k] = p;
    return p;
  };
  QBC_ASSIGN_OR_RETURN(const int64_t k, largest_prefix(cands, [&](int64_t i) -> StatusOr<bool> {
                         QBC_ASSIGN_OR_RETURN(const Prediction p, predict(i));
                         return meets(p);
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
  for (int64_t i = 0; i < k; ++i) c.eight.push_back(errors[order[static_cast<size_t>(i)]].node);

  // The effective configuration: the choice, with the flag as its origin.
  const bool user_list = cfg->options.bit().layer_overrides().weight8_bits_size() > 0;
  const auto user_origin = cfg->origins.find(kEightKey);
  const std::string user_source =
      user_origin == cfg->origins.end() ? std::string("default") : user_origin->second.to_string();
  cfg->options = options_for(k);
  const config::Origin origin{request.flag};
  for (const char* key : kWeightKeys) cfg->origins[key] = origin;
  if (k > 0)  // the user's own globs stay first in the list
    cfg->origins[kEightKey] =
        user_list ? config::Origin{user_source + " + " + request.flag} : origin;
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
