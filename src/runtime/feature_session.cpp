// FeatureSession (qbc/runtime/feature_session.h): writes the inputs' fp16 rows, runs the
// prefill program of the selected mode once over all rows (start 0), reads the fp32 rows.
#include "qbc/runtime/feature_session.h"

#include <cstring>
#include <utility>
#include <vector>

#include "fp16_rows.h"
#include "qbc/numerics/fp16.h"
#include "values.h"

namespace qbc::runtime {

StatusOr<std::unique_ptr<FeatureSession>> FeatureSession::create(
    std::shared_ptr<const isa::Bundle> bundle, const DeviceOptions& options) {
  if (bundle == nullptr) return invalid_argument("no bundle");
  const isa::Bundle& b = *bundle;
  if (b.kind != isa::BundleKind::kFeatures || b.feature_inputs.empty() || b.output < 0)
    return invalid_argument("bundle: not a feature bundle (a decoder runs in an NpuSession)");
  const auto holds = [&](int32_t id, int64_t need, int64_t rows,
                         const std::string& what) -> Status {
    if (id < 0 || static_cast<size_t>(id) >= b.buffers.size())
      return invalid_argument("bundle: ", what, ": buffer #", id, " does not exist");
    if (b.buffers[static_cast<size_t>(id)].bytes < need)
      return invalid_argument("bundle: ", what, ": buffer '",
                              b.buffers[static_cast<size_t>(id)].name, "' holds fewer than the ",
                              need, " bytes of ", rows, " rows");
    return ok_status();
  };
  for (const isa::FeatureInput& in : b.feature_inputs) {
    if (in.width < 1 || in.stride < 2 * in.width)
      return invalid_argument("bundle: feature input '", in.name, "': width ", in.width,
                              ", row stride ", in.stride);
    QBC_RETURN_IF_ERROR(holds(in.buffer, (b.chunk - 1) * in.stride + 2 * in.width, b.chunk,
                              "feature input '" + in.name + "'"));
  }
  if (b.vocab < 1 || b.output_stride < 4 * b.vocab)
    return invalid_argument("bundle: feature output width ", b.vocab, ", row stride ",
                            b.output_stride);
  if (b.output_rows < 1 || b.output_rows > b.chunk || b.chunk % b.output_rows != 0)
    return invalid_argument("bundle: ", b.output_rows, " feature output rows for ", b.chunk,
                            " input rows");
  QBC_RETURN_IF_ERROR(holds(b.output, (b.output_rows - 1) * b.output_stride + 4 * b.vocab,
                            b.output_rows, "feature output"));
  QBC_ASSIGN_OR_RETURN(std::shared_ptr<Device> device, Device::create(std::move(bundle), options));
  return std::unique_ptr<FeatureSession>(new FeatureSession(std::move(device)));
}

int64_t FeatureSession::rows() const { return device_->bundle().chunk; }
int64_t FeatureSession::output_rows() const { return device_->bundle().output_rows; }
int64_t FeatureSession::width() const { return device_->bundle().vocab; }

Status FeatureSession::forward(const std::vector<std::vector<float>>& inputs,
                               std::vector<float>* out) {
  const isa::Bundle& b = device_->bundle();
  const int64_t rows = b.chunk;
  if (inputs.size() != b.feature_inputs.size())
    return invalid_argument(inputs.size(), " inputs; the bundle takes ", b.feature_inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    const isa::FeatureInput& in = b.feature_inputs[i];
    if (static_cast<int64_t>(inputs[i].size()) != rows * in.width)
      return invalid_argument("input '", in.name, "': ", inputs[i].size(), " values, not ", rows,
                              " rows of ", in.width);
    uint8_t* dst =
        device_->dram(device_->address(in.buffer, 0), (rows - 1) * in.stride + 2 * in.width);
    if (dst == nullptr) return internal_error("input '", in.name, "' outside DRAM");
    std::vector<float> row(static_cast<size_t>(in.width));
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < in.width; ++c)
        row[static_cast<size_t>(c)] =
            numerics::round_fp16(inputs[i][static_cast<size_t>(r * in.width + c)]);
      store_f16(row.data(), in.width, dst + r * in.stride);
    }
  }
  QBC_RETURN_IF_ERROR(device_->run(isa::Phase::kPrefill, 0, 0, rows));
  const int64_t out_rows = b.output_rows;
  const uint8_t* src =
      device_->dram(device_->address(b.output, 0), (out_rows - 1) * b.output_stride + 4 * b.vocab);
  if (src == nullptr) return internal_error("feature output outside DRAM");
  out->resize(static_cast<size_t>(out_rows * b.vocab));
  for (int64_t r = 0; r < out_rows; ++r)
    load(src + r * b.output_stride, b.vocab, out->data() + r * b.vocab);
  return ok_status();
}

}  // namespace qbc::runtime
