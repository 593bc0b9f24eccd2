// The runtime domain of a program and how the verifier, and the backend's dependency-token
// pass (npu/assign_tokens.h), sample it (docs/npu.md "Evaluation"): runtime symbols at the
// vertices of their domain, loop variables at both ends of their range, widened to a whole
// period where they appear under `mod`. Public so that program analyses outside isa sample
// exactly as the verifier does.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "qbc/isa/program.h"

namespace qbc::isa {

/// Loop variables are 0..kMaxLoopVars-1 (Env::loop is that long).
inline constexpr int kMaxLoopVars = 64;
/// The deepest loop nest a stream may have (V8).
inline constexpr int kMaxLoopDepth = 8;
/// The largest `mod` divisor of a loop variable that widens its samples (larger ones count
/// as this).
inline constexpr int64_t kMaxModWindow = 16;

/// Expr::eval with the same semantics, but false instead of an int64 overflow, a division by
/// a non-positive value or a loop variable outside Env::loop.
bool eval_checked(const Expr& e, const Env& env, int64_t* out);

/// One point of the runtime domain.
struct SymPoint {
  int64_t start = 0, seq = 1, slot = 0;
};
/// The vertices of {start in [0, max_cache-1], seq in [1, min(max_seq, max_cache)],
/// start + seq <= max_cache} times slot in {0, instances-1}, deduplicated. With
/// `all_slots` false only the last slot is used.
std::vector<SymPoint> sym_vertices(int64_t max_cache, int64_t max_seq, int64_t instances,
                                   bool all_slots);
/// Sets env's symbols to `p`.
void set_syms(Env& env, const SymPoint& p);

/// The loop structure of one stream.
struct StreamShape {
  std::vector<int32_t> parent;  ///< innermost enclosing loop instruction, -1 at top level
  std::vector<int32_t> depth;   ///< number of enclosing loops
  /// Loop instructions: the sample window W = max(2, m + 1), m the largest `mod` divisor
  /// (at most kMaxModWindow) applied to an expression of the loop's variable in its body
  /// (1 when none); 0 for other instructions.
  std::vector<int64_t> window;
};
/// Builds the shape of `code`, or returns why it cannot (a loop body leaves the stream or
/// its enclosing loop's body, a loop variable outside [0, kMaxLoopVars)); "" when fine.
std::string build_shape(const std::vector<Instr>& code, StreamShape* shape);

/// The loops enclosing instruction `i`, outermost first.
std::vector<int32_t> enclosing_loops(const StreamShape& shape, int32_t i);

/// Samples of a loop variable with `trip` iterations: 0..W-1 and trip-W..trip-1, ascending
/// and deduplicated; empty when trip <= 0.
std::vector<int64_t> loop_samples(int64_t trip, int64_t window);

/// What for_each_env ended with.
struct EnvWalk {
  bool stopped = false;   ///< the callback returned false
  int32_t bad_loop = -1;  ///< a trip count failed to evaluate (overflow): that loop
};

/// The loop variables (a bit mask) that instruction `i`'s expressions read, and those the
/// trip counts of its enclosing loops read: the variables worth sampling for it.
uint64_t used_vars(const std::vector<Instr>& code, const StreamShape& shape, int32_t i);

/// Calls `f(env)` for every sample environment of the loops `chain` (outermost first; env's
/// symbols already set): each loop variable in `relevant` takes loop_samples(trip, window),
/// the trip evaluated with the outer variables' values; any other one only 0 (nothing reads
/// it). Loops whose trip is <= 0 contribute nothing, unless `pad_cache_trips`: then a trip
/// that reads `start` counts as at least `window` (the dependency pass: a loop over cache
/// chunks that this bundle's cache never enters on some core may run at a longer cache, and
/// the tokens must not depend on maxCacheLength, V9).
template <typename F>
EnvWalk for_each_env(const std::vector<Instr>& code, const StreamShape& shape,
                     const std::vector<int32_t>& chain, uint64_t relevant, Env& env, F&& f,
                     bool pad_cache_trips = false, size_t level = 0) {
  EnvWalk w;
  if (level == chain.size()) {
    w.stopped = !f(env);
    return w;
  }
  const int32_t li = chain[level];
  const Loop& loop = std::get<Loop>(code[static_cast<size_t>(li)].op);
  int64_t trip = 0;
  if (!eval_checked(loop.trip, env, &trip)) {
    w.bad_loop = li;
    return w;
  }
  const int64_t window = shape.window[static_cast<size_t>(li)];
  if (pad_cache_trips && loop.trip.uses(Sym::kStart)) trip = std::max(trip, window);
  const bool used = relevant >> loop.var & 1;
  for (int64_t v : loop_samples(trip, used ? window : 1)) {
    if (!used && v > 0) break;
    env.loop[static_cast<size_t>(loop.var)] = v;
    w = for_each_env(code, shape, chain, relevant, env, f, pad_cache_trips, level + 1);
    if (w.stopped || w.bad_loop >= 0) return w;
  }
  return w;
}

/// "start=0 seq=16 slot=1 i0=3 i2=0": the symbols and the variables of `chain`.
std::string env_text(const Env& env, const std::vector<Instr>& code,
                     const std::vector<int32_t>& chain);

}  // namespace qbc::isa
