// Per-block error of a quantized vision tower (see qbc/driver/vision_block_error.h).
#include "qbc/driver/vision_block_error.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <set>
#include <sstream>

#include "qbc/driver/accuracy.h"
#include "qbc/quant/fakequant.h"
#include "qbc/ref/session.h"
#include "qbc/support/cancel.h"

namespace qbc::driver {
bool is_tower_block_output(const std::string& name) {
  const std::string head = "vis.blk.", tail = ".ffn_residual";
  if (name.size() <= head.size() + tail.size() || name.compare(0, head.size(), head) != 0 ||
      name.compare(name.size() - tail.size(), tail.size(), tail) != 0)
    return false;
  const std::string digits = name.substr(head.size(), name.size() - head.size() - tail.size());
  return digits.size() <= 6 &&
         std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; });
}

StatusOr<std::vector<TowerBlockError>> tower_block_errors(
    const ir::Graph& float_graph, const ir::WeightReader& float_weights, const ir::Graph& quantized,
    const ir::WeightReader& quantized_weights, const std::vector<quant::FeatureSample>& samples) {
  std::vector<TowerBlockError> out;
  for (const ir::Node& n : float_graph.nodes())
    if (is_tower_block_output(n.name) && quantized.find(n.name) >= 0) out.push_back({n.name, 0.0});
  if (out.empty() || samples.empty()) return out;
  QBC_ASSIGN_OR_RETURN(std::unique_ptr<ref::Session> ref,
                       ref::Session::create(float_graph, float_weights));
  QBC_ASSIGN_OR_RETURN(std::unique_ptr<quant::FakeQuantSession> test,
                       quant::FakeQuantSession::create(quantized, quantized_weights));
  ref->set_keep_activations(true);  // LibTorch: the kept values are the forward's own tensors
  std::set<std::string> nodes;
  for (const TowerBlockError& e : out) nodes.insert(e.node);
  QBC_RETURN_IF_ERROR(test->keep_activations_of(std::move(nodes)));  // not every activation
  std::vector<double> signal(out.size(), 0.0), noise(out.size(), 0.0);
  std::vector<float> unused, want, got;
  std::vector<int64_t> shape;
  const size_t n = std::min(samples.size(), kTowerErrorSamples);
  for (size_t s = 0; s < n; ++s) {
    QBC_RETURN_IF_ERROR(cancel::check("comparing the vision tower's blocks"));
    ref->reset();
    test->reset();
    QBC_RETURN_IF_ERROR(
        ref->forward_inputs(samples[s], &unused).with_context("float tower, sample ", s));
    QBC_RETURN_IF_ERROR(
        test->forward_inputs(samples[s], &unused).with_context("quantized tower, sample ", s));
    for (size_t b = 0; b < out.size(); ++b) {
      QBC_RETURN_IF_ERROR(ref->activation(out[b].node, &want, &shape));
      QBC_RETURN_IF_ERROR(test->activation(out[b].node, &got, &shape));
      if (got.size() != want.size())
        return internal_error(out[b].node, ": ", got.size(), " quantized values against ",
                              want.size(), " float ones");
      for (size_t i = 0; i < want.size(); ++i) {
        const double d = static_cast<double>(got[i]) - want[i];
        signal[b] += static_cast<double>(want[i]) * want[i];
        noise[b] += d * d;
      }
    }
  }
  for (size_t b = 0; b < out.size(); ++b) {
    if (!std::isfinite(signal[b]) || !std::isfinite(noise[b]))
      return internal_error(out[b].node, ": the ", std::isfinite(signal[b]) ? "quantized" : "float",
                            " tower gives a non-finite value (signal ", signal[b], ", noise ",
                            noise[b], ")");
    out[b].sqnr_db = sqnr_db(signal[b], noise[b]);
  }
  return out;
}

nlohmann::json tower_block_json(const std::vector<TowerBlockError>& errors) {
  nlohmann::json out = nlohmann::json::array();
  for (const TowerBlockError& e : errors) {
    const double rounded = std::round(e.sqnr_db * 100.0) / 100.0;
    out.push_back({{"node", e.node},
                   {"sqnr_db", std::isfinite(e.sqnr_db) ? nlohmann::json(rounded) : nullptr}});
  }
  return out;
}

std::string tower_block_text(const std::vector<TowerBlockError>& errors) {
  std::ostringstream os;
  os.setf(std::ios::fixed);
  os.precision(1);
  for (size_t b = 0; b < errors.size(); ++b) {
    // "vis.blk.3.ffn_residual" -> "blk.3"
    std::string name = errors[b].node;
    if (name.rfind("vis.", 0) == 0) name = name.substr(4);
    if (const size_t dot = name.rfind('.'); dot != std::string::npos) name = name.substr(0, dot);
    os << (b > 0 ? ", " : "") << name << " ";
    if (std::isfinite(errors[b].sqnr_db))
      os << errors[b].sqnr_db;
    else
      os << "exact";
  }
  os << " dB";
  return os.str();
}

}  // namespace qbc::driver
