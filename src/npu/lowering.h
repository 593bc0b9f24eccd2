// Internal to the backend: value places, tile sizes, per-core instruction streams and the
// emit helpers the op lowerings share (lower_rows.cpp, lower_linear.cpp,
// lower_attention.cpp; the dispatcher is lower.cpp). The helpers live in stream.cpp, not in
// the dispatcher, so that no lowering file depends on another.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "qbc/ir/graph.h"
#include "qbc/isa/program.h"
#include "qbc/npu/compile.h"
#include "qbc/npu/plan.h"

namespace qbc::npu {

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

class Context;  // backend.h

/// One SRAM stage allocation on one core: a bump allocator whose buffers are added to the
/// bundle, so their sizes are functions of tile sizes only.
class SramStage {
 public:
  /// `used`: the plan stage's most used bytes, raised by each allocation.
  SramStage(isa::Bundle* b, int32_t core, int64_t align, std::string prefix, int64_t* used)
      : b_(b), core_(core), align_(align), prefix_(std::move(prefix)), used_(used) {}
  int32_t alloc(const std::string& name, isa::DType t, int64_t bytes, std::vector<int64_t> shape);

 private:
  isa::Bundle* b_;
  int32_t core_;
  int64_t align_;
  std::string prefix_;
  int64_t* used_;
  int64_t top_ = 0;
};

/// Lowering one program on core `c` of `P` cooperating cores: where the instructions go and
/// the counters that name SRAM stages and barriers.
struct CoreLowering {
  Context& cx;
  Stream& s;
  int c = 0, P = 1;
  int64_t cap = 1;     ///< rows per call: the chunk (prefill) or 1 (decode)
  std::string prefix;  ///< "<scheme>.<phase>." of the program
  int32_t bar = 0;     ///< the next barrier id
  int stage = 0;       ///< the current SRAM stage (buffer names)
  bool span = false;   ///< a span program: each call is one bidirectional span
  /// The program's phase: which weight image a linear with two reads (NodePlan::linear_for).
  isa::Phase phase = isa::Phase::kPrefill;

  /// A fresh SRAM stage of this core named after `name`, for stage `stage` of the plan
  /// (whose `used` bytes it records).
  SramStage sram(const std::string& name, int32_t stage) const;
  /// Rows of node `id`'s value in this call: the call's rows (Sym::kSeq), over the node's
  /// row_div past a merge_rows (a feature call's rows are a multiple of it).
  isa::Expr rows(int id) const;
  /// A barrier of the P cores (nothing on one core), for MBLT node `node`.
  void barrier(int node);
  /// Rows [row0, row0 + rows) of value `v` into SRAM buffer `dst`, or back from `src`.
  isa::Dma load_rows(const ValueLoc& v, int32_t dst, const isa::Expr& row0,
                     const isa::Expr& rows) const;
  isa::Dma store_rows(const ValueLoc& v, int32_t src, const isa::Expr& row0,
                      const isa::Expr& rows) const;
};

/// A reference to buffer `buf` at byte offset `off`.
inline isa::Ref ref(int32_t buf, isa::Expr off = isa::Expr(0)) {
  return isa::Ref{buf, std::move(off)};
}

/// Row tiles dealt round-robin: core c of P takes tiles c, c + P, ... of ceil(rows / mt).
isa::Expr round_robin_trip(const isa::Expr& rows, int64_t mt, int c, int P);

/// A full_attention's distinct segment lengths, ascending (empty without segments): its
/// attention descriptors after the node's own, one per length, with that length as the
/// window (plan_tiles.cpp; lower_attention.cpp picks them).
std::vector<int64_t> segment_lengths(const ir::Node& n);

/// The op lowerings, one stage of node `id` on one core each.
void lower_rows(const ir::Node& n, int id, CoreLowering& L);       // lower_rows.cpp
Status lower_linear(const ir::Node& n, int id, CoreLowering& L);   // lower_linear.cpp
void lower_attention(const ir::Node& n, int id, CoreLowering& L);  // lower_attention.cpp

}  // namespace qbc::npu
