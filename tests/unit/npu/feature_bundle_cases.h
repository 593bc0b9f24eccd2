// The deployments and activation-scale modes a vision tower's feature bundle is checked over,
// and the check itself: compiled for each deployment, verified, run twice in the executor
// (runtime::FeatureSession), the features equal to the fake-quant evaluator's bit for bit.
// Shared by the towers' backend tests (vision_backend_test: CLIP; qwen_vision_backend_test).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "qbc/config/config.h"
#include "qbc/isa/verify.h"
#include "qbc/mxq/bundle_codec.h"
#include "qbc/npu/compile.h"
#include "qbc/npu/plan.h"
#include "qbc/quant/fakequant.h"
#include "qbc/quant/vision_quant.h"
#include "qbc/runtime/feature_session.h"
#include "small_case.h"
#include "test_support.h"

namespace qbc::testing {

/// The first index where two float vectors differ bitwise (-1: none; size mismatch: 0).
inline int64_t first_difference(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::memcmp(&a[i], &b[i], sizeof(float)) != 0) return static_cast<int64_t>(i);
  }
  return -1;
}

/// An activation-scale mode of the vision recipe.
struct ScaleMode {
  const char* label;
  config::ActivationScaling scaling;
  int method;  // calibration.method
  config::CompileOptions options() const {
    config::CompileOptions o = config::defaults();
    o.mutable_bit()->set_activation_scaling(scaling);
    o.mutable_calibration()->set_method(method);
    return o;
  }
};

inline const std::vector<ScaleMode>& tower_scale_modes() {
  static const std::vector<ScaleMode> modes = {
      {"per-token asymmetric", config::ACTIVATION_SCALING_PER_TOKEN_ASYMMETRIC, 0},
      {"static, method 3", config::ACTIVATION_SCALING_STATIC, 3},
  };
  return modes;
}

/// A target, its SRAM (0: the profile's) and one scheme over `cores` cores.
struct Deployment {
  const char* target;
  int64_t sram;
  isa::Scheme scheme;
  int cores;
  std::string label() const {
    return std::string(target) + " SRAM " + std::to_string(sram) + ", " + isa::scheme_name(scheme);
  }
};

/// aries-rb single and global8 with the profile's SRAM and with 48 KiB (other tiles), and
/// test-2core's global4.
inline const std::vector<Deployment>& tower_deployments() {
  static const std::vector<Deployment> d = {
      {"aries-rb", 0, isa::Scheme::kSingle, 1},
      {"aries-rb", 0, isa::Scheme::kGlobal8, 8},
      {"aries-rb", 48 * 1024, isa::Scheme::kSingle, 1},
      {"aries-rb", 48 * 1024, isa::Scheme::kGlobal8, 8},
      {"test-2core", 0, isa::Scheme::kGlobal4, 2},
  };
  return d;
}

/// Backend options for a feature graph of `rows` input rows (the chunk and the cache).
inline StatusOr<npu::Options> feature_options(const std::string& target, int64_t sram,
                                              isa::Scheme scheme, int cores, int64_t rows) {
  QBC_ASSIGN_OR_RETURN(npu::Target t, test_target(target));
  if (sram > 0) t.sram_bytes = sram;
  npu::Options o;
  o.target = t;
  o.modes = {npu::ModeRequest{scheme, cores, 1}};
  o.chunk = rows;
  o.max_cache = rows;
  return o;
}

/// Compiles the quantized tower `q` for `d` with `rows` input rows, checks the bundle (kind,
/// the program verifier, then `check`), and expects the executor's features on `image` to
/// equal `want` bit for bit, twice on the same device.
inline void expect_executor_matches(const quant::QuantizeResult& q, const ir::WeightReader& qr,
                                    const Deployment& d, int64_t rows,
                                    const quant::FeatureSample& image,
                                    const std::vector<float>& want, const std::string& at,
                                    const std::function<void(const isa::Bundle&)>& check) {
  auto o = feature_options(d.target, d.sram, d.scheme, d.cores, rows);
  QBC_ASSERT_OK(o);
  auto b = npu::compile(q.graph, qr, *o);
  ASSERT_TRUE(b.ok()) << at << ": " << b.status().to_string();
  EXPECT_EQ(b->kind, isa::BundleKind::kFeatures) << at;
  const Status verified = isa::verify(*b);
  EXPECT_TRUE(verified.ok()) << at << ": " << verified.to_string();
  check(*b);
  // The MXQ carries every attention descriptor as compiled (a lost `bidirectional` turned a
  // window's rows causal in the runtime; V10 now refuses that).
  isa::Bundle carried;
  QBC_ASSERT_OK(mxq::decode_layout(mxq::encode_layout(*b), at, &carried));
  ASSERT_EQ(carried.attentions.size(), b->attentions.size()) << at;
  for (size_t i = 0; i < b->attentions.size(); ++i) {
    EXPECT_TRUE(b->attentions[i].bidirectional) << at << ": attention " << i;
    EXPECT_EQ(carried.attentions[i].bidirectional, b->attentions[i].bidirectional) << at;
    EXPECT_EQ(carried.attentions[i].window, b->attentions[i].window) << at;
  }
  auto bundle = std::make_shared<const isa::Bundle>(std::move(*b));
  runtime::DeviceOptions dopt;
  dopt.scheme = d.scheme;
  auto s = runtime::FeatureSession::create(bundle, dopt);
  ASSERT_TRUE(s.ok()) << at << ": " << s.status().to_string();
  EXPECT_EQ((*s)->rows(), rows) << at;
  std::vector<float> got;
  const Status ran = (*s)->forward(image, &got);
  ASSERT_TRUE(ran.ok()) << at << ": " << ran.to_string();
  EXPECT_EQ(first_difference(got, want), -1)
      << at << ": first difference at index " << first_difference(got, want);
  // A second call on the same device gives the same bits (nothing carried over).
  std::vector<float> again;
  QBC_ASSERT_OK((*s)->forward(image, &again));
  EXPECT_EQ(first_difference(again, want), -1) << at << " (second call)";
}

/// The tower graph `g` (a failed build is a test failure) quantized with `options` on
/// `calibration`; nullptr after a failure.
inline std::shared_ptr<const quant::QuantizeResult> quantized_tower(
    const StatusOr<ir::Graph>& g, const ir::WeightReader& reader,
    const std::vector<quant::FeatureSample>& calibration, const config::CompileOptions& options) {
  EXPECT_TRUE(g.ok()) << g.status().to_string();
  if (!g.ok()) return nullptr;
  auto q = quant::quantize_vision(*g, reader, calibration, options);
  EXPECT_TRUE(q.ok()) << q.status().to_string();
  if (!q.ok()) return nullptr;
  return std::make_shared<const quant::QuantizeResult>(std::move(*q));
}

/// The fake-quant evaluator's features of the quantized tower `q` on `image`.
inline std::vector<float> evaluator_features(const quant::QuantizeResult& q,
                                             const ir::WeightReader& qr,
                                             const quant::FeatureSample& image) {
  std::vector<float> want;
  auto fq = quant::FakeQuantSession::create(q.graph, qr);
  EXPECT_TRUE(fq.ok()) << fq.status().to_string();
  if (!fq.ok()) return want;
  const Status s = (*fq)->forward_inputs(image, &want);
  EXPECT_TRUE(s.ok()) << s.to_string();
  return want;
}

/// Two plans of one tower at two image sizes have the same SRAM stages, planned and used
/// (nothing on chip grows with the image); returns the peak (expected > 0).
inline int64_t expect_same_sram_stages(const std::vector<npu::StagePlan>& a,
                                       const std::vector<npu::StagePlan>& b) {
  EXPECT_EQ(a.size(), b.size());
  int64_t peak_a = 0, peak_b = 0;
  for (const npu::StagePlan& st : a) peak_a = std::max(peak_a, st.used);
  for (const npu::StagePlan& st : b) peak_b = std::max(peak_b, st.used);
  for (size_t k = 0; k < a.size() && k < b.size(); ++k) {
    EXPECT_EQ(a[k].planned, b[k].planned) << a[k].name;
    EXPECT_EQ(a[k].used, b[k].used) << a[k].name;
  }
  EXPECT_GT(peak_a, 0);
  EXPECT_EQ(peak_a, peak_b);
  return peak_a;
}

}  // namespace qbc::testing
