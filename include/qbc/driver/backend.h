// The backend step of the driver: the configuration's target, inference scheme and lengths
// turned into npu::Options, and a loaded quantized model compiled to an isa::Bundle. Until
// the MXQ format lands, `qbc run/eval --backend npu` and `qbc inspect --program/--memory`
// compile in memory through here.
#pragma once

#include "qbc/config/config.h"
#include "qbc/driver/model_loader.h"
#include "qbc/isa/program.h"
#include "qbc/npu/compile.h"
#include "qbc/support/status.h"

namespace qbc::driver {

/// The backend options of `cfg` for `graph`: the target profile, one mode per scheme
/// (`all`: every scheme the target has cores for), the cache length (the graph's own unless
/// llm.attributes.maxCacheLength is set), the prefill chunk (maxCoreDataLength) and the
/// batch (runtime.batchSize).
StatusOr<npu::Options> backend_options(const ir::Graph& graph, const config::ResolvedConfig& cfg);

/// Compiles a loaded quantized model (weights read from its source and sidecar).
StatusOr<isa::Bundle> compile_backend(const LoadedModel& model, const npu::Options& options);

}  // namespace qbc::driver
