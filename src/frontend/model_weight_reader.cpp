// frontend::model_weight_reader: the WeightReader over a frontend::ModelSource.
#include "qbc/frontend/model_weight_reader.h"

namespace qbc::frontend {

ir::WeightReader model_weight_reader(const ModelSource& source) {
  return [&source](const ir::Weight& w, std::vector<float>* out) -> Status {
    if (w.source != ir::WeightSource::kModel) {
      return failed_precondition("weight '", w.name, "' lives in the MBLT sidecar ('", w.tensor,
                                 "'), not in the model ", source.path().string());
    }
    return source.read_f32(w.tensor, out);
  };
}

}  // namespace qbc::frontend
