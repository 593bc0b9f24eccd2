// `qbc parse`'s files (see qbc/driver/parse_model.h).
#include "qbc/driver/parse_model.h"

#include <filesystem>
#include <system_error>

#include "qbc/driver/model_loader.h"
#include "qbc/driver/vision_import.h"
#include "qbc/ir/serialize.h"

namespace qbc::driver {
namespace {

/// Writes `g` to `path` with `producer` and describes the file.
StatusOr<ParsedFile> write_graph(ir::Graph& g, const std::string& path,
                                 const std::string& producer) {
  g.metadata["producer"] = producer;
  QBC_RETURN_IF_ERROR(ir::save(g, path));
  ParsedFile f;
  f.path = path;
  std::error_code ec;
  f.bytes = static_cast<int64_t>(std::filesystem::file_size(path, ec));
  f.nodes = g.nodes().size();
  f.weights = g.weights().size();
  return f;
}

}  // namespace

StatusOr<std::optional<ParsedFile>> write_vision_mblt(const std::string& model,
                                                      const std::string& output,
                                                      const std::string& producer,
                                                      int64_t image_size) {
  QBC_ASSIGN_OR_RETURN(std::optional<ir::Graph> vision, import_vision_graph(model, image_size));
  if (!vision) return std::optional<ParsedFile>();
  QBC_ASSIGN_OR_RETURN(ParsedFile f, write_graph(*vision, vision_mblt_path(output), producer));
  const auto it = vision->metadata.find("vision.image_size");
  if (it != vision->metadata.end()) f.image_size = it->second;
  return std::optional<ParsedFile>(std::move(f));
}

StatusOr<ParsedFile> write_model_mblt(const std::string& model, const config::ResolvedConfig& cfg,
                                      const std::string& output, const std::string& producer) {
  QBC_ASSIGN_OR_RETURN(LoadedModel m, import_model(model, cfg));
  return write_graph(m.graph, output, producer);
}

}  // namespace qbc::driver
