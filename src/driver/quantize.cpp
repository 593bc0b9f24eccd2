#include "qbc/driver/quantize.h"

#include <chrono>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>

#include "qbc/calib/calib_data.h"
#include "qbc/driver/generate.h"
#include "qbc/driver/imported_weights.h"
#include "qbc/driver/model_context.h"
#include "qbc/ir/host_inputs.h"
#include "qbc/ir/serialize.h"
#include "qbc/quant/embedding_i8.h"
#include "qbc/quant/pass.h"
#include "qbc/quant/pipeline.h"
#include "qbc/quant/quantize.h"
#include "qbc/quant/stage_passes.h"
#include "qbc/support/file_util.h"
#include "qbc/support/logging.h"
#include "qbc/tensorfile/safetensors_spill.h"

namespace qbc::driver {

Status check_calibration_inputs(const config::ResolvedConfig& config) {
  const config::CompileOptions& o = config.options;
  if (o.use_random_calib()) return ok_status();
  if (o.calib_data_paths_size() == 0) {
    return invalid_argument(
        "no calibration data: give calibDataPaths (--calib DIR, from `qbc calib prepare`) "
        "or useRandomCalib (--use-random-calib) for a smoke test");
  }
  std::error_code ec;
  for (const std::string& p : o.calib_data_paths()) {
    if (!std::filesystem::exists(p, ec)) {
      auto it = config.origins.find("calibDataPaths");
      return not_found(p, ": no such file or folder (calibDataPaths, from ",
                       it == config.origins.end() ? std::string("default") : it->second.to_string(),
                       ")");
    }
  }
  return ok_status();
}

StatusOr<quant::SampleSource> calibration_source(const LoadedModel& model,
                                                 const config::ResolvedConfig& config, size_t* n,
                                                 quant::DeepStackSource* deepstack) {
  const config::CompileOptions& o = config.options;
  const int64_t seq = o.llm().attributes().calibration().use_full_seq_length()
                          ? o.llm().attributes().max_sequence_length()
                          : o.calibration().seq_length();
  if (o.use_random_calib()) {
    // Seeded random token ids embedded with the model's own table (calib::make_random_calib).
    QBC_ASSIGN_OR_RETURN(const ir::Weight* emb, calib::find_host_embedding(model.graph));
    auto table = std::make_shared<calib::EmbeddingTable>();
    QBC_RETURN_IF_ERROR(read_weight(model, *emb, &table->data));
    table->vocab = emb->type.dims[0];
    table->hidden = emb->type.dims[1];
    QBC_ASSIGN_OR_RETURN(
        calib::CalibDataset ds,
        calib::make_random_calib(table, "inputs_embeds",
                                 static_cast<size_t>(o.calibration().num_samples()), seq,
                                 static_cast<uint64_t>(o.seed())));
    *n = ds.size();
    log("calib").warn(
        "calibrating on random tokens (useRandomCalib): accuracy numbers are meaningless");
    // Embed every sample now, so the (vocab x hidden, 1 GB for a 128K vocabulary) table
    // is freed before the model is run.
    auto rows = std::make_shared<std::vector<std::pair<std::vector<float>, int64_t>>>(ds.size());
    for (size_t i = 0; i < ds.size(); ++i)
      QBC_RETURN_IF_ERROR(ds.load(i, &(*rows)[i].first, &(*rows)[i].second));
    return quant::SampleSource([rows](size_t i, std::vector<float>* embeds, int64_t* s) -> Status {
      if (i >= rows->size())
        return invalid_argument("calibration sample ", i, " of ", rows->size());
      *embeds = (*rows)[i].first;
      *s = (*rows)[i].second;
      return ok_status();
    });
  }
  if (o.calib_data_paths_size() == 0) {
    return invalid_argument(
        "no calibration data: give calibDataPaths (--calib DIR, from `qbc calib prepare`) "
        "or useRandomCalib (--use-random-calib) for a smoke test");
  }
  // Headers of every file are checked here, before any calibration work.
  std::vector<std::string> paths(o.calib_data_paths().begin(), o.calib_data_paths().end());
  QBC_ASSIGN_OR_RETURN(calib::CalibDataset ds,
                       calib::open_calib_inputs(paths, calib::calib_input_specs(model.graph)));
  size_t count = ds.size();
  if (o.calibration().num_samples() > 0 &&
      static_cast<size_t>(o.calibration().num_samples()) < count) {
    count =
        static_cast<size_t>(o.calibration().num_samples());  // calibration.numSamples caps the set
  }
  *n = count;
  // Every sample must fit the KV cache the model is compiled for.
  int64_t cache = 0;
  for (const ir::Node& node : model.graph.nodes()) {
    if (node.op == ir::Op::kAttention) cache = node.attrs.get_int("max_cache");
  }
  for (size_t i = 0; i < count && i < ds.samples().size() && cache > 0; ++i) {
    for (const auto& [name, in] : ds.samples()[i].inputs) {
      if (in.seq > cache) {
        return invalid_argument(in.path.string(), ": calibration sample of ", in.seq,
                                " tokens does not fit the compiled KV cache of ", cache,
                                " (llm.attributes.maxCacheLength); use shorter samples "
                                "(qbc calib prepare --seq-len) or a larger maxCacheLength");
      }
    }
  }
  // Qwen3-VL: the DeepStack levels. A sample gives all of them or none (calib::open_calib_inputs
  // refuses a map that gives some); none is zero rows.
  std::vector<std::string> levels;
  for (const calib::CalibInputSpec& in : ds.inputs())
    if (ir::is_deepstack_input(in.name)) levels.push_back(in.name);
  size_t given = 0;
  for (size_t i = 0; i < count && !levels.empty(); ++i)
    given += ds.has_input(i, levels.front()) ? 1 : 0;
  if (!levels.empty() && given == 0)
    log("calib").warn(
        "the calibration samples give no DeepStack rows ({}); the language model "
        "is calibrated with zero rows there (qbc calib prepare --images writes them)",
        levels.front());
  if (deepstack != nullptr && given > 0) {
    *deepstack = [ds, levels](size_t i, int64_t seq, std::vector<std::vector<float>>* rows) {
      rows->clear();
      if (!ds.has_input(i, levels.front())) return ok_status();
      for (const std::string& name : levels) {
        std::vector<float> v;
        int64_t s = 0;
        QBC_RETURN_IF_ERROR(ds.load_input(i, name, &v, &s));
        if (s != seq)
          return invalid_argument("calibration sample ", i, ": '", name, "' has ", s,
                                  " tokens, the embeddings ", seq);
        rows->push_back(std::move(v));
      }
      return ok_status();
    };
  }
  return quant::SampleSource(
      [ds](size_t i, std::vector<float>* embeds, int64_t* s) { return ds.load(i, embeds, s); });
}

namespace {

/// What the calibration ran on, for the output's metadata.
std::string calibration_provenance(const config::CompileOptions& o, size_t n, int64_t tokens) {
  nlohmann::json j;
  j["samples"] = n;
  j["tokens"] = tokens;
  j["mode"] = o.calibration().mode();
  if (o.use_random_calib()) {
    j["source"] = "useRandomCalib";
    j["seed"] = o.seed();
  } else {
    j["source"] = nlohmann::json::array();
    for (const std::string& p : o.calib_data_paths()) {
      nlohmann::json e;
      e["path"] = p;
      const std::filesystem::path prov = std::filesystem::path(p) / "provenance.json";
      std::error_code ec;
      if (std::filesystem::is_regular_file(prov, ec)) {
        auto text = read_text_file(prov.string());
        if (text.ok()) e["provenance"] = nlohmann::json::parse(*text, nullptr, false);
      }
      j["source"].push_back(e);
    }
  }
  return j.dump();
}

/// A KV cache compiled for more positions than the model was trained on costs key
/// precision: the static key scales must cover every rotation up to max_cache. Only a
/// length the user set gets here: one from a preset is fitted to the model (model_context.h).
void warn_cache_past_training(const LoadedModel& model) {
  if (!model.source) return;
  const TrainedContext trained = trained_context(model.source->hparams());
  for (const ir::Node& n : model.graph.nodes()) {
    if (n.op != ir::Op::kAttention) continue;
    const int64_t cache = n.attrs.get_int("max_cache");
    if (trained.positions > 0 && cache > trained.positions) {
      log("quantize")
          .warn(
              "the KV cache is compiled for {} positions (llm.attributes.maxCacheLength) but the "
              "model's {} is {}: positions past {} are outside what it was trained for, and the "
              "static key scales must still cover every rotation up to {} (coarser keys; "
              "docs/numerics.md). Set maxCacheLength (and maxSequenceLength, or --context) to {} "
              "unless you need the longer cache.",
              cache, trained.source, trained.positions, trained.positions, cache,
              trained.positions);
    }
    return;
  }
}

/// 4-bit keys with static scales alone lose most of the attention (stories260K: top-1 64.6 %
/// against KV8's 97.3 %, docs/quantization.md "KV4 in the backend"); the recipes that keep it
/// are named.
void warn_static_kv4(const config::CompileOptions& options) {
  const auto& kv = options.bit().kv_cache();
  if (kv.key() != 4 || kv.key_token_scale()) return;
  log("quantize")
      .warn(
          "bit.kvCache.key=4 with static key scales only: measured on stories260K, top-1 agreement "
          "64.6 % against KV8's 97.3 %. For a usable 4-bit cache add the KV4 rules "
          "(-c configs/examples/kv4.yaml: 94.3 %, KV8's size), or keep keys at 8 bits and values "
          "at "
          "4 (-c configs/examples/k8v4.yaml: 96.0 %, 0.76 x KV8's bytes); docs/quantization.md "
          "\"KV4 in the backend\".");
}

}  // namespace

StatusOr<QuantizedModel> quantize(const LoadedModel& model, const config::ResolvedConfig& config,
                                  const std::string& side, const QuantizeRun& run) {
  // A pre-quantized checkpoint keeps its codes where qbc's weights can hold them; the passes
  // that would change those weights are then off (driver/imported_weights.h).
  QBC_ASSIGN_OR_RETURN(std::optional<ImportedWeights> imported,
                       imported_weights(model, config.options));
  const config::CompileOptions options = imported && imported->kept() > 0
                                             ? without_weight_passes(config.options, *imported)
                                             : config.options;
  if (imported && !imported->skipped_passes.empty()) {
    log("quant").warn("{} of {} linears keep the checkpoint's codes: {} skipped", imported->kept(),
                      imported->imported(), nlohmann::json(imported->skipped_passes).dump());
  }
  QBC_RETURN_IF_ERROR(quant::check_supported(options));
  const std::optional<quant::PhaseWeightKeys> phase = quant::phase_weight_keys(options);
  if (imported && imported->kept() > 0 && phase) {
    return unimplemented("bit.", ir::image_phase_name(phase->phase), ".weight ",
                         phase->keys->weight(), ": ", imported->kept(),
                         " linears keep the codes imported from a pre-quantized ",
                         "checkpoint, and a second image needs the float weights (compile from "
                         "the float model)");
  }
  const auto t0 = std::chrono::steady_clock::now();
  // Everything that can be refused is checked before any work: the pipeline, its passes'
  // options, --disable-pass names, and every pass's needs (below, before the first pass).
  QBC_ASSIGN_OR_RETURN(std::vector<pass::PipelineEntry> entries, quant::quant_pipeline(options));
  QBC_ASSIGN_OR_RETURN(pass::PassManager<quant::PassContext> pipeline,
                       quant::build_pipeline(entries, options, run.instrumentation));
  size_t n = 0;
  quant::DeepStackSource raw_deepstack;
  QBC_ASSIGN_OR_RETURN(quant::SampleSource raw_samples,
                       calibration_source(model, config, &n, &raw_deepstack));
  warn_cache_past_training(model);
  warn_static_kv4(options);

  const LoadedModel* m = &model;
  quant::WeightStore store(
      [m](const ir::Weight& w, std::vector<float>* out) { return read_weight(*m, w, out); });
  ir::Graph graph = model.graph;
  tensorfile::SafetensorsSpillWriter sidecar(side);

  // Rewrites of the model's input that passes make (spinR1 rotates the embeddings)
  // apply to the calibration samples from the moment they are made: a pass sees the
  // input of the model as the passes before it left it (the spinR1 check, before
  // spinR1, the raw one).
  std::vector<quant::InputTransform> input_transforms;
  const quant::SampleSource samples = [&raw_samples, &input_transforms](size_t i,
                                                                        std::vector<float>* embeds,
                                                                        int64_t* seq) -> Status {
    QBC_RETURN_IF_ERROR(raw_samples(i, embeds, seq));
    for (const quant::InputTransform& t : input_transforms) QBC_RETURN_IF_ERROR(t(embeds, *seq));
    return ok_status();
  };
  // DeepStack rows join the residual stream, so the input's rewrites (spinR1's x·R) apply.
  const quant::DeepStackSource deepstack = [&raw_deepstack, &input_transforms](
                                               size_t i, int64_t seq,
                                               std::vector<std::vector<float>>* levels) -> Status {
    QBC_RETURN_IF_ERROR(raw_deepstack(i, seq, levels));
    for (std::vector<float>& rows : *levels)
      for (const quant::InputTransform& t : input_transforms) QBC_RETURN_IF_ERROR(t(&rows, seq));
    return ok_status();
  };
  quant::FixedWeightMap fixed;
  if (imported) fixed = imported->fixed;
  quant::PassContext ctx;
  ctx.graph = &graph;
  ctx.weights = &store;
  ctx.options = &options;
  ctx.samples = &samples;
  ctx.num_samples = n;
  if (raw_deepstack) ctx.deepstack = &deepstack;
  ctx.session.threads = run.threads;
  ctx.fixed = &fixed;
  ctx.input_transforms = &input_transforms;
  ctx.checkpoints = run.checkpoints;
  // Weights are spilled to disk as they are made: memory stays at one layer.
  ctx.sink = [&sidecar](tensorfile::TensorToWrite t) { return sidecar.add(std::move(t)); };
  // Act-order linears kept as a column permutation: the float weights follow it.
  if (imported) QBC_RETURN_IF_ERROR(permute_act_order_inputs(*imported, ctx));

  std::vector<quant::PassRecord> stages;
  QBC_RETURN_IF_ERROR(pipeline.run(ctx, &stages));

  // Output: the sidecar (with the float weights a transform rewrote), then the graph.
  const auto tw = std::chrono::steady_clock::now();
  const int64_t tokens = quant::stats_tokens(ctx.owned_stats);
  std::vector<float> data;
  for (const std::string& name : store.rewritten_names()) {
    const ir::Weight* w = graph.find_weight(name);
    if (w == nullptr) continue;
    QBC_RETURN_IF_ERROR(store.read(*w, &data));
    QBC_RETURN_IF_ERROR(sidecar.add(
        tensorfile::make_tensor(w->tensor, tensorfile::DType::kF32, w->type.dims, data)));
  }
  graph.metadata["producer"] = run.producer;
  graph.metadata["qbc.config"] = config::to_json(options);
  quant::record_embedding_bits(options, graph);
  graph.metadata["qbc.calibration"] = calibration_provenance(options, n, tokens);
  graph.metadata["sidecar"] = std::filesystem::path(side).filename().string();
  if (imported) graph.metadata["qbc.imported_weights"] = imported->json();
  QBC_RETURN_IF_ERROR(sidecar.finish({{"producer", run.producer}}));
  // The quantized model in memory: the graph, the source it was opened from, and the
  // sidecar mapped back (its codes are served to the backend as stored).
  StatusOr<frontend::SafetensorsCheckpoint> ck = frontend::SafetensorsCheckpoint::open(side);
  if (!ck.ok()) {
    std::error_code ec;
    std::filesystem::remove(side, ec);
    return ck.status().with_context("the quantized weights ", side);
  }
  stages.push_back({"write", true,
                    std::chrono::duration<double>(std::chrono::steady_clock::now() - tw).count()});
  for (const quant::PassRecord& r : stages)
    log("quant").info("stage {:<14} {:8.2f} s", r.name, r.seconds);

  QuantizedModel q;
  QuantizeSummary& summary = q.summary;
  summary.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  summary.quantized_linears = ctx.quantized_linears;
  summary.float_linears = ctx.float_linears;
  if (ctx.second_images > 0 && phase) {
    const std::string name = ir::image_phase_name(phase->phase);
    summary.second_images = std::to_string(ctx.second_images) + " with their own " +
                            std::to_string(phase->keys->weight()) + "-bit " + name +
                            " image (bit." + name + ".weight)";
  }
  summary.samples = n;
  summary.tokens = tokens;
  summary.passes = stages;
  summary.sidecar = side;
  if (model.source) {
    std::set<std::string> kept;
    if (imported) {
      for (const auto& [node, f] : imported->fixed) kept.insert(node);
    }
    summary.source_types = source_type_outcomes(*model.source, model.graph, graph, kept);
  }
  if (imported) {
    summary.imported_text = imported->summary_text();
    summary.imported_json = imported->json();
  }
  std::error_code ec;
  summary.sidecar_bytes = static_cast<int64_t>(std::filesystem::file_size(side, ec));
  log("quant").info("quantized {} linears ({} left in float) in {:.2f} s: {}",
                    summary.quantized_linears, summary.float_linears, summary.seconds, side);
  q.model = LoadedModel{std::move(graph), model.source,
                        std::make_shared<frontend::SafetensorsCheckpoint>(std::move(ck).value())};
  return q;
}

Status save_quantized(QuantizedModel& q, const std::string& out_mblt) {
  if (!is_mblt_path(out_mblt)) return invalid_argument("output ", out_mblt, " must end in .mblt");
  if (sidecar_path(out_mblt) != q.summary.sidecar) {
    return internal_error("save_quantized: ", out_mblt, " is not the graph of the sidecar ",
                          q.summary.sidecar);
  }
  const auto t0 = std::chrono::steady_clock::now();
  QBC_RETURN_IF_ERROR(ir::save(q.model.graph, out_mblt));
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  QuantizeSummary& s = q.summary;
  s.seconds += secs;
  for (pass::PassRecord& r : s.passes)
    if (r.name == "write") r.seconds += secs;
  s.mblt = out_mblt;
  std::error_code ec;
  s.mblt_bytes = static_cast<int64_t>(std::filesystem::file_size(out_mblt, ec));
  return ok_status();
}

StatusOr<QuantizeSummary> quantize_to(const LoadedModel& model,
                                      const config::ResolvedConfig& config,
                                      const std::string& out_mblt, const QuantizeRun& run) {
  if (!is_mblt_path(out_mblt)) return invalid_argument("output ", out_mblt, " must end in .mblt");
  QBC_ASSIGN_OR_RETURN(QuantizedModel q, quantize(model, config, sidecar_path(out_mblt), run));
  if (Status saved = save_quantized(q, out_mblt); !saved.ok()) {
    q.model.sidecar.reset();
    std::error_code ec;
    std::filesystem::remove(q.summary.sidecar, ec);
    return saved;
  }
  return std::move(q.summary);
}

}  // namespace qbc::driver
