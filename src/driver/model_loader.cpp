#include "qbc/driver/model_loader.h"

#include <algorithm>
#include <filesystem>

#include "qbc/driver/deployment.h"
#include "qbc/driver/source_types.h"
#include "qbc/frontend/importer.h"
#include "qbc/ir/serialize.h"
#include "qbc/ir/verifier.h"
#include "qbc/support/logging.h"

namespace qbc::driver {
namespace fs = std::filesystem;

std::string sidecar_path(const std::string& mblt_path) {
  fs::path p(mblt_path);
  p.replace_extension(".weights.safetensors");
  return p.string();
}

bool is_mblt_path(const std::string& path) {
  return fs::path(path).extension() == ".mblt";
}

StatusOr<LoadedModel> import_model(const std::string& path, const config::ResolvedConfig& config) {
  events::status("frontend", "opening " + path);
  StatusOr<frontend::ModelSource> src = frontend::ModelSource::open(path);
  if (!src.ok()) return src.status();
  auto source = std::make_shared<frontend::ModelSource>(std::move(src).value());
  QBC_RETURN_IF_ERROR(source->validate());
  for (const std::string& t : source->unexpected_tensors()) {
    log("frontend").warn("{}: tensor '{}' is not used by the {} graph", path, t,
                         source->hparams().architecture);
  }
  QBC_ASSIGN_OR_RETURN(ir::Graph g,
                       frontend::build_decoder_graph(source->hparams(), import_options(config)));
  g.source_path = fs::weakly_canonical(fs::absolute(source->path())).string();
  g.source_format = std::string(source->format());
  events::status("frontend", "hashing source files");
  QBC_ASSIGN_OR_RETURN(std::vector<frontend::SourceFileInfo> files, source->files());
  for (const frontend::SourceFileInfo& f : files) {
    g.files.push_back(ir::SourceFile{fs::weakly_canonical(f.path).string(), f.size_bytes, f.xxh3_128});
  }
  g.metadata["config.json"] = source->config_json_text();
  g.metadata["qbc.config"] = config::to_json(config.options);
  record_source_dtypes(*source, &g);
  QBC_RETURN_IF_ERROR(ir::verify(g).with_context("import of ", path));
  return LoadedModel{std::move(g), std::move(source), nullptr};
}

StatusOr<LoadedModel> open_model(const std::string& path, const config::ResolvedConfig& config) {
  if (!is_mblt_path(path)) return import_model(path, config);
  QBC_ASSIGN_OR_RETURN(ir::Graph g, ir::load(path));
  StatusOr<frontend::ModelSource> src = frontend::ModelSource::open(g.source_path);
  if (!src.ok()) {
    return src.status().with_context(path, ": cannot open the source model it was parsed from");
  }
  // The weights must still be the ones the graph was made from.
  for (const ir::SourceFile& f : g.files) {
    std::error_code ec;
    const uintmax_t size = fs::file_size(f.path, ec);
    if (ec || size != f.size) {
      return failed_precondition(path, ": source file ", f.path, " changed since parse (size ",
                                 ec ? std::string("unreadable") : std::to_string(size), ", recorded ",
                                 f.size, "); parse the model again");
    }
  }
  LoadedModel m{std::move(g), std::make_shared<frontend::ModelSource>(std::move(src).value()), nullptr};
  const bool has_sidecar = std::any_of(m.graph.weights().begin(), m.graph.weights().end(), [](const auto& kv) {
    return kv.second.source == ir::WeightSource::kSidecar;
  });
  if (has_sidecar) {
    const std::string side = sidecar_path(path);
    StatusOr<frontend::SafetensorsCheckpoint> ck = frontend::SafetensorsCheckpoint::open(side);
    if (!ck.ok()) return ck.status().with_context(path, ": its weights sidecar");
    m.sidecar = std::make_shared<frontend::SafetensorsCheckpoint>(std::move(ck).value());
  }
  return m;
}

Status read_weight(const LoadedModel& model, const ir::Weight& w, std::vector<float>* out) {
  if (w.source == ir::WeightSource::kSidecar) {
    if (!model.sidecar) return failed_precondition("weight '@", w.name, "' lives in a sidecar that is not open");
    QBC_RETURN_IF_ERROR(model.sidecar->read_f32(w.tensor, out).with_context("weight '@", w.name, "'"));
  } else {
    QBC_RETURN_IF_ERROR(model.source->read_f32(w.tensor, out).with_context("weight '@", w.name, "'"));
  }
  const int64_t expected = w.type.num_elements();
  if (static_cast<int64_t>(out->size()) != expected) {
    return invalid_argument("weight '@", w.name, "' (", w.tensor, "): ", out->size(), " elements, expected ",
                            expected, " for ", w.type.to_string());
  }
  return ok_status();
}

}  // namespace qbc::driver
