// `qbc plan`: does a model fit the target, how fast will it run, at which context, answered
// from config.json alone. The first stages of compile's pipeline (driver/compile.h) on a
// shape-only graph: the model's shape-only quantized graph (shape_for_backend) is lowered by
// the backend exactly as `qbc compile` would lower it, without weights or calibration, and
// the cost model (npu/cost_model.h) times the emitted programs.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "qbc/config/config.h"
#include "qbc/frontend/hparams.h"
#include "qbc/ir/graph.h"
#include "qbc/isa/program.h"
#include "qbc/npu/cost_model.h"
#include "qbc/npu/memory_plan.h"
#include "qbc/support/status.h"

namespace qbc::driver {

/// The float graph of a model known by its shape: `path` is a model folder (its
/// config.json; no weight file is opened), a config.json, or a .gguf (its metadata).
/// The KV capacity is the configuration's llm.attributes.maxCacheLength.
StatusOr<ir::Graph> shape_graph(const std::string& path, const config::ResolvedConfig& cfg);

/// The hyperparameters shape_graph reads from `path`.
StatusOr<frontend::HParams> shape_hparams(const std::string& path);
/// The float graph of `hp`, with only its first `blocks` decoder blocks when 0 < blocks.
StatusOr<ir::Graph> shape_graph(const frontend::HParams& hp, const config::ResolvedConfig& cfg,
                                int blocks = 0);

/// The cost model's parameters of a target profile.
npu::CostParams cost_params(const config::TargetProfile& t);

/// The vision tower's work for one image, counted from config.json (plan does not lower the
/// tower: an analytic estimate with the target profile's rates, docs/performance.md "Vision
/// towers in plan"). Linears with 16-bit activations (the patch embedding and the projector's
/// output, the multimodal recipe) count at the INT16 MAC rate, the rest at INT8.
struct VisionWork {
  int64_t views = 1;   ///< tower calls per image (Idefics3: tiles and the global view)
  int64_t rows = 0;    ///< the tower's rows per call (patches, + CLS for CLIP)
  int64_t layers = 0;  ///< encoder layers run (LLaVA: up to vision_feature_layer)
  int64_t tokens = 0;  ///< image tokens the language model receives
  int64_t macs_i8 = 0, macs_i16 = 0;
  int64_t vector_ops = 0;                ///< element operations: norms, GELU, softmax, residuals
  int64_t weight_bytes = 0;              ///< every weight (8-bit), read once per call
  int64_t activation_traffic_bytes = 0;  ///< DRAM reads and writes of activations per image
  int64_t activation_bytes = 0;          ///< DRAM held: input rows, the largest live pair, output
};

/// The estimate of one image through the tower on `cores` cores of a target.
struct VisionTime {
  double seconds = 0;  ///< with the host's per-call overhead
  double mac_s = 0, dram_s = 0, vector_s = 0;
  npu::Bound bound = npu::Bound::kLatency;
};
VisionTime vision_time(const VisionWork& w, const npu::CostParams& p, int cores);

/// Predictions for one inference scheme.
struct SchemePlan {
  isa::Scheme scheme = isa::Scheme::kSingle;
  int32_t cores = 1, instances = 1;
  npu::ModePrediction prediction;
  /// VLMs (PlanOptions::vision.tokens > 0): the prompt with one image's tokens added, and the
  /// tower's estimate on this scheme's cores per instance. TTFT with an image is
  /// vision.seconds + image_prediction.ttft_s.
  npu::ModePrediction image_prediction;
  VisionTime vision;
};

struct PlanOptions {
  int64_t prompt_tokens = 240;
  /// A VLM's vision work (vision_plan); tokens 0: a text model. With it every scheme also
  /// gets the tower's time and a TTFT for the prompt plus one image.
  VisionWork vision;
  /// The length the model was trained for (driver::model_trained_context); 0: unknown.
  int64_t trained_context = 0;
  std::string trained_source;
  bool predictions = true;  ///< false: the memory plan only (a sweep of fits)
  /// Schemes to predict; empty: the configured one, or every scheme the target has cores
  /// for when inferenceScheme is left at its default.
  std::vector<isa::Scheme> schemes;
  /// The model's hyperparameters (shape_hparams of the graph's source). With them, when the
  /// quantized graph's decoder blocks repeat with a period p (every block prints as the one p
  /// before it but for its index; p divides the block count, which is at least 3p and 8), the
  /// programs are lowered and timed for p and 2p blocks only and the predictions extrapolated
  /// linearly to every block ("time one block, multiply"): the time and memory of a plan grow
  /// with one period of blocks, not the model. The memory plan is always the whole model's.
  /// Not when the head (vocab x hidden) outweighs the blocks this saves: lowering it twice
  /// more would cost more than the blocks. A vocabulary of at least 2^20 ids is sampled too:
  /// the programs at two small vocabularies one step apart, extrapolated by steps.
  const frontend::HParams* hparams = nullptr;
};

/// The vision part of a vision-language model (docs/multimodal.md), planned from config.json
/// alone. An estimate: the weights at the vision recipe's 8 bits, not a lowered program; the
/// vision tower's time is not modelled yet.
struct VisionPlan {
  bool present = false;  ///< false: a text model (or a .gguf)
  std::string tower, projector;
  int64_t depth = 0, width = 0;
  int64_t parameters = 0;
  int64_t weight_bytes = 0;  ///< at 8-bit weights (one byte a parameter)
  int64_t source_bytes = 0;  ///< in the checkpoint's dtype
  int64_t image_size = 0, tokens_per_image = 0;
  bool dynamic_resolution = false;
  VisionWork work;
};

/// The vision plan of the model at `path` (a folder, its config.json, or a .gguf), at an image
/// side of `image_size` pixels (the configuration's vision.imageSize; 0: the model's default;
/// frontend::set_image_size's errors).
StatusOr<VisionPlan> vision_plan(const std::string& path, int64_t image_size = 0);
/// Its line of `qbc plan`'s text report (empty when not present).
std::string vision_plan_text(const VisionPlan& v);
/// DRAM the vision part adds to the text model's plan: its 8-bit weights and its activations
/// (the activations are not shared with the language model's: an estimate's upper bound).
int64_t vision_dram_bytes(const VisionPlan& v);

/// The host's token embedding table (docs/quantization.md "8-bit embedding"): held in host
/// memory, not DRAM, as the MXQ stores it. A float table is its source's bf16 when the
/// checkpoint is bfloat16 (2 bytes a value), else fp32 (4 bytes; a rotation such as spinR1
/// also makes it fp32); bit.embedding 8 holds int8 codes and one fp32 scale per row.
struct HostEmbeddingPlan {
  int64_t rows = 0, hidden = 0;
  int float_value_bytes = 4;  ///< 2 (bf16 source) or 4 (fp32)
  bool i8 = false;            ///< bit.embedding 8
  int64_t float_bytes() const { return rows * hidden * float_value_bytes; }
  int64_t i8_bytes() const { return rows * (hidden + 4); }
  int64_t bytes() const { return i8 ? i8_bytes() : float_bytes(); }
};

/// The host table of a graph's host embedding (rows x hidden), its source dtype (HF
/// torch_dtype; empty: fp32) and the configuration's bit.embedding.
HostEmbeddingPlan host_embedding_plan(int64_t rows, int64_t hidden, const std::string& torch_dtype,
                                      int embedding_bits);

struct PlanResult {
  /// The host's embedding table (set by plan_model; rows 0 when not known).
  HostEmbeddingPlan host_embedding;
  /// The memory plan of the configured deployment (inferenceScheme, batchSize,
  /// maxCacheLength), and whether it fits.
  npu::MemoryReport memory;
  npu::FitLimits limits;
  /// The fit error compile would report (with the table) when it does not fit.
  Status fit = ok_status();
  /// DRAM weights by MXQ part when the configuration splits the model (bytes per part).
  std::vector<int64_t> weights_by_part;
  int64_t max_cache = 0, batch = 1, chunk = 1;
  /// The model's images are bidirectional spans (a Gemma 3 VLM): span programs, and a chunk that
  /// holds an image (npu::Options::span_programs).
  bool span_programs = false;
  std::string target;
  std::vector<SchemePlan> schemes;
  /// The bundle the configured deployment compiles to (shapes only), for per-layer tables.
  /// When the predictions were extrapolated, its buffers and memory plan only (no programs).
  isa::Bundle bundle;
  /// The vision part of a VLM (set by the caller: vision_plan), reported beside the text plan.
  VisionPlan vision;
  /// From PlanOptions: the model's trained length and where it comes from.
  int64_t trained_context = 0;
  std::string trained_source;
  /// The period (in blocks) the predictions were extrapolated from; 0: the whole programs
  /// were timed. Extrapolated, a SchemePlan's prediction.decode.nodes are those of the
  /// 2-period program.
  int extrapolated_period = 0;
  /// The smaller of the two vocabularies (a step of 65,536 rows apart, the model's ragged last
  /// tile) the predictions were extrapolated from when the model's has at least 2^20 ids; 0:
  /// the model's vocabulary was lowered.
  int64_t extrapolated_vocab = 0;
  /// The planned graph's name (plan_model).
  std::string model_name;
};

/// The per-scheme lines of a VLM's plan: the tower's time on the scheme's cores and the TTFT
/// of a prompt with one image (empty for a text model).
std::string vision_schemes_text(const PlanResult& r);

/// Which scheme to pick, from the predictions of every scheme planned (all estimates).
struct Recommendation {
  std::string scheme;          ///< the recommended one: the fastest decode per sequence
  std::string fastest_decode;  ///< highest decode tok/s per sequence
  std::string best_ttft;       ///< lowest TTFT
  std::string throughput;      ///< highest tokens/s over all its sequences (multi runs 4)
  /// With best_ttft != fastest_decode: the reply length (tokens) from which the fastest
  /// decode also finishes first (TTFT + n / decode rate); 0 otherwise.
  int64_t break_even_tokens = 0;
  std::string reason;  ///< one or two sentences saying which and why
};

/// The recommendation of `r` (empty scheme when nothing was predicted).
Recommendation recommend(const PlanResult& r);

/// True when the configured cache is longer than the model was trained for.
inline bool past_training(const PlanResult& r) {
  return r.trained_context > 0 && r.max_cache > r.trained_context;
}

/// Plans `shape` (a float graph, e.g. from shape_graph) for `cfg`.
StatusOr<PlanResult> plan(const ir::Graph& shape, const config::ResolvedConfig& cfg,
                          const PlanOptions& options);

/// Plans the model at `path` (as shape_graph) for `cfg`: `options` with the model's
/// hyperparameters when `extrapolate` (time one period of blocks and multiply), without them
/// otherwise (--whole-programs).
StatusOr<PlanResult> plan_model(const std::string& path, const config::ResolvedConfig& cfg,
                                PlanOptions options, bool extrapolate);

/// The warning of a plan whose cache is longer than the model was trained for.
std::string training_warning(const PlanResult& r);

/// The stable JSON of `qbc plan --json` (docs/cli.md).
std::string plan_json(const PlanResult& r);
/// The text report of `qbc plan`.
std::string plan_text(const PlanResult& r);

}  // namespace qbc::driver
