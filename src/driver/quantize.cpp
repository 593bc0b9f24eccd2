#include "qbc/driver/quantize.h"

#include <chrono>
#include <filesystem>

#include "qbc/calib/calib_data.h"
#include "qbc/driver/generate.h"
#include "qbc/ir/serialize.h"
#include "qbc/quant/pass.h"
#include "qbc/quant/quantize.h"
#include "qbc/quant/transforms.h"
#include "qbc/support/logging.h"

namespace qbc::driver {

StatusOr<quant::SampleSource> calibration_source(const LoadedModel& model,
                                                 const config::ResolvedConfig& config, size_t* n) {
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
    QBC_ASSIGN_OR_RETURN(calib::CalibDataset ds,
                         calib::make_random_calib(table, "inputs_embeds", static_cast<size_t>(o.calibration().num_samples()),
                                                  seq, static_cast<uint64_t>(o.seed())));
    *n = ds.size();
    log("calib").warn("calibrating on random tokens (useRandomCalib): accuracy numbers are meaningless");
    return quant::SampleSource([ds](size_t i, std::vector<float>* embeds, int64_t* s) { return ds.load(i, embeds, s); });
  }
  if (o.calib_data_paths_size() == 0) {
    return invalid_argument("no calibration data: give calibDataPaths (--calib DIR, from `qbc calib prepare`) "
                            "or useRandomCalib (--use-random-calib) for a smoke test");
  }
  // Headers of every file are checked here, before any calibration work.
  std::vector<std::string> paths(o.calib_data_paths().begin(), o.calib_data_paths().end());
  QBC_ASSIGN_OR_RETURN(calib::CalibDataset ds, calib::open_calib_inputs(paths, calib::calib_input_specs(model.graph)));
  size_t count = ds.size();
  if (o.calibration().num_samples() > 0 && static_cast<size_t>(o.calibration().num_samples()) < count) {
    count = static_cast<size_t>(o.calibration().num_samples());  // calibration.numSamples caps the set
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
  return quant::SampleSource([ds](size_t i, std::vector<float>* embeds, int64_t* s) { return ds.load(i, embeds, s); });
}

Status quantize_to(const LoadedModel& model, const config::ResolvedConfig& config, const std::string& out_mblt,
                   const std::string& producer) {
  QBC_RETURN_IF_ERROR(quant::check_supported(config.options));
  if (!is_mblt_path(out_mblt)) return invalid_argument("output ", out_mblt, " must end in .mblt");
  const auto t0 = std::chrono::steady_clock::now();
  // Everything that can be refused is checked before any work.
  QBC_ASSIGN_OR_RETURN(std::vector<std::unique_ptr<quant::Pass>> transforms,
                       quant::pre_calibration_transforms(config.options));
  size_t n = 0;
  QBC_ASSIGN_OR_RETURN(quant::SampleSource samples, calibration_source(model, config, &n));
  const LoadedModel* m = &model;
  quant::WeightStore store([m](const ir::Weight& w, std::vector<float>* out) { return read_weight(*m, w, out); });
  ir::Graph graph = model.graph;
  quant::PassContext ctx;
  ctx.graph = &graph;
  ctx.weights = &store;
  ctx.options = &config.options;
  std::vector<quant::PassRecord> records;
  QBC_RETURN_IF_ERROR(quant::run_passes(transforms, ctx, &records));
  QBC_ASSIGN_OR_RETURN(std::unique_ptr<ref::Session> session, ref::Session::create(graph, store.reader()));
  events::status("calib", "collecting activation statistics on " + std::to_string(n) + " samples");
  QBC_ASSIGN_OR_RETURN(quant::CalibStats stats,
                       quant::collect_stats(graph, *session, n, samples, config.options.calibration().mode()));
  session.reset();
  events::status("quant", "quantizing weights (round to nearest)");
  QBC_ASSIGN_OR_RETURN(quant::QuantizeResult q, quant::quantize_rtn(graph, stats, store.reader(), config.options));
  // Float weights a transform rewrote (folded norms, rotated embeddings) travel in the sidecar.
  for (const auto& [name, data] : store.rewritten_weights()) {
    const ir::Weight* w = q.graph.find_weight(name);
    if (w == nullptr) continue;
    q.sidecar.push_back(frontend::make_tensor(w->tensor, frontend::DType::kF32, w->type.dims, data));
  }
  q.graph.metadata["producer"] = producer;
  q.graph.metadata["qbc.config"] = config::to_json(config.options);
  q.graph.metadata["sidecar"] = std::filesystem::path(sidecar_path(out_mblt)).filename().string();
  const std::string side = sidecar_path(out_mblt);
  QBC_RETURN_IF_ERROR(frontend::write_safetensors(side, q.sidecar, {{"producer", producer}}));
  Status saved = ir::save(q.graph, out_mblt);
  if (!saved.ok()) {
    std::error_code ec;
    std::filesystem::remove(side, ec);
    return saved;
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  log("quant").info("quantized {} linears ({} left in float) in {:.2f} s: {} + {}", q.quantized_linears,
                    q.float_linears, secs, out_mblt, side);
  return ok_status();
}

}  // namespace qbc::driver
