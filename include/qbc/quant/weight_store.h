// The float weights a quantization pipeline works on: the source model's weights,
// overlaid by the ones passes rewrote or created (float32, row-major). Passes read and
// write weights only through here; quantize writes every rewritten weight that the
// final graph still uses into the MBLT's sidecar.
//
// Rewritten weights live in an anonymous scratch file, not in memory: a rotation pass
// rewrites every linear of the model, and holding them would cost the whole model in
// fp32 (5 GB for a 1B model) where block-by-block passes otherwise need one block.
#pragma once

#include <cstdint>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "qbc/ir/graph.h"
#include "qbc/ir/weight_reader.h"
#include "qbc/support/status.h"

namespace qbc::quant {

class WeightStore {
 public:
  /// `source` reads weights that no pass has rewritten; it must outlive the store.
  explicit WeightStore(ir::WeightReader source);
  ~WeightStore();
  WeightStore(const WeightStore&) = delete;
  WeightStore& operator=(const WeightStore&) = delete;

  /// The current float32 data of `w` (rewritten or from the source).
  Status read(const ir::Weight& w, std::vector<float>* out) const;
  /// Replaces (or creates) the data of weight `name`. A failure to store it (scratch
  /// space exhausted) is sticky: every later read() and write() returns it.
  Status write(const std::string& name, const std::vector<float>& values);
  /// True when a pass rewrote or created `name`.
  bool rewritten(const std::string& name) const;
  /// Names of the rewritten weights, sorted.
  std::vector<std::string> rewritten_names() const;
  /// Element count of rewritten weight `name` (0 when it was not rewritten).
  int64_t rewritten_size(const std::string& name) const;
  /// Every rewritten weight with its data (tests and small models only: it is all in memory).
  std::map<std::string, std::vector<float>> rewritten_weights() const;
  /// The first storage failure, or OK (checked after every pass by run_passes).
  const Status& status() const { return error_; }
  /// A WeightReader over this store (the store must outlive it).
  ir::WeightReader reader() const;

 private:
  struct Slot {
    uint64_t offset = 0;  ///< In floats.
    uint64_t count = 0;
  };
  Status read_slot(const std::string& name, const Slot& slot, std::vector<float>* out) const;
  ir::WeightReader source_;
  std::FILE* scratch_ = nullptr;
  uint64_t end_ = 0;  ///< Floats used in the scratch file.
  std::map<std::string, Slot> slots_;
  Status error_;
};

/// Checks every rewritten weight still in `g` against its declared element count.
Status check_rewritten_sizes(const ir::Graph& g, const WeightStore& store);

}  // namespace qbc::quant
