// Helpers shared by the tests of the weight passes (hessianQuant, searchWeightScale):
// a model with a pass context over embedded calibration samples, 4-bit options,
// token sequences from a text file, all logits of a model, and the KL / MSE distance
// between two models' logits.
#pragma once

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "qbc/config/config.h"
#include "qbc/quant/pass.h"
#include "qbc/quant/weight_store.h"
#include "qbc/tokenizer/tokenizer.h"
#include "transform_cases.h"

namespace qbc::testing {

/// Default options with 4-bit query/key/value/output/ffn weights (head at its default).
config::CompileOptions four_bit_options() {
  config::CompileOptions o = config::defaults();
  auto* w = o.mutable_bit()->mutable_transformer()->mutable_weight();
  w->set_query(4);
  w->set_key(4);
  w->set_value(4);
  w->set_output(4);
  w->set_ffn(4);
  return o;
}

/// The first `n` lines of `file`, tokenized (BOS added) and cut to `len` tokens.
std::vector<std::vector<int32_t>> text_sequences(const tokenizer::Tokenizer& tok,
                                                 const std::filesystem::path& file, size_t skip,
                                                 size_t n, size_t len) {
  std::ifstream in(file);
  std::string line;
  std::vector<std::vector<int32_t>> out;
  size_t seen = 0;
  while (out.size() < n && std::getline(in, line)) {
    if (line.empty() || seen++ < skip) continue;
    std::vector<int32_t> ids = tok.encode(line, true);
    if (ids.size() < len / 2) continue;
    if (ids.size() > len) ids.resize(len);
    out.push_back(std::move(ids));
  }
  return out;
}

/// Mean KL(float ‖ quantized) per token and mean squared logit error over `ids`.
struct Distance {
  double kl = 0, mse = 0;
};
Distance distance(const std::vector<std::vector<float>>& base,
                  const std::vector<std::vector<float>>& q, int64_t vocab) {
  Distance d;
  int64_t tokens = 0, values = 0;
  for (size_t s = 0; s < base.size(); ++s) {
    const int64_t rows = static_cast<int64_t>(base[s].size()) / vocab;
    for (int64_t t = 0; t < rows; ++t) {
      const float* a = base[s].data() + t * vocab;
      const float* b = q[s].data() + t * vocab;
      double ma = -INFINITY, mb = -INFINITY;
      for (int64_t v = 0; v < vocab; ++v) {
        ma = std::max(ma, static_cast<double>(a[v]));
        mb = std::max(mb, static_cast<double>(b[v]));
      }
      double za = 0, zb = 0;
      for (int64_t v = 0; v < vocab; ++v) {
        za += std::exp(a[v] - ma);
        zb += std::exp(b[v] - mb);
      }
      const double la = ma + std::log(za), lb = mb + std::log(zb);
      for (int64_t v = 0; v < vocab; ++v) {
        const double pa = std::exp(a[v] - la);
        d.kl += pa * ((a[v] - la) - (b[v] - lb));
        const double e = static_cast<double>(a[v]) - b[v];
        d.mse += e * e;
      }
      ++tokens;
      values += vocab;
    }
  }
  d.kl /= static_cast<double>(tokens);
  d.mse /= static_cast<double>(values);
  return d;
}

StatusOr<std::vector<std::vector<float>>> all_logits(
    const ir::Graph& g, const ir::WeightReader& reader,
    const std::vector<std::vector<int32_t>>& seqs) {
  std::vector<std::vector<float>> out;
  for (const auto& ids : seqs) {
    QBC_ASSIGN_OR_RETURN(std::vector<float> l, ::qbc::testing::float_logits(g, reader, ids));
    out.push_back(std::move(l));
  }
  return out;
}

/// A model, its weights and a pass context over them.
struct WeightPassRun {
  ::qbc::testing::LoadedCase model;
  std::unique_ptr<quant::WeightStore> store;
  config::CompileOptions options;
  std::vector<std::vector<float>> embeds;
  int64_t hidden = 0;
  quant::SampleSource samples;
  quant::FixedWeightMap fixed;
  quant::PassContext ctx;
};

/// Loads the case, embeds `calib` and sets up a context with samples and a fixed map.
inline Status setup_weight_pass_run(WeightPassRun& r, const TransformCase& c,
                                    const std::filesystem::path& shared,
                                    const std::vector<std::vector<int32_t>>& calib,
                                    const config::CompileOptions& options) {
  QBC_ASSIGN_OR_RETURN(r.model, ::qbc::testing::load_transform_case(c, shared));
  r.store = std::make_unique<quant::WeightStore>(frontend::model_weight_reader(*r.model.source));
  r.options = options;
  QBC_ASSIGN_OR_RETURN(std::unique_ptr<ref::Session> s,
                       ref::Session::create(r.model.graph, r.store->reader()));
  r.hidden = s->hidden_size();
  for (const auto& ids : calib) {
    std::vector<float> e;
    QBC_RETURN_IF_ERROR(s->embed(ids, &e));
    r.embeds.push_back(std::move(e));
  }
  r.samples = [&r](size_t i, std::vector<float>* out, int64_t* seq) {
    *out = r.embeds[i];
    *seq = static_cast<int64_t>(out->size()) / r.hidden;
    return ok_status();
  };
  r.ctx.graph = &r.model.graph;
  r.ctx.weights = r.store.get();
  r.ctx.options = &r.options;
  r.ctx.samples = &r.samples;
  r.ctx.num_samples = r.embeds.size();
  r.ctx.fixed = &r.fixed;
  return ok_status();
}

}  // namespace qbc::testing
