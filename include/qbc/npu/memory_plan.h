// The memory plan of a compiled model: the DRAM map (weights, KV cache, activations,
// scratch, I/O, reserve against the device), the SRAM peak per core, the program size, and
// the "does not fit" answer with the largest cache length and batch that would.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "qbc/isa/program.h"
#include "qbc/support/status.h"

namespace qbc::npu {

struct MemoryReport {
  isa::DramPlan dram;
  int64_t device_bytes = 0;
  std::vector<int64_t> sram_peak;  ///< per physical core of the target
  int64_t sram_bytes = 0;          ///< per core
  int64_t program_bytes = 0;       ///< every mode's streams (isa::program_bytes)
  /// Bytes of KV cache per cached position (all layers, one sequence) for global layers; the
  /// sliding-window layers' rings do not grow with the context.
  int64_t kv_bytes_per_position = 0;
  int64_t kv_fixed_bytes = 0;  ///< KV bytes that do not grow with the context (rings)
};

MemoryReport memory_report(const isa::Bundle& b);

/// "1.79 GiB", "63.1 MiB", "96.0 KiB", "512 B": the sizes of the memory reports.
std::string human_bytes(int64_t bytes);

/// Both maps as text: the DRAM regions with their buffers, then per core the SRAM peak.
std::string memory_text(const isa::Bundle& b, const MemoryReport& r);

/// The stable JSON of `qbc inspect --memory --json` (docs/cli.md).
std::string memory_json(const MemoryReport& r);

/// The device's answer for a plan: whether it fits, and the largest maxCacheLength (with
/// the batch unchanged) and batchSize (with the cache unchanged) whose DRAM plan fits, from
/// the plan's own per-position and per-sequence terms (0 when none does).
struct FitLimits {
  bool fits = false;
  int64_t max_cache = 0, max_batch = 0;
};
FitLimits fit_limits(const isa::Bundle& b, const MemoryReport& r);

/// OK when the plan fits the device; otherwise kResourceExhausted with the table, the term
/// that decides, and the largest maxCacheLength and batchSize that fit with everything else
/// unchanged.
Status check_fit(const isa::Bundle& b, const MemoryReport& r);

}  // namespace qbc::npu
