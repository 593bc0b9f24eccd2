// Internal to the dependency-token pass (assign_tokens.h): the region tree of one stream and
// the analysis that gives its instructions their wait and signal bits. The algorithm is
// described at the top of assign_tokens.cpp; its phases live in token_regions.cpp
// (structure, conflicts, same-iteration pairs) and token_carried.cpp (iteration-to-iteration
// syncs, carriers, output).
#pragma once

#include <algorithm>
#include <array>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "qbc/isa/domain.h"
#include "qbc/isa/program.h"
#include "qbc/support/check.h"
#include "qbc/support/status.h"

namespace qbc::npu::tokens {

// The analysis speaks the program's vocabulary throughout.
using namespace ::qbc::isa;  // NOLINT(build/namespaces)

/// The program a stream belongs to, for messages and the instance count.
struct ProgramRef {
  const Bundle& b;
  const Program& p;
  int instances = 1;
};

/// "program prefill".
inline std::string where(const ProgramRef& pr) {
  return std::string("program ") + phase_name(pr.p.phase);
}

constexpr int64_t kSram = -1;     // Span::mem: the core's SRAM (physical addresses)
constexpr int64_t kAllDram = -2;  // Span::mem: every non-weights DRAM byte (a barrier)

struct Span {
  int64_t mem = 0;  ///< kSram, kAllDram, or a DRAM buffer id (buffer-relative addresses)
  int64_t lo = 0, hi = 0;
  bool write = false;
};

inline bool spans_conflict(const std::vector<Span>& a, const std::vector<Span>& b) {
  for (const Span& x : a) {
    for (const Span& y : b) {
      if (!x.write && !y.write) continue;
      if (x.mem == kAllDram || y.mem == kAllDram) {
        if (x.mem != kSram && y.mem != kSram) return true;
        continue;
      }
      if (x.mem == y.mem && x.lo < y.hi && y.lo < x.hi) return true;
    }
  }
  return false;
}

/// Adds `s` to `v`, merging it into a hull of the same memory and kind.
inline void merge_span(std::vector<Span>& v, const Span& s) {
  for (Span& x : v) {
    if (x.mem == s.mem && x.write == s.write) {
      x.lo = std::min(x.lo, s.lo);
      x.hi = std::max(x.hi, s.hi);
      return;
    }
  }
  v.push_back(s);
}

inline uint8_t bit(Channel c) { return static_cast<uint8_t>(1u << static_cast<int>(c)); }
inline Channel channel_of(Queue from, Queue to) {
  for (int c = 0; c < kNumChannels; ++c) {
    const Channel ch = static_cast<Channel>(c);
    if (channel_from(ch) == from && channel_to(ch) == to) return ch;
  }
  return Channel::kLoadToCompute;
}

/// A drain carrier's knowledge: after it, its queue knows queue `from` passed `loop` (and
/// everything `prime` knew).
struct Drain {
  Queue from;
  int32_t prime, loop;
};

struct Elem {
  int32_t id = -1;
  int32_t instr = -1;  ///< the original instruction (plain or loop); -1 for a carrier
  int32_t child = -1;  ///< a loop's body region
  Queue queue = Queue::kCompute;
  uint8_t wait = 0, signal = 0;
  std::array<int32_t, kNumChannels> src;  ///< per waited channel: the signalling element, or
                                          ///< kCarried (the previous iteration's) / kOther
  std::vector<Drain> drains;
  int32_t prime_of = -1;  ///< a prime carrier of that loop element
  int32_t drain_of = -1;  ///< a drain carrier of that loop element
  Elem() { src.fill(-1); }
  bool plain() const { return child < 0; }
};
constexpr int32_t kCarried = -2, kOther = -3;

using Know = std::array<int32_t, kNumQueues>;  // per queue: an element id, -1 none
using Snap = std::array<Know, kNumQueues>;     // what every queue knew after an element

/// The snapshot of an element already processed (a missing one would be a bug: a default
/// snapshot would claim knowledge of element 0).
inline Snap& snap_of(std::map<int32_t, Snap>& snap, int32_t id) {
  const auto it = snap.find(id);
  QBC_CHECK(it != snap.end()) << "assign_tokens: element " << id << " has no clock yet";
  return it->second;
}

struct Region {
  int32_t loop_instr = -1;  ///< -1: the top level
  int32_t parent = -1;
  std::vector<Elem> elems;
  int32_t next_id = 0;
  std::vector<int32_t> pos;  ///< by element id
  uint8_t queues = 0;        ///< queues with instructions (carriers included) inside
  uint8_t used = 0;          ///< channels waited or signalled inside
  std::array<std::vector<Span>, kNumQueues> spans;  ///< hulls of the accesses inside, per queue
  std::array<int, kNumChannels> dist{};             ///< carried syncs: distance, 0 none
  std::array<int32_t, kNumChannels> carried_src;    ///< carried syncs: the signalling element
  Region() { carried_src.fill(-1); }
};

class StreamDeps {
 public:
  StreamDeps(const Bundle& b, const ProgramRef& pr, int stream, const StreamShape& shape,
             int32_t pass)
      : b_(b), pr_(pr), cp_(pr.p.cores[static_cast<size_t>(stream)]), shape_(shape), pass_(pass) {}

  /// Computes the stream's new code; `*carriers` counts the inserted carriers.
  Status run(std::vector<Instr>* out, int* carriers);

 private:
  // Structure.
  int32_t build(int32_t first, int32_t last, int32_t loop_instr, int32_t parent);
  void reindex(Region& r);
  int32_t insert(Region& r, size_t at, Queue q);
  Region& region_of_loop(const Elem& e) { return regions_[static_cast<size_t>(e.child)]; }
  size_t pos(const Region& r, int32_t id) const {
    return static_cast<size_t>(r.pos[static_cast<size_t>(id)]);
  }
  Elem& elem(Region& r, int32_t id) { return r.elems[pos(r, id)]; }
  uint8_t queues_of(const Elem& e) const {
    return e.plain() ? static_cast<uint8_t>(1u << static_cast<int>(e.queue))
                     : regions_[static_cast<size_t>(e.child)].queues;
  }
  size_t entry(const Region& r, size_t p) const;

  // Conflicts.
  std::vector<Span> spans_at(int32_t instr, const Env& env) const;
  const std::vector<Span>& hull(const Elem& e, Queue q) const;
  bool conflict(const Region& r, const Elem& a, Queue qa, const Elem& b, Queue qb, int d) const;
  int min_distance(const Region& r, const Elem& a, Queue qa, const Elem& b, Queue qb) const;

  // Passes.
  void process(int32_t ri);
  void same_iteration(Region& r);
  void make_pair(Region& r, int32_t a_id, int32_t b_id, Queue x, Queue y,
                 std::array<Know, kNumQueues>& k, std::map<int32_t, Snap>& snap);
  void carried(Region& r);
  /// carried's phases: per element of a second iteration of the body, what every queue
  /// knew when it started (clocks of (iteration, position)); the first channel with an
  /// unordered conflict into a later iteration (-1 none) and its smallest distance; the
  /// sync for it (the wait, the signal, the primes and drains around the loop).
  using Clock = std::array<int64_t, kNumQueues>;
  std::vector<std::array<Clock, kNumQueues>> iteration_clocks(const Region& r) const;
  std::pair<int, int> first_carried(const Region& r,
                                    const std::vector<std::array<Clock, kNumQueues>>& before) const;
  void add_carried(Region& r, int best, int best_d);
  void summarize(Region& r);
  Status flatten(const Region& r, std::vector<Instr>* out);
  StatusOr<Instr> carrier(Queue q);
  StatusOr<Instr> make_carrier(Queue q);

  const Bundle& b_;
  const ProgramRef& pr_;
  const CoreProgram& cp_;
  const StreamShape& shape_;
  std::vector<Region> regions_;
  std::vector<std::vector<Span>> hulls_;      // per instruction: hull over all samples
  std::vector<std::vector<Access>> accs_;     // per instruction
  std::vector<uint64_t> used_;                // per instruction: used_vars
  std::vector<std::vector<int32_t>> chains_;  // per instruction: enclosing loops
  std::vector<SymPoint> points_;
  int32_t pass_;
  int carriers_ = 0;
  std::optional<StatusOr<Instr>> carrier_memo_[kNumQueues];
};

/// `code` without the carriers an earlier run inserted (node -1, pass `pass`).
std::vector<Instr> strip_carriers(const std::vector<Instr>& code, int32_t pass);

}  // namespace qbc::npu::tokens
