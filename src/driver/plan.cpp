// `qbc plan` (see qbc/driver/plan.h).
#include "qbc/driver/plan.h"

#include <algorithm>
#include <atomic>
#include <climits>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <regex>
#include <sstream>
#include <thread>

#include "qbc/driver/backend.h"
#include "qbc/driver/compile.h"
#include "qbc/driver/deployment.h"
#include "qbc/driver/mxq_output.h"
#include "qbc/frontend/hparams.h"
#include "qbc/frontend/importer.h"
#include "qbc/frontend/model_source.h"
#include "qbc/ir/text.h"
#include "qbc/mxq/model_file.h"
#include "qbc/npu/compile.h"
#include "qbc/quant/shape_only.h"
#include "qbc/support/logging.h"

namespace qbc::driver {
namespace fs = std::filesystem;
namespace {

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

/// Shapes only (no weight is read), unverified: the memory plan, or with the programs.
StatusOr<isa::Bundle> lower_shape(const ir::Graph& q, const npu::Options& o, bool programs) {
  return npu::run_pipeline(programs ? "npu-programs" : "npu-plan", q, o, nullptr);
}

// Extrapolating over blocks ("time one block, multiply"). A quantized graph's decoder block
// is the text of its nodes and weights (the lines defining blk.<i>.*) with every block index
// written '#': two blocks with the same text lower to the same instructions, so their share of
// a program's time and counts is the same.
std::vector<std::string> block_texts(const ir::Graph& q, int blocks) {
  static const std::regex own(R"(^\s*(%|weight @)blk\.(\d+)\.)");
  static const std::regex index(R"((blk|layers)\.\d+\b)");
  static const std::regex block(R"(block \d+)");
  std::vector<std::string> out(static_cast<size_t>(std::max(blocks, 0)));
  std::istringstream in(ir::print_text(q));
  std::smatch m;
  for (std::string line; std::getline(in, line);) {
    if (!std::regex_search(line, m, own)) continue;
    const long i = std::strtol(m[2].str().c_str(), nullptr, 10);
    if (i < 0 || i >= blocks) continue;
    std::string t = std::regex_replace(line, index, "$1.#");
    out[static_cast<size_t>(i)] += std::regex_replace(t, block, "block #") + "\n";
  }
  return out;
}

// Models of fewer blocks are timed whole: lowering two periods instead saves little.
constexpr int kMinBlocksToExtrapolate = 8;

// The smallest period p of the blocks from the second period on (block i is block i - p for
// every i >= 2p; the first period may differ: it follows the embedding), with p dividing the
// block count and three periods at least; 0 when there is none.
int block_period(const std::vector<std::string>& texts) {
  const int n = static_cast<int>(texts.size());
  if (n < kMinBlocksToExtrapolate) return 0;
  for (int p = 1; 3 * p <= n; ++p) {
    if (n % p != 0) continue;
    bool repeats = true;
    for (int i = 2 * p; repeats && i < n; ++i)
      repeats = texts[static_cast<size_t>(i)] == texts[static_cast<size_t>(i - p)];
    if (repeats) return p;
  }
  return 0;
}

// x(n) from x at one and two periods, for n = (2 + m) periods.
double extrapolate(double one, double two, int64_t m) {
  return two + static_cast<double>(m) * (two - one);
}
int64_t extrapolate(int64_t one, int64_t two, int64_t m) { return two + m * (two - one); }

npu::CostCounts extrapolate(const npu::CostCounts& a, const npu::CostCounts& b, int64_t m) {
  npu::CostCounts c;
  for (int i = 0; i < npu::CostCounts::kPurposes; ++i) {
    c.dram_read[i] = extrapolate(a.dram_read[i], b.dram_read[i], m);
    c.dram_written[i] = extrapolate(a.dram_written[i], b.dram_written[i], m);
  }
  c.macs = extrapolate(a.macs, b.macs, m);
  c.vector_ops = extrapolate(a.vector_ops, b.vector_ops, m);
  c.barriers = extrapolate(a.barriers, b.barriers, m);
  c.instructions = extrapolate(a.instructions, b.instructions, m);
  c.dma = extrapolate(a.dma, b.dma, m);
  return c;
}

npu::CallCost extrapolate(const npu::CallCost& a, const npu::CallCost& b, int64_t m) {
  npu::CallCost c = b;  // the nodes: those of the two-period program
  c.seconds = extrapolate(a.seconds, b.seconds, m);
  c.core_seconds = extrapolate(a.core_seconds, b.core_seconds, m);
  c.dram_seconds = extrapolate(a.dram_seconds, b.dram_seconds, m);
  c.busy_dram_s = extrapolate(a.busy_dram_s, b.busy_dram_s, m);
  c.busy_mac_s = extrapolate(a.busy_mac_s, b.busy_mac_s, m);
  c.busy_vector_s = extrapolate(a.busy_vector_s, b.busy_vector_s, m);
  c.bound = npu::bound_of(c.busy_dram_s, c.busy_mac_s, c.busy_vector_s, c.core_seconds);
  c.total = extrapolate(a.total, b.total, m);
  for (size_t i = 0; i < c.cores.size() && i < a.cores.size(); ++i)
    c.cores[i] = extrapolate(a.cores[i], b.cores[i], m);
  return c;
}

npu::ModePrediction extrapolate(const npu::ModePrediction& a, const npu::ModePrediction& b,
                                int64_t m) {
  npu::ModePrediction p = b;
  p.ttft_s = extrapolate(a.ttft_s, b.ttft_s, m);
  p.decode_s = extrapolate(a.decode_s, b.decode_s, m);
  p.decode_end_s = extrapolate(a.decode_end_s, b.decode_end_s, m);
  p.prefill_dram_s = extrapolate(a.prefill_dram_s, b.prefill_dram_s, m);
  p.prefill_mac_s = extrapolate(a.prefill_mac_s, b.prefill_mac_s, m);
  p.prefill_vector_s = extrapolate(a.prefill_vector_s, b.prefill_vector_s, m);
  p.prefill_core_s = extrapolate(a.prefill_core_s, b.prefill_core_s, m);
  p.prefill_bound =
      npu::bound_of(p.prefill_dram_s, p.prefill_mac_s, p.prefill_vector_s, p.prefill_core_s);
  p.decode = extrapolate(a.decode, b.decode, m);
  p.bound = p.decode.bound;
  p.need_s = extrapolate(a.need_s, b.need_s, m);
  p.roofline_fraction = p.decode_s > 0 ? p.need_s / p.decode_s : 0.0;
  return p;
}

// Extrapolating over the vocabulary. The embedding, the head and the logits are tiled by
// rows of the vocabulary: with a vocabulary of at least kVocabToExtrapolate, the programs are
// lowered for two small vocabularies a step of kVocabStep rows apart, holding the same ragged
// last tile (V mod step) as the model's, and extrapolated linearly by whole steps. Real models
// (at most 262,208 ids among the shared configs) are below it and timed as before.
constexpr int64_t kVocabToExtrapolate = int64_t{1} << 20;
constexpr int64_t kVocabStep = int64_t{1} << 16;

/// The graphs whose programs stand for the model's and how to combine their predictions:
/// graphs[0..1] are one and two periods of blocks (or every block when `period` is 0) at the
/// model's vocabulary or, when `vocab` is set, at `vocab` rows, and graphs[2..3] the same at
/// `vocab` + kVocabStep rows.
struct Samples {
  std::vector<ir::Graph> graphs;
  int period = 0;
  int64_t vocab = 0;        ///< the smaller sampled vocabulary; 0: the model's
  int64_t more_blocks = 0;  ///< periods past the second
  int64_t more_steps = 0;   ///< vocabulary steps past the larger sample
};

StatusOr<ir::Graph> sample_graph(const frontend::HParams& full, const config::ResolvedConfig& cfg,
                                 int blocks, int64_t vocab) {
  frontend::HParams hp = full;
  if (vocab > 0) hp.vocab_size = vocab;
  QBC_ASSIGN_OR_RETURN(ir::Graph g, shape_graph(hp, cfg, blocks));
  return quant::shape_only(g, cfg.options);
}

/// The quantized graphs of one and two periods of blocks when `q`'s blocks repeat (and the
/// cut graphs' blocks are the full graph's), each at two small vocabularies when the model's
/// is large; empty when neither applies.
StatusOr<Samples> sample_graphs(const ir::Graph& q, const frontend::HParams& hp,
                                const config::ResolvedConfig& cfg) {
  Samples out;
  const int blocks = block_count(q);
  if (hp.num_hidden_layers != blocks) return out;
  if (hp.vocab_size >= kVocabToExtrapolate) {
    out.vocab = kVocabStep + hp.vocab_size % kVocabStep;
    out.more_steps = (hp.vocab_size - out.vocab) / kVocabStep - 1;
  }
  const std::vector<std::string> texts = block_texts(q, blocks);
  int p = block_period(texts);
  // Lowering costs about the weights' tiles: the cut graphs lower 3p blocks and the head twice
  // against every block and the head once. A head larger than the blocks saved (a vocabulary
  // of millions) is cheaper timed whole, unless it is sampled too.
  const double head = static_cast<double>(hp.vocab_size) * static_cast<double>(hp.hidden_size);
  const double saved =
      static_cast<double>(blocks - 3 * p) * static_cast<double>(hp.param_counts().per_block());
  if (out.vocab == 0 && head >= saved) p = 0;
  if (p == 0 && out.vocab == 0) return out;
  // Lowered vocabulary-major: for each vocabulary, one and two periods (or every block).
  auto build = [&](int period) -> StatusOr<bool> {
    out.graphs.clear();
    const std::vector<int64_t> vocabs =
        out.vocab > 0 ? std::vector<int64_t>{out.vocab, out.vocab + kVocabStep}
                      : std::vector<int64_t>{0};
    const std::vector<int> cuts =
        period > 0 ? std::vector<int>{period, 2 * period} : std::vector<int>{0};
    for (int64_t vocab : vocabs) {
      for (int k : cuts) {
        QBC_ASSIGN_OR_RETURN(ir::Graph qk, sample_graph(hp, cfg, k, vocab));
        if (k > 0) {
          const std::vector<std::string> cut = block_texts(qk, k);
          if (!std::equal(cut.begin(), cut.end(), texts.begin())) return false;
        }
        out.graphs.push_back(std::move(qk));
      }
    }
    return true;
  };
  QBC_ASSIGN_OR_RETURN(bool same_blocks, build(p));
  if (!same_blocks) {
    if (out.vocab == 0) return Samples();
    p = 0;  // the vocabulary is still sampled, over every block
    QBC_ASSIGN_OR_RETURN(same_blocks, build(0));
  }
  out.period = p;
  if (p > 0) out.more_blocks = blocks / p - 2;
  return out;
}

/// The model's figure from the samples' (ordered as Samples::graphs).
template <class T>
T combine(const Samples& s, const std::vector<T>& x) {
  if (s.vocab == 0) return extrapolate(x[0], x[1], s.more_blocks);
  if (s.period == 0) return extrapolate(x[0], x[1], s.more_steps);
  return extrapolate(extrapolate(x[0], x[2], s.more_steps), extrapolate(x[1], x[3], s.more_steps),
                     s.more_blocks);
}

}  // namespace

StatusOr<frontend::HParams> shape_hparams(const std::string& path) {
  std::error_code ec;
  if (ends_with(path, ".gguf")) {
    QBC_ASSIGN_OR_RETURN(frontend::ModelSource src, frontend::ModelSource::open(path));
    return src.hparams();
  }
  fs::path config = path;
  if (fs::is_directory(config, ec)) config /= "config.json";
  if (!fs::is_regular_file(config, ec))
    return not_found(path, ": no config.json (give a model folder, a config.json or a .gguf)");
  return frontend::load_hparams(config);
}

StatusOr<ir::Graph> shape_graph(const frontend::HParams& full, const config::ResolvedConfig& cfg,
                                int blocks) {
  frontend::HParams hp = full;
  if (blocks > 0 && blocks < hp.num_hidden_layers) {
    hp.num_hidden_layers = blocks;
    hp.layers.resize(static_cast<size_t>(blocks));
  }
  QBC_ASSIGN_OR_RETURN(ir::Graph g, frontend::build_decoder_graph(hp, import_options(cfg)));
  g.metadata["qbc.config"] = config::to_json(cfg.options);
  return g;
}

StatusOr<ir::Graph> shape_graph(const std::string& path, const config::ResolvedConfig& cfg) {
  QBC_ASSIGN_OR_RETURN(frontend::HParams hp, shape_hparams(path));
  return shape_graph(hp, cfg);
}

StatusOr<PlanResult> plan_model(const std::string& path, const config::ResolvedConfig& cfg,
                                PlanOptions options, bool extrapolate) {
  QBC_ASSIGN_OR_RETURN(const frontend::HParams hp, shape_hparams(path));
  QBC_ASSIGN_OR_RETURN(ir::Graph g, shape_graph(hp, cfg));
  options.hparams = extrapolate ? &hp : nullptr;
  QBC_ASSIGN_OR_RETURN(PlanResult r, plan(g, cfg, options));
  r.model_name = g.name();
  for (const auto& [name, w] : g.weights()) {
    if (w.role != ir::WeightRole::kHostEmbedding || w.type.dims.size() != 2) continue;
    r.host_embedding = host_embedding_plan(w.type.dims[0], w.type.dims[1], hp.torch_dtype,
                                           cfg.options.bit().embedding());
  }
  return r;
}

npu::CostParams cost_params(const config::TargetProfile& t) {
  npu::CostParams p;
  p.clock_hz = t.clock_mhz() * 1e6;
  p.int8_macs_per_cycle = static_cast<double>(t.int8_macs_per_cycle_per_core());
  p.int4_macs_per_cycle = static_cast<double>(t.int4_macs_per_cycle_per_core());
  p.int16_macs_per_cycle = static_cast<double>(t.int16_macs_per_cycle_per_core());
  p.vector_ops_per_cycle = static_cast<double>(t.vector_fp16_ops_per_cycle_per_core());
  p.dram_bytes_per_s = t.dram_bandwidth_gbps() * 1e9;
  p.dram_efficiency = t.dram_efficiency();
  p.mac_efficiency = t.mac_efficiency();
  p.dma_latency_s = t.dma_latency_ns() * 1e-9;
  p.issue_cycles = t.issue_cycles();
  p.barrier_s = t.barrier_ns() * 1e-9;
  p.host_s = t.host_overhead_us() * 1e-6;
  return p;
}

StatusOr<PlanResult> plan(const ir::Graph& shape, const config::ResolvedConfig& cfg,
                          const PlanOptions& options) {
  events::status("plan", "shape-only quantized graph of " + shape.name());
  // The first stages of compile's pipeline (driver/compile.h) on the shape graph: the fit
  // stage's shape-only quantized graph and backend options.
  QBC_ASSIGN_OR_RETURN(ShapeForBackend fit, shape_for_backend(shape, cfg));
  const ir::Graph& q = fit.graph;
  const npu::Options& base = fit.options;
  PlanResult r;
  r.target = base.target.name;
  r.trained_context = options.trained_context;
  r.trained_source = options.trained_source;
  // Repeating blocks and a large vocabulary: the programs of one and two periods (at two
  // small vocabularies) stand for the whole model's.
  Samples samples;
  if (options.hparams != nullptr && options.predictions) {
    QBC_ASSIGN_OR_RETURN(samples, sample_graphs(q, *options.hparams, cfg));
  }
  r.extrapolated_period = samples.period;
  r.extrapolated_vocab = samples.vocab;
  const std::vector<ir::Graph>& periods = samples.graphs;
  // The configured deployment: its memory plan is what compile would check.
  events::status("plan", "memory plan for " + r.target);
  QBC_ASSIGN_OR_RETURN(r.bundle, lower_shape(q, base, periods.empty()));
  r.memory = npu::memory_report(r.bundle);
  std::vector<isa::Bundle> base_periods;  // the configured deployment's programs per period
  for (const ir::Graph& g : periods) {
    QBC_ASSIGN_OR_RETURN(isa::Bundle b, lower_shape(g, base, true));
    base_periods.push_back(std::move(b));
  }
  if (!base_periods.empty()) {
    // The programs' size grows by the blocks and the vocabulary; SRAM holds the tiles of one
    // node at a time, the same in every block (and the head is in both cut graphs); with a
    // sampled vocabulary, the larger of the samples' per core.
    std::vector<int64_t> program_bytes, peak;
    for (const isa::Bundle& b : base_periods) {
      const npu::MemoryReport m = npu::memory_report(b);
      program_bytes.push_back(m.program_bytes);
      if (samples.vocab == 0 && program_bytes.size() != 2) continue;
      peak.resize(std::max(peak.size(), m.sram_peak.size()), 0);
      for (size_t c = 0; c < m.sram_peak.size(); ++c) peak[c] = std::max(peak[c], m.sram_peak[c]);
    }
    r.memory.sram_peak = peak;
    r.memory.program_bytes = combine(samples, program_bytes);
  }
  // The configured deployment's predictions from its programs of the periods, when it is one
  // mode (the scheme loop below reuses them), then those programs go: they are the largest
  // thing plan holds, and the loop lowers each other scheme's on top of them.
  std::vector<npu::ModePrediction> base_predictions, base_image_predictions;
  const npu::CostParams cp = cost_params(cfg.options.target());
  const int64_t image_tokens = options.vision.tokens;
  // A VLM's prompt with one image: the same programs timed for the longer prompt.
  auto predict_image = [&](const isa::Bundle& b, int32_t instances,
                           std::vector<npu::ModePrediction>* out) -> Status {
    if (image_tokens <= 0) return ok_status();
    const int64_t prompt = std::min<int64_t>(options.prompt_tokens + image_tokens, b.max_cache - 1);
    QBC_ASSIGN_OR_RETURN(npu::ModePrediction p,
                         npu::predict_mode(b, b.modes.front(), prompt, cp, instances));
    out->push_back(std::move(p));
    return ok_status();
  };
  if (options.predictions && base.modes.size() == 1) {
    for (const isa::Bundle& b : base_periods) {
      const int64_t prompt = std::min<int64_t>(options.prompt_tokens, b.max_cache - 1);
      QBC_ASSIGN_OR_RETURN(npu::ModePrediction p, npu::predict_mode(b, b.modes.front(), prompt, cp,
                                                                    base.modes.front().instances));
      base_predictions.push_back(std::move(p));
      QBC_RETURN_IF_ERROR(predict_image(b, base.modes.front().instances, &base_image_predictions));
    }
  }
  base_periods.clear();
  base_periods.shrink_to_fit();
  r.limits = npu::fit_limits(r.bundle, r.memory);
  r.fit = npu::check_fit(r.bundle, r.memory);
  r.max_cache = r.bundle.max_cache;
  r.batch = r.bundle.batch;
  r.chunk = r.bundle.chunk;
  r.span_programs = base.span_programs;
  // The largest context from the per-position term; below the configured one it is
  // confirmed by planning it (a graph is lowered for at most the cache it was built for).
  if (r.limits.max_cache > 0 && r.limits.max_cache < r.max_cache) {
    npu::Options at = base;
    for (int tries = 0; tries < 4 && r.limits.max_cache > 0; ++tries) {
      at.max_cache = r.limits.max_cache;
      at.chunk = std::min(base.chunk, at.max_cache);
      QBC_ASSIGN_OR_RETURN(isa::Bundle probe, lower_shape(q, at, false));
      const npu::MemoryReport m = npu::memory_report(probe);
      if (m.dram.total() <= m.device_bytes) break;
      const int64_t over = m.dram.total() - m.device_bytes;
      const int64_t per = std::max<int64_t>(1, m.kv_bytes_per_position * probe.batch);
      r.limits.max_cache -= std::max<int64_t>(1, (over + per - 1) / per);
    }
  }
  // Weights by MXQ part.
  QBC_ASSIGN_OR_RETURN(std::vector<int> split, split_boundaries(cfg, q));
  QBC_ASSIGN_OR_RETURN(auto ranges,
                       mxq::part_ranges(split, std::max(block_count(q), 1), "splitBlocks"));
  r.weights_by_part.assign(ranges.size(), 0);
  bool seen_block = false;
  for (const isa::Buffer& b : r.bundle.buffers) {
    if (b.space != isa::Space::kDram || b.purpose != isa::Purpose::kWeights) continue;
    seen_block = seen_block || b.block >= 0;
    r.weights_by_part[static_cast<size_t>(mxq::part_of_block(b.block, seen_block, ranges))] +=
        b.bytes;
  }
  if (!options.predictions) return r;

  std::vector<npu::ModeRequest> modes;
  const bool all =
      options.schemes.empty() && (config::is_default(cfg, "inferenceScheme") ||
                                  cfg.options.inference_scheme() == config::INFERENCE_SCHEME_ALL);
  const int cores = base.target.cores();
  auto want = [&](isa::Scheme s) {
    if (!options.schemes.empty())
      return std::find(options.schemes.begin(), options.schemes.end(), s) != options.schemes.end();
    if (all) return true;
    for (const npu::ModeRequest& m : base.modes)
      if (m.scheme == s) return true;
    return false;
  };
  // The scheme table's rows the target has cores for (single: one slot, a plan is per sequence).
  for (const isa::SchemeInfo& s : isa::kSchemes) {
    if (s.min_cores() <= cores && want(s.scheme))
      modes.push_back({s.scheme, s.cores_per_instance, s.instances_for(1)});
  }
  // One compile and prediction per scheme, two at a time (independent; each lowers the
  // same shape graph).
  auto one = [&](const npu::ModeRequest& m) -> StatusOr<SchemePlan> {
    npu::Options o = base;
    o.modes = {m};
    o.batch = std::max<int64_t>(base.batch, m.instances);
    // The configured deployment's own programs when it is this one mode.
    const bool same = base.modes.size() == 1 && base.modes[0].scheme == m.scheme &&
                      base.modes[0].cores == m.cores && base.modes[0].instances == m.instances &&
                      base.batch == o.batch;
    SchemePlan sp;
    sp.scheme = m.scheme;
    sp.cores = m.cores;
    sp.instances = m.instances;
    if (image_tokens > 0) sp.vision = vision_time(options.vision, cp, m.cores);
    // The programs of `g` for this scheme (the configured deployment's own when it is this
    // one mode), timed; with an image, also for the prompt and the image's tokens.
    std::vector<npu::ModePrediction> xi;
    auto predict = [&](const ir::Graph& g,
                       const isa::Bundle& configured) -> StatusOr<npu::ModePrediction> {
      isa::Bundle own;
      if (!same) {
        QBC_ASSIGN_OR_RETURN(own, lower_shape(g, o, true));
      }
      const isa::Bundle& b = same ? configured : own;
      const int64_t prompt = std::min<int64_t>(options.prompt_tokens, b.max_cache - 1);
      QBC_RETURN_IF_ERROR(predict_image(b, m.instances, &xi));
      return npu::predict_mode(b, b.modes.front(), prompt, cp, m.instances);
    };
    if (periods.empty()) {
      QBC_ASSIGN_OR_RETURN(sp.prediction, predict(q, r.bundle));
      if (!xi.empty()) sp.image_prediction = xi.front();
      return sp;
    }
    std::vector<npu::ModePrediction> x =
        same ? base_predictions : std::vector<npu::ModePrediction>();
    if (same) xi = base_image_predictions;
    for (size_t i = x.size(); i < periods.size(); ++i) {
      QBC_ASSIGN_OR_RETURN(npu::ModePrediction p, predict(periods[i], r.bundle));
      x.push_back(std::move(p));
    }
    sp.prediction = combine(samples, x);
    if (image_tokens > 0) sp.image_prediction = combine(samples, xi);
    return sp;
  };
  events::status("plan", "programs and cost of " + std::to_string(modes.size()) + " scheme(s)");
  std::vector<std::optional<StatusOr<SchemePlan>>> done(modes.size());
  std::atomic<size_t> next{0};
  auto worker = [&] {
    for (size_t i = next++; i < modes.size(); i = next++) done[i] = one(modes[i]);
  };
  {
    std::thread helper(worker);
    worker();
    helper.join();
  }
  for (auto& d : done) {
    if (!d->ok()) return d->status();
    r.schemes.push_back(std::move(d->value()));
  }
  return r;
}

namespace {

constexpr const char* kEstimateNote =
    "every TTFT, decode rate, roofline fraction and bound is an estimate of the target "
    "profile's cost model on the programs compile would emit (docs/performance.md), not a "
    "measurement";

}  // namespace

std::string training_warning(const PlanResult& r) {
  return "the cache of " + std::to_string(r.max_cache) +
         " positions is longer than the model was trained for (" +
         std::to_string(r.trained_context) + ", " + r.trained_source + "): positions past " +
         std::to_string(r.trained_context) +
         " are outside its training (expect the text to degrade there), and the static key "
         "scales must still cover them (coarser keys). It fits in memory; whether the model "
         "works that long is another question";
}

/// The second weight images of a plan's bundle (bit.prefill / bit.decode): the phase that
/// reads them (empty: none), how many linears have one and their DRAM bytes.
struct SecondImages {
  std::string phase;
  int64_t linears = 0, bytes = 0;
};

SecondImages second_images(const isa::Bundle& b) {
  SecondImages s;
  for (const isa::Buffer& buf : b.buffers) {
    for (const char* phase : {"prefill", "decode"}) {
      const std::string tail = std::string(".w.") + phase;
      if (buf.purpose != isa::Purpose::kWeights || buf.name.size() <= tail.size() ||
          buf.name.compare(buf.name.size() - tail.size(), tail.size(), tail) != 0)
        continue;
      s.phase = phase;
      ++s.linears;
      s.bytes += buf.bytes;
    }
  }
  return s;
}

std::string plan_json(const PlanResult& r) {
  nlohmann::ordered_json j;
  j["fits"] = r.limits.fits;
  j["target"] = r.target;
  j["max_cache_length"] = r.max_cache;
  j["batch_size"] = r.batch;
  j["prefill_chunk"] = r.chunk;
  j["span_programs"] = r.span_programs;
  j["memory"] = nlohmann::ordered_json::parse(npu::memory_json(r.memory));
  j["memory"]["weights_bytes_by_part"] = r.weights_by_part;
  if (const SecondImages si = second_images(r.bundle); si.linears > 0)
    j["memory"]["second_weight_image"] = {
        {"phase", si.phase}, {"linears", si.linears}, {"bytes", si.bytes}};
  if (r.host_embedding.rows > 0) {
    const HostEmbeddingPlan& e = r.host_embedding;
    j["memory"]["host_embedding"] = {{"rows", e.rows},
                                     {"hidden", e.hidden},
                                     {"dtype", e.i8                       ? "int8+fp32 row scales"
                                               : e.float_value_bytes == 2 ? "bf16"
                                                                          : "fp32"},
                                     {"bytes", e.bytes()},
                                     {"float_bytes", e.float_bytes()},
                                     {"i8_bytes", e.i8_bytes()},
                                     {"i8_saves_bytes", e.float_bytes() - e.i8_bytes()}};
  }
  j["max_context"] = r.limits.max_cache == INT64_MAX ? -1 : r.limits.max_cache;
  j["max_batch"] = r.limits.max_batch;
  j["trained_context"] = r.trained_context;
  j["trained_context_source"] = r.trained_source;
  j["past_training"] = past_training(r);
  j["warnings"] = nlohmann::ordered_json::array();
  if (past_training(r)) j["warnings"].push_back(training_warning(r));
  j["estimates"] = kEstimateNote;
  if (r.vision.present) {
    const VisionPlan& v = r.vision;
    j["vision"] = {
        {"estimate", true},
        {"tower", v.tower},
        {"projector", v.projector},
        {"layers", v.depth},
        {"width", v.width},
        {"parameters", v.parameters},
        {"weight_bytes", v.weight_bytes},
        {"source_bytes", v.source_bytes},
        {"image_size", v.image_size},
        {"tokens_per_image", v.tokens_per_image},
        {"dynamic_resolution", v.dynamic_resolution},
        {"rows", v.work.rows},
        {"layers_run", v.work.layers},
        {"macs_8bit", v.work.macs_i8},
        {"macs_16bit", v.work.macs_i16},
        {"vector_ops", v.work.vector_ops},
        {"dram_traffic_bytes",
         v.work.weight_bytes * v.work.views + v.work.activation_traffic_bytes},
        {"views_per_image", v.work.views},
        {"activation_bytes", v.work.activation_bytes},
        {"method", "analytic (the tower is not lowered by plan)"},
        {"dram_bytes", vision_dram_bytes(v)},
        {"fits_with_text", r.memory.dram.total() + vision_dram_bytes(v) <= r.memory.device_bytes}};
  }
  j["schemes"] = nlohmann::ordered_json::array();
  for (const SchemePlan& s : r.schemes) {
    const npu::ModePrediction& p = s.prediction;
    nlohmann::ordered_json e;
    e["scheme"] = isa::scheme_name(s.scheme);
    e["cores"] = s.cores;
    e["instances"] = s.instances;
    e["estimate"] = true;
    e["prompt_tokens"] = p.prompt_tokens;
    e["ttft_ms"] = p.ttft_s * 1e3;
    e["decode_tok_s"] = p.decode_s > 0 ? 1.0 / p.decode_s : 0.0;
    e["decode_tok_s_at_end"] = p.decode_end_s > 0 ? 1.0 / p.decode_end_s : 0.0;
    e["roofline_fraction"] = p.roofline_fraction;
    e["bound"] = npu::bound_name(p.bound);
    e["prefill_bound"] = npu::bound_name(p.prefill_bound);
    e["decode_dram_bytes"] = p.decode.total.dram_bytes();
    e["decode_macs"] = p.decode.total.macs;
    if (r.vision.present && r.vision.work.tokens > 0) {
      e["vision_ms"] = s.vision.seconds * 1e3;
      e["vision_bound"] = npu::bound_name(s.vision.bound);
      e["image_prompt_tokens"] = s.image_prediction.prompt_tokens;
      e["ttft_with_image_ms"] = (s.vision.seconds + s.image_prediction.ttft_s) * 1e3;
    }
    j["schemes"].push_back(std::move(e));
  }
  const Recommendation rec = recommend(r);
  if (!rec.scheme.empty()) {
    j["recommendation"] = {{"scheme", rec.scheme},
                           {"fastest_decode", rec.fastest_decode},
                           {"best_ttft", rec.best_ttft},
                           {"highest_throughput", rec.throughput},
                           {"break_even_tokens", rec.break_even_tokens},
                           {"reason", rec.reason}};
  }
  return j.dump(2) + "\n";
}

std::string plan_text(const PlanResult& r) {
  std::ostringstream os;
  char line[256];
  os << "plan for target '" << r.target << "': " << r.batch << " sequence"
     << (r.batch == 1 ? "" : "s") << " of " << r.max_cache << " positions, prefill chunk "
     << r.chunk;
  if (r.span_programs)
    os << " (span programs: an image's tokens attend to each other, each image one call)";
  os << "\n";
  os << "memory (DRAM)\n";
  if (r.weights_by_part.size() > 1) {
    for (size_t p = 0; p < r.weights_by_part.size(); ++p) {
      std::snprintf(line, sizeof(line), "  weights part %zu %14lld  %s\n", p,
                    static_cast<long long>(r.weights_by_part[p]),
                    npu::human_bytes(r.weights_by_part[p]).c_str());
      os << line;
    }
  }
  const isa::DramPlan& d = r.memory.dram;
  const std::pair<const char*, int64_t> rows[] = {{"weights", d.weights},
                                                  {"kv cache", d.kv},
                                                  {"activations", d.activations},
                                                  {"scratch", d.scratch},
                                                  {"io", d.io},
                                                  {"reserve", d.reserve},
                                                  {"total", d.total()},
                                                  {"device", r.memory.device_bytes}};
  for (const auto& [name, bytes] : rows) {
    std::snprintf(line, sizeof(line), "  %-14s %14lld  %s\n", name, static_cast<long long>(bytes),
                  npu::human_bytes(bytes).c_str());
    os << line;
  }
  if (const SecondImages si = second_images(r.bundle); si.linears > 0) {
    os << "  of the weights, " << npu::human_bytes(si.bytes) << " are the " << si.phase
       << " programs' own image of " << si.linears << " linears (bit." << si.phase
       << ".weight); the " << (si.phase == "decode" ? "prefill" : "decode")
       << " programs read the bit.transformer image\n";
  }
  int64_t peak = 0;
  for (int64_t p : r.memory.sram_peak) peak = std::max(peak, p);
  std::snprintf(line, sizeof(line), "  SRAM peak %s of %s per core; program %s\n",
                npu::human_bytes(peak).c_str(), npu::human_bytes(r.memory.sram_bytes).c_str(),
                npu::human_bytes(r.memory.program_bytes).c_str());
  os << line;
  if (r.host_embedding.rows > 0) {
    const HostEmbeddingPlan& e = r.host_embedding;
    const char* dtype = e.i8 ? "int8 + row scales" : e.float_value_bytes == 2 ? "bf16" : "fp32";
    std::snprintf(line, sizeof(line), "host embedding %lld x %lld %s: %s",
                  static_cast<long long>(e.rows), static_cast<long long>(e.hidden), dtype,
                  npu::human_bytes(e.bytes()).c_str());
    os << line;
    if (e.i8)
      os << " (float: " << npu::human_bytes(e.float_bytes()) << ")\n";
    else
      os << " (bit.embedding 8: " << npu::human_bytes(e.i8_bytes()) << ", saves "
         << npu::human_bytes(e.float_bytes() - e.i8_bytes()) << ")\n";
  }
  os << (r.limits.fits ? "fits in memory" : "DOES NOT FIT") << ": " << npu::human_bytes(d.total())
     << " of " << npu::human_bytes(r.memory.device_bytes);
  if (r.limits.max_cache == INT64_MAX) {
    os << "; the KV cache does not grow with the context (sliding windows only)";
  } else {
    os << "; largest maxCacheLength that fits " << r.limits.max_cache;
    if (r.trained_context > 0) os << " (the model was trained for " << r.trained_context << ")";
  }
  os << "; largest batchSize " << r.limits.max_batch << "\n";
  if (r.trained_context > 0) {
    os << "model trained for " << r.trained_context << " positions (" << r.trained_source
       << "); planned " << r.max_cache << "\n";
  }
  if (past_training(r)) os << "WARNING: " << training_warning(r) << "\n";
  os << vision_plan_text(r.vision);
  if (r.vision.present) {
    const int64_t total = r.memory.dram.total() + vision_dram_bytes(r.vision);
    os << "with the vision part: " << npu::human_bytes(total) << " of "
       << npu::human_bytes(r.memory.device_bytes) << " (text "
       << npu::human_bytes(r.memory.dram.total()) << " + vision weights "
       << npu::human_bytes(r.vision.weight_bytes) << " + activations "
       << npu::human_bytes(r.vision.work.activation_bytes) << ")"
       << (total > r.memory.device_bytes ? ": DOES NOT FIT" : "") << "\n";
  }
  if (!r.schemes.empty()) {
    os << "estimates (" << kEstimateNote << "):\n";
    std::snprintf(line, sizeof(line), "%-8s %12s %10s %12s %12s %9s  %s\n", "scheme",
                  "cores x inst", "TTFT ms", "decode tok/s", "at end tok/s", "roofline", "bound");
    os << line;
    for (const SchemePlan& s : r.schemes) {
      const npu::ModePrediction& p = s.prediction;
      const std::string cores = std::to_string(s.cores) + " x " + std::to_string(s.instances);
      std::snprintf(line, sizeof(line), "%-8s %12s %10.1f %12.2f %12.2f %8.1f%%  %s (prefill %s)\n",
                    isa::scheme_name(s.scheme), cores.c_str(), p.ttft_s * 1e3,
                    p.decode_s > 0 ? 1.0 / p.decode_s : 0.0,
                    p.decode_end_s > 0 ? 1.0 / p.decode_end_s : 0.0, 100.0 * p.roofline_fraction,
                    npu::bound_name(p.bound), npu::bound_name(p.prefill_bound));
      os << line;
    }
    os << "cores x inst: cores per instance x instances; TTFT for "
       << r.schemes.front().prediction.prompt_tokens
       << " prompt tokens; decode right after the prompt and with the cache full; multi: per "
          "sequence with its 4 instances running; roofline: unavoidable DRAM bytes (weights, KV "
          "read and written) at the effective bandwidth over the step time\n";
    os << vision_schemes_text(r);
    const Recommendation rec = recommend(r);
    os << "recommended: " << rec.reason << "\n";
  }
  return os.str();
}

}  // namespace qbc::driver
