// The cost model (docs/performance.md "Cost model"): the time of one call of a compiled
// program, evaluated on the emitted per-core instruction streams, instruction by
// instruction. Each instruction costs max(MACs / MAC rate, DRAM bytes / DMA bandwidth,
// vector ops / vector rate) plus its issue time (and a DMA its latency); the three queues
// of a core run concurrently and wait only where the program's dependency tokens say, the
// cores only at barriers (plus the barrier latency). A call takes the slowest core plus
// the host overhead. Every parameter comes from the target profile, where each is marked
// fact, assumption or fitted.
//
// The counts the model uses (DRAM bytes by purpose, MACs, vector ops, barriers) are the
// ones the executor's counters report for the same call: tests hold the two to each other.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "qbc/isa/program.h"
#include "qbc/support/status.h"

namespace qbc::npu {

/// The profile numbers the model reads (config::TargetProfile, in SI units).
struct CostParams {
  double clock_hz = 1e9;
  double int8_macs_per_cycle = 1, int4_macs_per_cycle = 1, int16_macs_per_cycle = 1;
  double vector_ops_per_cycle = 1;
  double dram_bytes_per_s = 1e9;  ///< the device's DRAM bandwidth (shared by every core)
  double dram_efficiency = 1, mac_efficiency = 1;
  double dma_latency_s = 0, issue_cycles = 0, barrier_s = 0, host_s = 0;
};

/// Counts of one core over one call (the executor's runtime::CoreCounters fields).
struct CostCounts {
  static constexpr int kPurposes = 6;  ///< isa::Purpose values
  int64_t dram_read[kPurposes] = {};
  int64_t dram_written[kPurposes] = {};
  int64_t macs = 0, vector_ops = 0, barriers = 0, instructions = 0, dma = 0;
  int64_t dram_bytes() const;
  CostCounts& operator+=(const CostCounts& o);
};

/// What bounds a stretch of time: the resource busiest in it, or the fixed latencies
/// (issue, DMA start, barriers) when none of the three rates explains most of it.
enum class Bound : uint8_t { kDram, kMac, kVector, kLatency };
const char* bound_name(Bound b);
/// The bound of a stretch of `total_s` seconds whose resources were busy `dram_s`, `mac_s`
/// and `vector_s`: the busiest one when it fills at least half of the stretch, else kLatency.
Bound bound_of(double dram_s, double mac_s, double vector_s, double total_s);

/// One MBLT node's share of a call (its instructions on every core of the instance).
struct NodeCost {
  int32_t node = -1;  ///< Bundle::nodes index (-1: instructions of no node, e.g. carriers)
  CostCounts counts;
  /// Busy seconds of the node's instructions on the slowest core, by resource.
  double dram_s = 0, mac_s = 0, vector_s = 0, latency_s = 0;
  /// Wall time attributed to the node: from the end of the previous node's work to the end
  /// of its own, on the core that finishes it last. Instructions of no node (the token
  /// carriers between nodes) count towards the node before them on their core, so the
  /// no-node entry keeps its counts but (almost always) no time.
  double seconds = 0;
  Bound bound = Bound::kLatency;
};

/// One instruction's stretch on its queue (CallSpec::spans): when the queue took it and
/// when it could issue the next one, in seconds from the start of the call. A DMA's data
/// arrives `dma_latency_s` after `end`; a barrier lasts from the queue's arrival to the
/// release of every core.
struct Span {
  int32_t core = 0;  ///< the core within the instance
  isa::Queue queue = isa::Queue::kLoad;
  int32_t node = -1;    ///< Bundle::nodes index (-1: no node)
  const char* op = "";  ///< isa::op_name of the instruction
  double start = 0, end = 0;
};

/// The model's answer for one call of one program.
struct CallCost {
  double seconds = 0;       ///< the slowest core plus the host overhead
  double core_seconds = 0;  ///< the slowest core
  double host_seconds = 0;
  std::vector<CostCounts> cores;  ///< per core of the instance
  CostCounts total;               ///< summed over the cores
  /// Seconds the DRAM traffic of the call needs at the effective bandwidth (all cores share
  /// it): the call's roofline.
  double dram_seconds = 0;
  Bound bound = Bound::kLatency;
  /// Busy seconds of the slowest core by resource: `bound` is bound_of() of them and
  /// core_seconds.
  double busy_dram_s = 0, busy_mac_s = 0, busy_vector_s = 0;
  std::vector<NodeCost> nodes;  ///< in program order of first appearance
  /// When each core of the instance finishes its work (core_seconds is the largest).
  std::vector<double> core_end_s;
  std::vector<Span> spans;  ///< every instruction's stretch, with CallSpec::spans
};

/// Options of one evaluation.
struct CallSpec {
  isa::Phase phase = isa::Phase::kDecode;
  int64_t start = 0;  ///< cached positions before the call
  int64_t seq = 1;    ///< tokens of the call
  int slot = 0;
  /// Instances of the mode running the same program at the same time (they share the
  /// DRAM bandwidth); 1 for one sequence.
  int active_instances = 1;
  bool per_node = true;  ///< fill CallCost::nodes
  bool spans = false;    ///< fill CallCost::spans (the timeline of `qbc inspect --trace`)
};

/// Evaluates one call of `mode`'s program. Fails (kInvalidArgument) when the runtime values
/// are out of the program's range or the program is malformed (a loop nesting or token
/// count the replay cannot follow).
StatusOr<CallCost> estimate_call(const isa::Bundle& b, const isa::Mode& mode, const CallSpec& spec,
                                 const CostParams& p);

/// The predictions `qbc plan` prints for one mode.
struct ModePrediction {
  isa::Scheme scheme = isa::Scheme::kSingle;
  int64_t prompt_tokens = 0;
  double ttft_s = 0;              ///< prefill chunks of the prompt (host overhead per call)
  double decode_s = 0;            ///< one decode step right after the prompt
  double decode_end_s = 0;        ///< one decode step with the cache full (position max_cache-1)
  double roofline_fraction = 0;   ///< decode: DRAM time at the effective bandwidth / step time
  Bound bound = Bound::kLatency;  ///< of the decode step
  Bound prefill_bound = Bound::kLatency;
  /// What prefill_bound was picked from (bound_of): the prefill calls' DRAM time at the
  /// effective bandwidth, MAC and vector time of their busiest cores, and their core time.
  double prefill_dram_s = 0, prefill_mac_s = 0, prefill_vector_s = 0, prefill_core_s = 0;
  /// decode: the DRAM seconds of the unavoidable traffic (roofline_fraction x decode_s).
  double need_s = 0;
  CallCost decode;  ///< the decode step right after the prompt, per node
};

/// TTFT for `prompt_tokens` (chunks of Bundle::chunk, the last one shorter) and decode
/// steps at the end of the prompt and at the end of the cache, for mode `mode`, with
/// `active_instances` of its sequences running at once (sharing the DRAM bandwidth).
StatusOr<ModePrediction> predict_mode(const isa::Bundle& b, const isa::Mode& mode,
                                      int64_t prompt_tokens, const CostParams& p,
                                      int active_instances = 1);

/// The row name of `node` in cost tables: its MBLT name, or "(token carriers, npu-deps)" for
/// the instructions of no node (the zero-row carriers isa::assign_tokens inserts).
std::string cost_node_label(const isa::Bundle& b, int32_t node);

/// A per-node table of a call: node, DRAM MiB, MMACs, kvec, time, bound (text), then a total
/// row (every core's counts, the slowest core's time) and the call time with the host's share.
std::string cost_table_text(const isa::Bundle& b, const CallCost& c, size_t max_rows = 0);

}  // namespace qbc::npu
