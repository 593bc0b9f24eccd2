// `qbc random-model`: a HuggingFace model folder with deterministic random weights
// (frontend/random_model.h), from a real config (optionally shrunk) or the built-in tiny one.
#pragma once

#include <cstdint>
#include <string>

#include "qbc/frontend/random_model.h"
#include "qbc/support/status.h"

namespace qbc::driver {

/// What to write (the command's arguments).
struct RandomModelRequest {
  std::string config;      ///< source config.json; empty with `tiny`
  bool tiny = false;       ///< the built-in tiny Llama config instead of `config`
  std::string output;      ///< the output folder
  std::string dtype;       ///< "f32", "f16", "bf16"; empty: the config's torch_dtype, else f32
  uint64_t seed = 0;       ///< equal seeds give identical files
  double init_std = 0.02;  ///< standard deviation of the weights (HF's initializer_range)
  bool force = false;      ///< write into a non-empty folder
  frontend::ConfigOverrides overrides;  ///< shape keys replaced in the config
};

/// What write_random_model wrote.
struct RandomModelResult {
  std::string output_dir, architecture;
  std::string dtype;  ///< as safetensors names it: "F32", "F16" or "BF16"
  uint64_t seed = 0;
  size_t tensors = 0;
  int64_t parameters = 0;
  uint64_t bytes = 0;  ///< model.safetensors + config.json
  double seconds = 0;
};

/// Checks the request (exactly one of `config` and `tiny`; the output folder missing, empty, or
/// `force`), writes config.json and model.safetensors (frontend::write_random_model), and
/// measures what was written. kInvalidArgument naming the flag or folder.
StatusOr<RandomModelResult> write_random_model(const RandomModelRequest& r);

/// The result as the "random-model" result event's JSON, and as the line the command prints:
/// "DIR: ARCH, N tensors, P parameters (DTYPE), B bytes in S s".
std::string random_model_json(const RandomModelResult& r);
std::string random_model_text(const RandomModelResult& r);

}  // namespace qbc::driver
