// Runs a feature bundle (isa::BundleKind::kFeatures, docs/npu.md "Feature bundles"): a graph
// with named row inputs and an fp32 feature output, e.g. a vision tower, one call per image.
// Everything it needs comes from the bundle (no compiler header): the inputs' io buffers,
// widths and row strides, the output's width and stride, and the rows per call (chunk).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "qbc/isa/program.h"
#include "qbc/runtime/device.h"
#include "qbc/support/status.h"

namespace qbc::runtime {

class FeatureSession {
 public:
  /// kInvalidArgument when the bundle is not a feature bundle (naming its kind) or its io
  /// buffers do not hold chunk rows; the device's errors otherwise.
  static StatusOr<std::unique_ptr<FeatureSession>> create(std::shared_ptr<const isa::Bundle> bundle,
                                                          const DeviceOptions& options);
  /// One call: `inputs` in the bundle's input order (Bundle::feature_inputs, the graph's
  /// input order), each rows x width fp32 values rounded to fp16 at the NPU boundary, rows
  /// the bundle's chunk; `out` receives output_rows() x the output width, fp32. kInvalidArgument
  /// naming the input whose size is wrong.
  Status forward(const std::vector<std::vector<float>>& inputs, std::vector<float>* out);
  /// Input rows per call, output rows per call (the input rows, or fewer when the graph
  /// merges rows, e.g. Qwen2-VL's 2x2 merger: a quarter) and the output width.
  int64_t rows() const;
  int64_t output_rows() const;
  int64_t width() const;
  Device& device() { return *device_; }

 private:
  explicit FeatureSession(std::shared_ptr<Device> device) : device_(std::move(device)) {}
  std::shared_ptr<Device> device_;
};

}  // namespace qbc::runtime
