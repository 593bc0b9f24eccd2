// Running a model: reference sessions and tokenizers (sampling and generation: qbc_runner).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "qbc/driver/model_loader.h"
#include "qbc/ref/session.h"
#include "qbc/runner/generate.h"
#include "qbc/runner/runner.h"
#include "qbc/tokenizer/tokenizer.h"

namespace qbc::driver {

/// A float reference session over a loaded model's weights.
StatusOr<std::unique_ptr<ref::Session>> make_session(const LoadedModel& model,
                                                     const ref::SessionOptions& options = {});

/// True when the graph has quantized nodes (qlinear, quantized KV cache).
bool is_quantized(const ir::Graph& g);

/// The runner for a model: the float reference runtime for a float graph, the
/// fake-quant evaluator (docs/numerics.md) for a quantized one.
StatusOr<std::unique_ptr<runner::Runner>> make_runner(const LoadedModel& model,
                                                      const ref::SessionOptions& options = {});

/// The tokenizer that ships with the model (tokenizer.json, or the GGUF vocabulary).
StatusOr<tokenizer::Tokenizer> load_tokenizer(const LoadedModel& model);

// Sampling and the generation loop are qbc_runner's (qbc/runner/generate.h), shared with the
// runtime's Generator.
using runner::GenerateResult;
using runner::Sampler;
using runner::SamplingOptions;

/// The smallest KV-cache capacity over the graph's attention nodes.
int64_t cache_capacity(const ir::Graph& g);

}  // namespace qbc::driver
