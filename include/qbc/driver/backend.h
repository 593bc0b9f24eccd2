// The backend step of the driver: the configuration's target, inference scheme and lengths
// turned into npu::Options, and a loaded quantized model compiled to an isa::Bundle (what
// `qbc compile` writes as MXQ, and what `qbc run/eval --backend npu` runs in memory).
#pragma once

#include "qbc/config/config.h"
#include "qbc/driver/model_loader.h"
#include "qbc/isa/program.h"
#include "qbc/npu/compile.h"
#include "qbc/runner/runner.h"
#include "qbc/support/status.h"

namespace qbc::driver {

/// The backend options of `cfg` for `graph`: the target profile, one mode per scheme
/// (`all`: every scheme the target has cores for), the cache length (the graph's own unless
/// llm.attributes.maxCacheLength is set), the prefill chunk (maxCoreDataLength) and the
/// batch (runtime.batchSize).
StatusOr<npu::Options> backend_options(const ir::Graph& graph, const config::ResolvedConfig& cfg);

/// The int8 codes of `model` as stored: the view of a sidecar weight kept as an I8 tensor of
/// the weight's size, nullptr for any other weight (see ir::Int8View). Valid while `model` is.
ir::Int8View int8_codes(const LoadedModel& model);

/// Drops the resident pages of a sidecar weight int8_codes() viewed (they stay readable from
/// the file): the backend calls it once a linear's codes are in the weight image, so the
/// sidecar does not stay in memory beside the image (docs/performance.md "Compiling an 8B
/// model"). Other weights: nothing.
ir::ViewDone release_codes(const LoadedModel& model);

/// Compiles a loaded quantized model through the npu-compile pipeline (weights read from its
/// source and sidecar, int8 codes through int8_codes(), released after copying by
/// release_codes()); `instr` as the user gave it
/// (--disable-pass, --dump-after: names of other stages' passes are ignored).
StatusOr<isa::Bundle> compile_backend(const LoadedModel& model, const npu::Options& options,
                                      const pass::Instrumentation& instr = {});

/// As compile_backend, but a host embedding read unchanged from a BF16 tensor of the source
/// model is held as a view of the model's mapping (isa::Bundle::embedding_bf16_view) instead of
/// an fp32 copy: the bundle is valid only while `model` is (the compile job, which writes the
/// MXQ before it closes the model). The bundle's values, and the MXQ written from it, are the
/// same.
StatusOr<isa::Bundle> compile_backend_in_place(const LoadedModel& model,
                                               const npu::Options& options,
                                               const pass::Instrumentation& instr = {});

/// A runner over the NPU executor: compiles `model` for `cfg` (its first scheme, or
/// `scheme` when set) and returns a session on slot 0 of a new device. `host_threads` as
/// runtime::DeviceOptions (0 = all cores; results do not depend on it).
StatusOr<std::unique_ptr<runner::Runner>> make_npu_runner(const LoadedModel& model,
                                                          const config::ResolvedConfig& cfg,
                                                          int host_threads);

}  // namespace qbc::driver
