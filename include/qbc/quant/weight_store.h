// The float weights a quantization pipeline works on: the source model's weights,
// overlaid by the ones passes rewrote or created (in memory, float32, row-major).
// Passes read and write weights only through here; quantize writes every rewritten
// weight that the final graph still uses into the MBLT's sidecar.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "qbc/ir/graph.h"
#include "qbc/ref/evaluator.h"
#include "qbc/support/status.h"

namespace qbc::quant {

class WeightStore {
 public:
  /// `source` reads weights that no pass has rewritten; it must outlive the store.
  explicit WeightStore(ref::WeightReader source);

  /// The current float32 data of `w` (rewritten or from the source).
  Status read(const ir::Weight& w, std::vector<float>* out) const;
  /// Replaces (or creates) the data of weight `name`; the size must match the graph's
  /// weight type when the weight exists (checked by the verifier of the pass pipeline).
  void write(const std::string& name, std::vector<float> values);
  /// True when a pass rewrote or created `name`.
  bool rewritten(const std::string& name) const;
  /// Rewritten weights by name.
  const std::map<std::string, std::vector<float>>& rewritten_weights() const { return overlay_; }
  /// A WeightReader over this store (the store must outlive it).
  ref::WeightReader reader() const;

 private:
  ref::WeightReader source_;
  std::map<std::string, std::vector<float>> overlay_;
};

/// Checks every rewritten weight still in `g` against its declared element count.
Status check_rewritten_sizes(const ir::Graph& g, const WeightStore& store);

}  // namespace qbc::quant
