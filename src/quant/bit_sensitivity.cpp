// linear_bit_errors (qbc/quant/bit_sensitivity.h): the round-to-nearest output error of every
// decoder-block linear at 4 and at 8 bits, on calibration rows, block by block.
#include "qbc/quant/bit_sensitivity.h"

#include <algorithm>
#include <map>

#include "qbc/quant/block_runner.h"
#include "qbc/quant/gptq.h"
#include "qbc/quant/quantize.h"
#include "qbc/support/logging.h"
#include "transform_util.h"

namespace qbc::quant {
namespace {

constexpr size_t kSamples = 4;    // calibration samples run (the first ones)
constexpr int64_t kTokens = 128;  // tokens of each sample run (its first)
/// e8 / e4: the squared ratio of the code steps over one range, (2^4 − 1)² / (2^8 − 1)².
constexpr double kEightOverFour = (15.0 * 15.0) / (255.0 * 255.0);

/// A linear's weight, [rows, cols] row-major.
struct LinearWeight {
  int64_t rows = 0, cols = 0;
  std::vector<float> v;
};

/// The weight of linear `id`.
StatusOr<LinearWeight> linear_weight(const ir::Graph& g, const ir::WeightReader& weights,
                                     ir::ValueId id) {
  const std::string name = weight_operand(g, id, 1);
  const ir::Weight* w = name.empty() ? nullptr : g.find_weight(name);
  if (w == nullptr || w->type.dims.size() != 2)
    return failed_precondition("bit sensitivity: linear '", g.node(id).name,
                               "' has no [out, in] weight");
  LinearWeight m;
  m.rows = w->type.dims[0];
  m.cols = w->type.dims[1];
  QBC_RETURN_IF_ERROR(weights(*w, &m.v));
  if (static_cast<int64_t>(m.v.size()) != m.rows * m.cols)
    return data_loss("bit sensitivity: weight '", name, "' holds ", m.v.size(), " values for [",
                     m.rows, ", ", m.cols, "]");
  return m;
}

/// The round-to-nearest quantizer at `bits` as the configuration shapes it.
GptqOptions quantizer(const config::CompileOptions& options, int bits, int64_t in) {
  GptqOptions o;
  o.bits = bits;
  o.group_size = weight_group(options, in);
  o.zero_point = options.bit().weight_zero_point();
  o.mse_clip = options.hessian_quant().apply() && options.hessian_quant().attributes().mse_clip();
  o.num_threads = 0;
  return o;
}

/// The linears of block `b`, in graph order.
std::vector<ir::ValueId> block_linears(const BlockNodes& b) {
  std::vector<ir::ValueId> out;
  for (ir::ValueId id : {b.q, b.k, b.v, b.qkv, b.o, b.gate, b.up, b.gate_up, b.down})
    if (id >= 0) out.push_back(id);
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

double LinearBitError::density() const {
  const double n = static_cast<double>(rows) * static_cast<double>(cols);
  return n > 0 ? (e4 - e8) / n : 0.0;
}

StatusOr<std::vector<LinearBitError>> linear_bit_errors(
    const ir::Graph& g, const WeightStore& weights, const SampleSource& samples, size_t num_samples,
    const config::CompileOptions& options, const ref::SessionOptions& session,
    const DeepStackSource* deepstack) {
  const std::vector<BlockNodes> blocks = block_nodes(g);
  const size_t n = std::min(num_samples, kSamples);
  if (n == 0) return invalid_argument("bit sensitivity: no calibration samples");
  // The first kTokens tokens of each sample: a prefix keeps the runs' cost independent of the
  // calibration's sequence length (whole samples with DeepStack rows, which are per token).
  const SampleSource prefix = [&samples, deepstack](size_t i, std::vector<float>* embeds,
                                                    int64_t* seq) -> Status {
    QBC_RETURN_IF_ERROR(samples(i, embeds, seq));
    if (deepstack == nullptr && *seq > kTokens) {
      embeds->resize(static_cast<size_t>(embeds->size() / static_cast<size_t>(*seq) *
                                         static_cast<size_t>(kTokens)));
      *seq = kTokens;
    }
    return ok_status();
  };
  QBC_ASSIGN_OR_RETURN(BlockRunner runner, BlockRunner::create(g, n, prefix, session, deepstack));
  const ir::WeightReader reader = weights.reader();
  std::vector<LinearBitError> out;
  for (size_t s = 0; s < runner.num_segments(); ++s) {
    const BlockNodes* b = block_among(g, blocks, runner.node_names(s));
    const std::vector<ir::ValueId> linears = b ? block_linears(*b) : std::vector<ir::ValueId>{};
    if (linears.empty()) {
      if (s + 1 < runner.num_segments()) QBC_RETURN_IF_ERROR(runner.advance(s, reader));
      continue;
    }
    const ir::Graph& seg = runner.segment(s);
    if (seg.outputs().size() != 1)
      return internal_error("bit sensitivity: segment ", s, " has ", seg.outputs().size(),
                            " outputs");
    const std::string block_out = seg.node(seg.outputs().front()).name;
    // The block's weights are read (and converted to f32) once, not once per run: 1 + 7 runs
    // of a Llama block would otherwise spend half their time reading.
    std::map<std::string, std::vector<float>> cache;
    const ir::WeightReader cached = [&](const ir::Weight& x, std::vector<float>* v) -> Status {
      auto it = cache.find(x.name);
      if (it == cache.end()) {
        std::vector<float> d;
        QBC_RETURN_IF_ERROR(reader(x, &d));
        it = cache.emplace(x.name, std::move(d)).first;
      }
      *v = it->second;
      return ok_status();
    };
    // The float run: the block's output per sample.
    std::vector<std::vector<float>> reference(runner.num_samples());
    double energy = 0;
    std::vector<float> act;
    std::vector<int64_t> shape;
    QBC_RETURN_IF_ERROR(runner.run(
        s, cached,
        [&](size_t sample, ref::Session& sess) -> Status {
          QBC_RETURN_IF_ERROR(sess.activation(block_out, &reference[sample], &shape));
          for (float v : reference[sample]) energy += static_cast<double>(v) * v;
          return ok_status();
        },
        /*keep_outputs=*/true));
    for (ir::ValueId id : linears) {
      const std::string wname = weight_operand(g, id, 1);
      QBC_ASSIGN_OR_RETURN(const LinearWeight w, linear_weight(g, cached, id));
      QBC_ASSIGN_OR_RETURN(const GptqResult q4,
                           rtn_quantize(w.v, w.rows, w.cols, quantizer(options, 4, w.cols)));
      const std::vector<float> four = dequantize(q4);
      const ir::WeightReader with_four = [&](const ir::Weight& x, std::vector<float>* v) {
        if (x.name != wname) return cached(x, v);
        *v = four;
        return ok_status();
      };
      double err = 0;
      QBC_RETURN_IF_ERROR(runner.run(s, with_four, [&](size_t sample, ref::Session& sess) {
        QBC_RETURN_IF_ERROR(sess.activation(block_out, &act, &shape));
        const std::vector<float>& ref = reference[sample];
        if (act.size() != ref.size())
          return internal_error("bit sensitivity: '", block_out, "' changed size");
        for (size_t k = 0; k < act.size(); ++k) {
          const double d = static_cast<double>(act[k]) - ref[k];
          err += d * d;
        }
        return ok_status();
      }));
      LinearBitError e;
      e.node = g.node(id).name;
      e.rows = w.rows;
      e.cols = w.cols;
      e.e4 = energy > 0 ? err / energy : 0.0;
      e.e8 = e.e4 * kEightOverFour;
      log("quantize")
          .debug("bit sensitivity: '{}' [{} x {}]: block output error {:.4g} at 4 bits", e.node,
                 e.rows, e.cols, e.e4);
      out.push_back(std::move(e));
    }
    if (s + 1 < runner.num_segments()) QBC_RETURN_IF_ERROR(runner.advance_from_last_run(s));
  }
  if (out.empty())
    return failed_precondition("bit sensitivity: ", g.name(),
                               " has no decoder-block linears to choose bits for");
  return out;
}

}  // namespace qbc::quant
