// One core's instruction stream as an interpreter state: program counter, the stack of
// active loops with their variables, and the runtime values. It runs instructions in
// program order (one valid schedule of the core's three queues: dependency tokens need no
// action, they order the queues the NPU runs concurrently) until a barrier or the end.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core.h"
#include "qbc/isa/program.h"
#include "qbc/support/status.h"

namespace qbc::runtime {

/// "prefill core 1 instr 17 (matmul, node 'blk.0.attn.q_proj')": where an error happened.
std::string instr_label(const isa::Bundle& b, const isa::Program& p, size_t core, size_t pc);

class Interpreter {
 public:
  /// Stream `core` of program `p`, with loop variables 0..loop_vars-1.
  Interpreter(const isa::Bundle& b, const isa::Program& p, size_t core, int32_t loop_vars);

  /// Starts the stream from its first instruction with the runtime values of one call.
  void start(int64_t start, int64_t seq, int slot);
  /// Runs up to and including the next barrier (*barrier = it) or to the end (*barrier =
  /// nullptr). `core`'s env must be this interpreter's env().
  Status run(Core& core, const isa::Barrier** barrier);
  bool done() const { return pc_ >= code_->size() && loops_.empty(); }
  const isa::Env& env() const { return env_; }

 private:
  struct Frame {
    int32_t var = 0;
    int64_t trip = 0, iter = 0;
    size_t begin = 0, end = 0;
  };
  /// Closes finished loop bodies at pc_: next iteration or leave the loop.
  void close_loops();

  const isa::Bundle* bundle_;
  const isa::Program* program_;
  const std::vector<isa::Instr>* code_;
  size_t core_;
  size_t pc_ = 0;
  std::vector<Frame> loops_;
  isa::Env env_;
};

}  // namespace qbc::runtime
