// `qbc parse`: a model imported into MBLT and written to disk, with the vision tower of a
// vision-language model in its own MBLT next to the language one (docs/multimodal.md).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "qbc/config/config.h"
#include "qbc/support/status.h"

namespace qbc::driver {

/// One MBLT file `qbc parse` wrote, for its summary line.
struct ParsedFile {
  std::string path;
  int64_t bytes = 0;  ///< the file's size (-1 when it cannot be read back)
  size_t nodes = 0;
  size_t weights = 0;      ///< weights referenced in the source
  std::string image_size;  ///< a vision graph: the image side it was built for
};

/// The vision graph of the HF folder `model` (import_vision_graph at `image_size`, the
/// configuration's vision.imageSize; 0: the model's default) written to
/// vision_mblt_path(output), `producer` recorded as its producer. nullopt when `model` has no
/// vision tower; the errors of import_vision_graph (kUnimplemented naming a tower not built
/// yet) and of the write otherwise.
StatusOr<std::optional<ParsedFile>> write_vision_mblt(const std::string& model,
                                                      const std::string& output,
                                                      const std::string& producer,
                                                      int64_t image_size = 0);

/// The model at `model` (an HF folder or .gguf) imported with `cfg` (import_model) and
/// written to `output`, `producer` recorded as its producer.
StatusOr<ParsedFile> write_model_mblt(const std::string& model, const config::ResolvedConfig& cfg,
                                      const std::string& output, const std::string& producer);

}  // namespace qbc::driver
