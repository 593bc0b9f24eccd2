// The vision tower's quantization (see qbc/quant/vision_quant.h).
#include "qbc/quant/vision_quant.h"

#include "qbc/support/cancel.h"
#include "qbc/support/logging.h"

namespace qbc::quant {

config::CompileOptions vision_recipe(const config::CompileOptions& base) {
  config::CompileOptions o = base;
  config::BitConfig& bit = *o.mutable_bit();
  auto& w = *bit.mutable_transformer()->mutable_weight();
  auto& a = *bit.mutable_transformer()->mutable_activation();
  auto w8a8 = [](auto& b) {  // the six projection fields of both messages
    b.set_query(8);
    b.set_key(8);
    b.set_value(8);
    b.set_output(8);
    b.set_ffn(8);
    b.set_head(8);
  };
  w8a8(w);
  w8a8(a);
  bit.mutable_kv_cache()->set_key(8);
  bit.mutable_kv_cache()->set_value(8);
  for (const char* name : kVisionActivation16)
    bit.mutable_layer_overrides()->add_activation16_bits(name);
  // One weight image: a tower runs once per image, in its prefill program (bit.prefill /
  // bit.decode are the language model's phases).
  bit.clear_prefill();
  bit.clear_decode();
  return o;
}

RtnRules vision_rtn_rules() {
  RtnRules r;
  r.per_channel_when_uneven = true;
  return r;
}

StatusOr<CalibStats> collect_feature_stats(const ir::Graph& g, ref::Session& session,
                                           const std::vector<FeatureSample>& samples, int mode) {
  if (samples.empty()) return invalid_argument("vision calibration: no samples");
  const std::vector<std::string> nodes = observed_nodes(g);
  CalibStats stats;
  session.set_keep_activations(true);
  const int passes = mode == 0 ? 1 : 2;
  std::vector<float> out, act;
  std::vector<int64_t> shape;
  for (int pass = 0; pass < passes; ++pass) {
    for (size_t i = 0; i < samples.size(); ++i) {
      QBC_RETURN_IF_ERROR(cancel::check("vision calibration sample " + std::to_string(i)));
      QBC_RETURN_IF_ERROR(
          session.forward_inputs(samples[i], &out).with_context("vision calibration sample ", i));
      for (const std::string& name : nodes) {
        QBC_RETURN_IF_ERROR(session.activation(name, &act, &shape));
        TensorStats& s = stats[name];
        if (pass == 0) {
          observe_max(s, act, shape.empty() ? 1 : shape.back());
        } else {
          observe_histogram(s, act);
        }
      }
      events::progress("calib", static_cast<int64_t>(pass * samples.size() + i + 1),
                       static_cast<int64_t>(passes * samples.size()));
    }
  }
  session.set_keep_activations(false);
  return stats;
}

StatusOr<QuantizeResult> quantize_vision(const ir::Graph& g, const ir::WeightReader& weights,
                                         const std::vector<FeatureSample>& samples,
                                         const config::CompileOptions& options,
                                         const TensorSink& sink) {
  const config::CompileOptions o = vision_recipe(options);
  QBC_RETURN_IF_ERROR(check_supported(o));
  QBC_ASSIGN_OR_RETURN(std::unique_ptr<ref::Session> session, ref::Session::create(g, weights));
  QBC_ASSIGN_OR_RETURN(const CalibStats stats,
                       collect_feature_stats(g, *session, samples, o.calibration().mode()));
  session.reset();  // the float weights are not needed any more
  return quantize_rtn(g, stats, weights, o, sink, nullptr, vision_rtn_rules());
}

}  // namespace qbc::quant
