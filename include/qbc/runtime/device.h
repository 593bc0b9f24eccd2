// The executor of NPU programs (docs/npu.md): a simulated ARIES device that holds one
// compiled isa::Bundle and runs its per-core instruction streams on the host CPU with
// exactly the integers and fp16 bits the NPU computes (docs/numerics.md, through the
// qbc_numerics kernels). It owns the device memory: DRAM (the weights image, KV caches,
// activations, scratch and io buffers of every instance slot) and the SRAM of every core.
//
// Each core's stream runs in program order (one valid schedule of its three queues) up to
// its next barrier; the cores of an instance run side by side on host threads, or one after
// another, with identical results, because cross-core traffic crosses barriers only.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "qbc/isa/program.h"
#include "qbc/runtime/exec_trace.h"
#include "qbc/support/status.h"

namespace qbc::runtime {

/// isa::Purpose values, the index of CoreCounters' DRAM byte counts.
inline constexpr int kNumPurposes = 6;

/// What one core did since the last reset: DRAM bytes moved by DMA, by the purpose of the
/// DRAM buffer, and the work of its instructions.
struct CoreCounters {
  int64_t dram_read[kNumPurposes] = {};     ///< DMA bytes read from DRAM, by isa::Purpose
  int64_t dram_written[kNumPurposes] = {};  ///< DMA bytes written to DRAM, by isa::Purpose
  /// Multiply-accumulates: rows*n*kt per matmul; g*bc*d per row of qk_scores and again per
  /// row of exp_accum (the two integer matmuls of attention).
  int64_t macs = 0;
  /// Elements the vector unit processed (inputs of quantize, requant, norms, rope,
  /// elementwise ops, attention's per-score and per-output steps, merges).
  int64_t vector_ops = 0;
  int64_t barriers = 0;      ///< barriers passed
  int64_t instructions = 0;  ///< instructions executed (each loop entry and barrier counts)
  int64_t dma = 0;           ///< DMA instructions executed
};

/// How a Device runs a bundle.
struct DeviceOptions {
  /// The mode (inference scheme) to run; the bundle must have it.
  isa::Scheme scheme = isa::Scheme::kSingle;
  /// Host threads for the cores of an instance and inside large matmuls; 0 = the hardware
  /// concurrency. Results are identical for any value.
  int host_threads = 0;
  /// Checks the bundle before anything else when set (the program verifier, isa::verify);
  /// its error is returned by create() with the prefix "bundle: ".
  std::function<Status(const isa::Bundle&)> verify;
  /// Counts only: every instruction is walked with its runtime values and counted
  /// (CoreCounters), but nothing is computed and no memory exists: no DRAM or SRAM is
  /// allocated and a bundle without weights (a shape-only plan) is accepted. The cost
  /// model (npu/cost_model.h) counts the same DRAM bytes, MACs and vector ops, and a test
  /// holds the two to each other.
  bool counters_only = false;
  /// The physical core of each logical core (slot * cores_per_instance + index), from
  /// runtime::place_cores; empty: logical = physical. Slots without a core are refused.
  std::vector<int32_t> cores;
  /// The bundle's weight image to serve as the device's weight memory, moved from (it must
  /// hold Bundle::image's bytes; usually it is that vector, which is left empty): the weights
  /// then live once in memory instead of being copied into the simulated DRAM.
  std::vector<uint8_t>* take_image = nullptr;
};

/// A simulated device holding one bundle. Not thread-safe: one call at a time (sessions of
/// different slots share it by taking turns).
class Device {
 public:
  /// Checks the bundle (the selected scheme exists: kNotFound listing the schemes present;
  /// buffers inside DRAM and SRAM, the image inside DRAM, every instruction's buffers,
  /// attentions, ropes, loop nesting and loop variables; kInvalidArgument naming the
  /// instruction otherwise), allocates device memory and copies the weights image.
  static StatusOr<std::shared_ptr<Device>> create(std::shared_ptr<const isa::Bundle> bundle,
                                                  const DeviceOptions& options);
  ~Device();
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;

  /// Runs phase `phase` of the selected mode for instance `slot` with the runtime values
  /// start (cached positions) and seq (tokens of this call): 1 <= seq <= the program's
  /// max_seq, start + seq <= Bundle::max_cache. An out-of-range access, a barrier mismatch
  /// or a deadlock is an error naming the core, the instruction and its MBLT node.
  Status run(isa::Phase phase, int slot, int64_t start, int64_t seq);

  /// `bytes` bytes of DRAM at `address`, or nullptr when the range is outside DRAM (or the
  /// device counts only).
  uint8_t* dram(int64_t address, int64_t bytes);
  /// Bytes of simulated DRAM (the highest end of any buffer of any slot, or of the image).
  int64_t dram_size() const;
  /// The DRAM address of DRAM buffer `buffer` in instance `slot` (offset + slot*slot_stride).
  int64_t address(int32_t buffer, int slot) const;

  /// The physical core ("cluster * cores per cluster + core") logical core `logical` runs on.
  int32_t physical_core(int32_t logical) const;

  /// Counters per core of the mode: index slot * cores_per_instance + core.
  const std::vector<CoreCounters>& counters() const;
  void reset_counters();

  /// Records the timeline of the calls `trace` wants (ExecTrace::wants) into it, timing every
  /// instruction on the host clock; nullptr stops recording. The trace must outlive the
  /// recording.
  void set_trace(ExecTrace* trace);

  const isa::Bundle& bundle() const;
  /// The selected mode.
  const isa::Mode& mode() const;

 private:
  struct Impl;
  explicit Device(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace qbc::runtime
