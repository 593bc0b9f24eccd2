// Internal to the backend: the state one compile builds up (buffers, DRAM regions, SRAM
// stage allocation, per-core instruction streams) and the emit helpers the op lowerings use.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "qbc/ir/graph.h"
#include "qbc/isa/program.h"
#include "qbc/npu/compile.h"

namespace qbc::npu {

/// Where an MBLT value lives in DRAM: rows of `width` elements `stride` bytes apart,
/// starting `col` bytes into each row of buffer `buf` (slices alias their input).
struct ValueLoc {
  int32_t buf = -1;
  int64_t col = 0, stride = 0, width = 0;
  isa::DType type = isa::DType::kF16;
};

/// One core's stream under construction.
class Stream {
 public:
  explicit Stream(std::vector<isa::Instr>* code) : code_(code) {}
  void emit(isa::Op op, isa::Queue q, int32_t node, int32_t pass);
  /// Opens a loop; returns its variable. Loops nest; close with end_loop.
  int begin_loop(const isa::Expr& trip, int32_t node, int32_t pass);
  void end_loop();
  int depth() const { return static_cast<int>(open_.size()); }

 private:
  std::vector<isa::Instr>* code_;
  std::vector<size_t> open_;
};

/// Tile sizes of a qlinear, shared by every mode and phase (the weight image is tiled once).
struct LinearTiles {
  int64_t nt = 0, kt = 0;  ///< channels and inputs per weight tile
  int64_t mt = 0;          ///< rows per activation tile (prefill; decode uses 1)
};

/// Tile sizes of an attention node.
struct AttnTiles {
  int64_t br = 1, bc = 16;
};

}  // namespace qbc::npu
