// The WeightReader over a model opened with ModelSource: how the stages that run or
// rewrite an imported graph read its `model` weights from the HF folder or GGUF file.
#pragma once

#include "qbc/frontend/model_source.h"
#include "qbc/ir/weight_reader.h"

namespace qbc::frontend {

/// A WeightReader over a model opened with frontend::ModelSource (HF folder or GGUF): reads a
/// `model` weight's HF tensor through ModelSource::read_f32 (dequantised, q/k un-permuted).
/// Sidecar weights are not in the model: reading one fails with kFailedPrecondition naming it.
/// `source` must outlive the reader.
ir::WeightReader model_weight_reader(const ModelSource& source);

}  // namespace qbc::frontend
