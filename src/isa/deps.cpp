// assign_tokens (see qbc/isa/deps.h and docs/npu.md "Tokens").
//
// A stream is a tree of regions: the top level and each loop body, whose elements are plain
// instructions and sub-loops. Regions are processed bottom-up:
//
// 1. Same-iteration order (every region). Elements in order; for element B and each other
//    queue X, the latest earlier element A with X activity that conflicts with B's activity
//    on its queue Y must be ordered before B. Each queue keeps a vector clock over the
//    region's elements (what it knows to have completed); when A is not yet known, a token
//    pair is added: signal at the first X instruction at or after A, wait at the last Y
//    instruction at or before B (carriers are inserted when none exists). Pairs on one
//    channel stay in the same order on both queues (counted semaphores match in order) and
//    never straddle a sub-loop that uses the channel (its first wait would take the token).
// 2. Iteration to iteration (loop bodies). A two-iteration simulation of the clocks tells
//    which conflicts between iteration k and a later one are already ordered (through
//    program order and the same-iteration pairs). For a channel X->Y with an unordered one,
//    the body's last X instruction signals and its first Y instruction waits, every
//    iteration; d carriers before the loop prime it and d carriers after it drain it, d the
//    smallest distance in iterations at which a conflict exists (1 unless the channel has no
//    other use in the body). The drain carriers tell the parent region that X's share of the
//    loop completed.
// 3. The tree is flattened back into the stream, with carriers where they were inserted.
//
// Conflicts between two plain instructions of a region are tested exactly at every sample
// point (domain.h), at the same loop values (same iteration) or d iterations apart; where a
// sub-loop is involved, its accesses' hulls over all its iterations are used.
#include "qbc/isa/deps.h"

#include <algorithm>
#include <array>
#include <map>
#include <optional>

#include "domain.h"
#include "qbc/support/check.h"
#include "verify_internal.h"

namespace qbc::isa {
namespace {

constexpr int64_t kSram = -1;     // Span::mem: the core's SRAM (physical addresses)
constexpr int64_t kAllDram = -2;  // Span::mem: every non-weights DRAM byte (a barrier)

struct Span {
  int64_t mem = 0;  ///< kSram, kAllDram, or a DRAM buffer id (buffer-relative addresses)
  int64_t lo = 0, hi = 0;
  bool write = false;
};

bool spans_conflict(const std::vector<Span>& a, const std::vector<Span>& b) {
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
void merge_span(std::vector<Span>& v, const Span& s) {
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
Channel channel_of(Queue from, Queue to) {
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
Snap& snap_of(std::map<int32_t, Snap>& snap, int32_t id) {
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

// ---------------------------------------------------------------------------------------
// Structure

int32_t StreamDeps::build(int32_t first, int32_t last, int32_t loop_instr, int32_t parent) {
  const int32_t ri = static_cast<int32_t>(regions_.size());
  regions_.push_back(Region{});
  regions_[static_cast<size_t>(ri)].loop_instr = loop_instr;
  regions_[static_cast<size_t>(ri)].parent = parent;
  for (int32_t i = first; i <= last;) {
    Elem e;
    e.instr = i;
    e.queue = cp_.code[static_cast<size_t>(i)].queue;
    int32_t next = i + 1;
    if (const Loop* l = std::get_if<Loop>(&cp_.code[static_cast<size_t>(i)].op)) {
      e.child = build(i + 1, i + l->body, i, ri);
      next = i + l->body + 1;
    }
    Region& r = regions_[static_cast<size_t>(ri)];
    e.id = r.next_id++;
    r.elems.push_back(std::move(e));
    i = next;
  }
  reindex(regions_[static_cast<size_t>(ri)]);
  return ri;
}

void StreamDeps::reindex(Region& r) {
  r.pos.assign(static_cast<size_t>(r.next_id), -1);
  for (size_t p = 0; p < r.elems.size(); ++p) {
    r.pos[static_cast<size_t>(r.elems[p].id)] = static_cast<int32_t>(p);
  }
}

int32_t StreamDeps::insert(Region& r, size_t at, Queue q) {
  Elem e;
  e.id = r.next_id++;
  e.queue = q;
  r.elems.insert(r.elems.begin() + static_cast<std::ptrdiff_t>(at), std::move(e));
  reindex(r);
  return r.next_id - 1;
}

/// The first position of the prime block right before the loop at `p` (p when none).
size_t StreamDeps::entry(const Region& r, size_t p) const {
  const int32_t id = r.elems[p].id;
  while (p > 0 && r.elems[p - 1].prime_of == id) --p;
  return p;
}

// ---------------------------------------------------------------------------------------
// Conflicts

std::vector<Span> StreamDeps::spans_at(int32_t instr, const Env& env) const {
  std::vector<Span> out;
  const Instr& in = cp_.code[static_cast<size_t>(instr)];
  if (std::holds_alternative<Barrier>(in.op)) return {Span{kAllDram, 0, 0, true}};
  for (const Access& a : accs_[static_cast<size_t>(instr)]) {
    const Buffer& buf = b_.buffers[static_cast<size_t>(a.ref.buffer)];
    int64_t off = 0, n = 0;
    if (!eval_checked(a.ref.offset, env, &off) || !eval_checked(a.bytes, env, &n) || n <= 0) {
      continue;
    }
    if (buf.space == Space::kSram) {
      out.push_back(Span{kSram, buf.offset + off, buf.offset + off + n, a.write});
    } else {
      out.push_back(Span{a.ref.buffer, off, off + n, a.write});
    }
  }
  return out;
}

const std::vector<Span>& StreamDeps::hull(const Elem& e, Queue q) const {
  if (e.plain()) {
    static const std::vector<Span> kNone;
    return e.instr >= 0 && e.queue == q ? hulls_[static_cast<size_t>(e.instr)] : kNone;
  }
  return regions_[static_cast<size_t>(e.child)].spans[static_cast<size_t>(q)];
}

/// Whether `a`'s accesses on qa conflict with `b`'s on qb, `b` being d iterations of r's loop
/// after `a` (d = 0: the same iteration).
bool StreamDeps::conflict(const Region& r, const Elem& a, Queue qa, const Elem& b, Queue qb,
                          int d) const {
  if (!spans_conflict(hull(a, qa), hull(b, qb))) return false;
  if (!a.plain() || !b.plain()) return true;  // hulls over the sub-loop's iterations
  const std::vector<int32_t>& chain = chains_[static_cast<size_t>(a.instr)];
  const Loop* loop =
      r.loop_instr < 0 ? nullptr : &std::get<Loop>(cp_.code[static_cast<size_t>(r.loop_instr)].op);
  const uint64_t used = used_[static_cast<size_t>(a.instr)] | used_[static_cast<size_t>(b.instr)];
  bool found = false;
  for (const SymPoint& p : points_) {
    Env env;
    set_syms(env, p);
    for_each_env(
        cp_.code, shape_, chain, used, env,
        [&](const Env& e) {
          if (d == 0) {
            found = spans_conflict(spans_at(a.instr, e), spans_at(b.instr, e));
            return !found;
          }
          // A loop whose trip count follows the cache position may run any number of times at
          // some context length: its carried conflicts count whatever this bundle's cache
          // allows, so the tokens (and the program) do not depend on maxCacheLength (V9).
          int64_t trip = 0;
          if (!eval_checked(loop->trip, e, &trip)) return true;
          const int64_t k = e.loop[static_cast<size_t>(loop->var)];
          if (k + d >= trip && !loop->trip.uses(Sym::kStart)) return true;
          Env later = e;
          later.loop[static_cast<size_t>(loop->var)] = k + d;
          found = spans_conflict(spans_at(a.instr, e), spans_at(b.instr, later));
          return !found;
        },
        true);
    if (found) return true;
  }
  return false;
}

/// The smallest d in 1..W-1 at which `b` (d iterations later) conflicts with `a`; 0 if none.
int StreamDeps::min_distance(const Region& r, const Elem& a, Queue qa, const Elem& b,
                             Queue qb) const {
  const int64_t w = shape_.window[static_cast<size_t>(r.loop_instr)];
  for (int d = 1; d < w; ++d) {
    if (conflict(r, a, qa, b, qb, d)) return d;
  }
  return 0;
}

// ---------------------------------------------------------------------------------------
// Same-iteration pairs

void StreamDeps::process(int32_t ri) {
  std::vector<int32_t> children;
  for (const Elem& e : regions_[static_cast<size_t>(ri)].elems) {
    if (!e.plain()) children.push_back(e.child);
  }
  for (int32_t c : children) process(c);
  Region& r = regions_[static_cast<size_t>(ri)];
  same_iteration(r);
  if (r.loop_instr >= 0) carried(r);
  summarize(r);
}

void StreamDeps::same_iteration(Region& r) {
  std::array<Know, kNumQueues> k;
  for (Know& x : k) x.fill(-1);
  std::map<int32_t, Snap> snap;
  const auto known = [&](Queue y, Queue x) {
    return k[static_cast<size_t>(y)][static_cast<size_t>(x)];
  };
  for (size_t j = 0; j < r.elems.size(); ++j) {
    const int32_t bid = r.elems[j].id;
    const uint8_t qs = queues_of(r.elems[j]);
    if (r.elems[j].plain()) {
      const Queue y = r.elems[j].queue;
      for (const Drain& d : r.elems[j].drains) {
        Know& ky = k[static_cast<size_t>(y)];
        const Know& kp = snap_of(snap, d.prime)[static_cast<size_t>(d.from)];
        for (int q = 0; q < kNumQueues; ++q) {
          if (kp[static_cast<size_t>(q)] >= 0 &&
              (ky[static_cast<size_t>(q)] < 0 ||
               pos(r, kp[static_cast<size_t>(q)]) > pos(r, ky[static_cast<size_t>(q)]))) {
            ky[static_cast<size_t>(q)] = kp[static_cast<size_t>(q)];
          }
        }
        const int32_t cur = ky[static_cast<size_t>(d.from)];
        if (cur < 0 || pos(r, d.loop) > pos(r, cur)) ky[static_cast<size_t>(d.from)] = d.loop;
      }
    }
    for (int yq = 0; yq < kNumQueues; ++yq) {
      if (!(qs >> yq & 1)) continue;
      const Queue y = static_cast<Queue>(yq);
      for (int xq = 0; xq < kNumQueues; ++xq) {
        if (xq == yq) continue;
        const Queue x = static_cast<Queue>(xq);
        const size_t jb = pos(r, bid);
        const int32_t kn = known(y, x);
        const size_t stop = kn < 0 ? 0 : pos(r, kn) + 1;
        int32_t aid = -1;
        for (size_t p = jb; p-- > stop;) {
          const Elem& a = r.elems[p];
          if (!(queues_of(a) >> xq & 1)) continue;
          if (conflict(r, a, x, r.elems[jb], y, 0)) {
            aid = a.id;
            break;
          }
        }
        if (aid >= 0) make_pair(r, aid, bid, x, y, k, snap);
      }
    }
    const size_t jb = pos(r, bid);
    for (int q = 0; q < kNumQueues; ++q) {
      if (qs >> q & 1) k[static_cast<size_t>(q)][static_cast<size_t>(q)] = bid;
    }
    snap[bid] = k;
    j = jb;
  }
}

void StreamDeps::make_pair(Region& r, int32_t a_id, int32_t b_id, Queue x, Queue y,
                           std::array<Know, kNumQueues>& k, std::map<int32_t, Snap>& snap) {
  const Channel ch = channel_of(x, y);
  const uint8_t cb = bit(ch);
  const auto uses = [&](const Elem& e) { return !e.plain() && (region_of_loop(e).used & cb); };
  size_t i = pos(r, a_id), j = pos(r, b_id);
  // The wait must come before any sub-loop between A and B that uses the channel.
  size_t wlimit = j;  // exclusive, unless B itself can wait
  bool b_can_wait = false;
  {
    size_t m = i + 1;
    while (m < j && !uses(r.elems[m])) ++m;
    if (m < j) {
      wlimit = entry(r, m);
    } else if (!r.elems[j].plain()) {
      wlimit = uses(r.elems[j]) ? entry(r, j) : j;
    } else {
      b_can_wait = r.elems[j].queue == y && !(r.elems[j].wait & cb);
    }
  }
  // Signal: the first X instruction at or after A.
  int32_t s_id = -1;
  for (size_t p = i; p < wlimit && s_id < 0; ++p) {
    const Elem& e = r.elems[p];
    if (e.plain() && e.queue == x && !(e.signal & cb)) s_id = e.id;
  }
  if (s_id < 0) {
    s_id = insert(r, i + 1, x);
    Snap s = snap_of(snap, a_id);
    s[static_cast<size_t>(x)][static_cast<size_t>(x)] = s_id;
    snap[s_id] = s;
    ++wlimit;
  }
  const size_t sp = pos(r, s_id);
  j = pos(r, b_id);
  // Wait: the last Y instruction at or before B, after every wait on the channel so far.
  int32_t w_id = -1;
  if (b_can_wait && wlimit == j) {
    w_id = b_id;
  } else {
    size_t after = sp;
    for (size_t p = sp + 1; p < wlimit; ++p) {
      if (r.elems[p].wait & cb) after = p;
    }
    for (size_t p = wlimit; p-- > after + 1;) {
      const Elem& e = r.elems[p];
      if (e.plain() && e.queue == y && !(e.wait & cb)) {
        w_id = e.id;
        break;
      }
    }
    if (w_id < 0) {
      // The carrier knows what was known where it sits (not what later elements learnt).
      Snap s;
      for (Know& kq : s) kq.fill(-1);
      if (wlimit > 0) s = snap_of(snap, r.elems[wlimit - 1].id);
      w_id = insert(r, wlimit, y);
      snap[w_id] = s;
    }
  }
  Elem& s = elem(r, s_id);
  Elem& w = elem(r, w_id);
  s.signal |= cb;
  w.wait |= cb;
  w.src[static_cast<size_t>(ch)] = s_id;
  // What Y knows from now on (and what w knows, for later pairs it signals).
  const Know ks = snap_of(snap, s_id)[static_cast<size_t>(x)];
  std::vector<Know*> learners = {&k[static_cast<size_t>(y)]};
  if (w_id != b_id) learners.push_back(&snap_of(snap, w_id)[static_cast<size_t>(y)]);
  for (Know* kn : learners) {
    for (int q = 0; q < kNumQueues; ++q) {
      const int32_t v = q == static_cast<int>(x) ? s_id : ks[static_cast<size_t>(q)];
      int32_t& cur = (*kn)[static_cast<size_t>(q)];
      if (v >= 0 && (cur < 0 || pos(r, v) > pos(r, cur))) cur = v;
    }
  }
  if (w_id != b_id) snap_of(snap, w_id)[static_cast<size_t>(y)][static_cast<size_t>(y)] = w_id;
}

// ---------------------------------------------------------------------------------------
// Iteration-to-iteration syncs

void StreamDeps::carried(Region& r) {
  if (r.elems.empty()) return;
  using Clk = std::array<int64_t, kNumQueues>;  // per queue: (iteration, position) as a time
  const auto join = [](Clk& a, const Clk& b) {
    for (size_t q = 0; q < a.size(); ++q) a[q] = std::max(a[q], b[q]);
  };
  for (;;) {
    // Two iterations of the body with clocks; before[p]: what each queue knew when element
    // p of the second iteration started (for a plain element: after its waits).
    const size_t n = r.elems.size();
    const int64_t big = static_cast<int64_t>(n) + 1;
    std::array<Clk, kNumQueues> k;
    for (Clk& c : k) c.fill(-1);
    std::vector<std::array<Clk, kNumQueues>> after(2 * n), before(n);
    for (int it = 0; it < 2; ++it) {
      for (size_t p = 0; p < n; ++p) {
        const Elem& e = r.elems[p];
        const int64_t t = it * big + static_cast<int64_t>(p);
        if (e.plain()) {
          Clk& ky = k[static_cast<size_t>(e.queue)];
          for (int c = 0; c < kNumChannels; ++c) {
            if (!(e.wait >> c & 1)) continue;
            const size_t x = static_cast<size_t>(channel_from(static_cast<Channel>(c)));
            const int32_t src = e.src[static_cast<size_t>(c)];
            int64_t at = -1;
            if (src >= 0) {
              at = it * n + pos(r, src);
              ky[x] = std::max(ky[x], it * big + static_cast<int64_t>(pos(r, src)));
            } else if (src == kCarried && it == 1 && r.dist[static_cast<size_t>(c)] == 1) {
              const int32_t l = r.carried_src[static_cast<size_t>(c)];
              at = static_cast<int64_t>(pos(r, l));
              ky[x] = std::max(ky[x], static_cast<int64_t>(pos(r, l)));
            }
            if (at >= 0) join(ky, after[static_cast<size_t>(at)][x]);
          }
          for (const Drain& d : e.drains) {
            const size_t x = static_cast<size_t>(d.from);
            join(ky, after[static_cast<size_t>(it) * n + pos(r, d.prime)][x]);
            ky[x] = std::max(ky[x], it * big + static_cast<int64_t>(pos(r, d.loop)));
          }
          ky[static_cast<size_t>(e.queue)] = t;
        } else {
          if (it == 1) before[p] = k;
          for (int q = 0; q < kNumQueues; ++q) {
            if (queues_of(e) >> q & 1) k[static_cast<size_t>(q)][static_cast<size_t>(q)] = t;
          }
        }
        if (it == 1 && e.plain()) before[p] = k;
        after[static_cast<size_t>(it) * n + p] = k;
      }
    }
    // The first channel with a conflict from iteration k into a later one that is not yet
    // ordered, and its smallest distance. For element B only the elements of the earlier
    // iteration that B does not already know to have completed are tried, and a distance of
    // 1 ends the search: covered pairs are never tested.
    int best = -1, best_d = 0;
    for (int c = 0; c < kNumChannels && best < 0; ++c) {
      const Channel chc = static_cast<Channel>(c);
      const size_t xq = static_cast<size_t>(channel_from(chc)),
                   yq = static_cast<size_t>(channel_to(chc));
      const int have = r.dist[static_cast<size_t>(c)];
      if (have == 1) continue;
      int found = 0;
      for (size_t jb = 0; jb < n && found != 1; ++jb) {
        if (!(queues_of(r.elems[jb]) >> yq & 1)) continue;
        const int64_t knew = before[jb][yq][xq];
        for (size_t ia = n; ia-- > 0 && static_cast<int64_t>(ia) > knew && found != 1;) {
          if (!(queues_of(r.elems[ia]) >> xq & 1)) continue;
          const int d = min_distance(r, r.elems[ia], static_cast<Queue>(xq), r.elems[jb],
                                     static_cast<Queue>(yq));
          if (d == 0 || (have > 0 && have <= d)) continue;
          if (found == 0 || d < found) found = d;
        }
      }
      if (found > 0) {
        best = c;
        best_d = found;
      }
    }
    if (best < 0) return;
    const Channel ch = static_cast<Channel>(best);
    const Queue x = channel_from(ch), y = channel_to(ch);
    const uint8_t cb = bit(ch);
    uint8_t used = 0;
    for (const Elem& e : r.elems) {
      used |= e.wait | e.signal;
      if (!e.plain()) used |= region_of_loop(e).used;
    }
    // Counted tokens match in order: a distance above 1 needs the channel to itself.
    const int d = (used & cb) ? 1 : best_d;
    // The body's first Y instruction waits and its last X instruction signals.
    size_t fy = 0;
    while (fy < r.elems.size() && !(queues_of(r.elems[fy]) >> static_cast<int>(y) & 1)) ++fy;
    const int32_t f_id = fy < r.elems.size() && r.elems[fy].plain() && !(r.elems[fy].wait & cb)
                             ? r.elems[fy].id
                             : insert(r, 0, y);
    size_t lx = r.elems.size();
    while (lx > 0 && !(queues_of(r.elems[lx - 1]) >> static_cast<int>(x) & 1)) --lx;
    const int32_t l_id = lx > 0 && r.elems[lx - 1].plain() && !(r.elems[lx - 1].signal & cb)
                             ? r.elems[lx - 1].id
                             : insert(r, r.elems.size(), x);
    elem(r, f_id).wait |= cb;
    elem(r, f_id).src[static_cast<size_t>(best)] = kCarried;
    elem(r, l_id).signal |= cb;
    r.dist[static_cast<size_t>(best)] = d;
    r.carried_src[static_cast<size_t>(best)] = l_id;
    // d primes right before the loop and d drains right after it (after earlier drains), in
    // the parent region. Only the last drain learns that X's share of the loop completed:
    // with fewer than d iterations the earlier ones take primes.
    Region& parent = regions_[static_cast<size_t>(r.parent)];
    int32_t loop_id = -1;
    for (const Elem& e : parent.elems) {
      if (e.instr == r.loop_instr) loop_id = e.id;
    }
    int32_t last_prime = -1;
    for (int t = 0; t < d; ++t) {
      last_prime = insert(parent, pos(parent, loop_id), x);
      elem(parent, last_prime).signal |= cb;
      elem(parent, last_prime).prime_of = loop_id;
    }
    for (int t = 0; t < d; ++t) {
      size_t at = pos(parent, loop_id) + 1;
      while (at < parent.elems.size() && parent.elems[at].drain_of == loop_id) ++at;
      const int32_t d_id = insert(parent, at, y);
      Elem& de = elem(parent, d_id);
      de.wait |= cb;
      de.src[static_cast<size_t>(best)] = kOther;
      de.drain_of = loop_id;
      if (t == d - 1) de.drains.push_back(Drain{x, last_prime, loop_id});
    }
  }
}

void StreamDeps::summarize(Region& r) {
  r.queues = 0;
  r.used = 0;
  for (auto& s : r.spans) s.clear();
  for (const Elem& e : r.elems) {
    r.used |= e.wait | e.signal;
    if (e.plain()) {
      r.queues |= static_cast<uint8_t>(1u << static_cast<int>(e.queue));
      if (e.instr >= 0) {
        for (const Span& s : hulls_[static_cast<size_t>(e.instr)]) {
          merge_span(r.spans[static_cast<size_t>(e.queue)], s);
        }
      }
      continue;
    }
    const Region& c = region_of_loop(e);
    r.queues |= c.queues;
    r.used |= c.used;
    for (int q = 0; q < kNumQueues; ++q) {
      for (const Span& s : c.spans[static_cast<size_t>(q)]) {
        merge_span(r.spans[static_cast<size_t>(q)], s);
      }
    }
  }
}

// ---------------------------------------------------------------------------------------
// Output

StatusOr<Instr> StreamDeps::carrier(Queue q) {
  // The carrier of a queue is the same for every insertion: built once.
  std::optional<StatusOr<Instr>>& memo = carrier_memo_[static_cast<int>(q)];
  if (!memo) memo = make_carrier(q);
  return *memo;
}

StatusOr<Instr> StreamDeps::make_carrier(Queue q) {
  const int64_t align = b_.dma_align;
  const auto aligned = [&](const Buffer& buf) {
    return buf.offset % align == 0 && buf.slot_stride % align == 0;
  };
  int32_t sram = -1, dram_src = -1, dram_dst = -1;
  for (const Instr& in : cp_.code) {
    const Dma* d = std::get_if<Dma>(&in.op);
    if (!d) continue;
    const Ref& s_ref = in.queue == Queue::kLoad ? d->dst : d->src;
    const Ref& d_ref = in.queue == Queue::kLoad ? d->src : d->dst;
    if (sram < 0 && aligned(b_.buffers[static_cast<size_t>(s_ref.buffer)])) sram = s_ref.buffer;
    if (aligned(b_.buffers[static_cast<size_t>(d_ref.buffer)])) {
      if (in.queue == Queue::kLoad && dram_src < 0) dram_src = d_ref.buffer;
      if (in.queue == Queue::kStore && dram_dst < 0) dram_dst = d_ref.buffer;
    }
  }
  if (sram < 0) {
    for (size_t i = 0; i < b_.buffers.size(); ++i) {
      const Buffer& buf = b_.buffers[i];
      if (buf.space == Space::kSram && buf.core == cp_.core &&
          (q == Queue::kCompute || aligned(buf))) {
        sram = static_cast<int32_t>(i);
        break;
      }
    }
  }
  Instr in;
  in.queue = q;
  in.pass = pass_;
  const auto missing = [&](const char* what) {
    return failed_precondition("assign_tokens: ", where(pr_), " core ", cp_.core,
                               ": a token carrier on queue ", queue_name(q), " needs ", what);
  };
  if (sram < 0) return missing("an aligned SRAM buffer of the core");
  if (q == Queue::kCompute) {
    Eltwise e;
    e.op = EltOp::kScale;
    e.a = Ref{sram, 0};
    e.y = Ref{sram, 0};
    e.rows = 0;
    e.width = 1;
    in.op = e;
    return in;
  }
  const int32_t dram = q == Queue::kLoad ? dram_src : dram_dst;
  if (dram < 0) return missing("an aligned DRAM buffer that the queue's DMAs use");
  Dma d;
  d.rows = 0;
  d.row_bytes = align;
  d.dst_stride = align;
  d.src_stride = align;
  d.dst = Ref{q == Queue::kLoad ? sram : dram, 0};
  d.src = Ref{q == Queue::kLoad ? dram : sram, 0};
  in.op = d;
  return in;
}

Status StreamDeps::flatten(const Region& r, std::vector<Instr>* out) {
  for (const Elem& e : r.elems) {
    if (e.instr < 0) {
      ++carriers_;
      QBC_ASSIGN_OR_RETURN(Instr c, carrier(e.queue));
      c.wait = e.wait;
      c.signal = e.signal;
      out->push_back(std::move(c));
      continue;
    }
    Instr in = cp_.code[static_cast<size_t>(e.instr)];
    in.wait = e.wait;
    in.signal = e.signal;
    if (e.plain()) {
      out->push_back(std::move(in));
      continue;
    }
    const size_t at = out->size();
    out->push_back(std::move(in));
    QBC_RETURN_IF_ERROR(flatten(region_of_loop(e), out));
    std::get<Loop>((*out)[at].op).body = static_cast<int32_t>(out->size() - at - 1);
  }
  return ok_status();
}

Status StreamDeps::run(std::vector<Instr>* out, int* carriers) {
  const size_t n = cp_.code.size();
  points_ = sym_vertices(b_.max_cache, pr_.p.max_seq, pr_.instances, true);
  accs_.resize(n);
  hulls_.resize(n);
  used_.resize(n);
  chains_.resize(n);
  for (size_t i = 0; i < n; ++i) {
    const Instr& in = cp_.code[i];
    for (const Access& a : accesses(in, b_)) {
      if (b_.buffers[static_cast<size_t>(a.ref.buffer)].purpose != Purpose::kWeights) {
        accs_[i].push_back(a);
      }
    }
    if (std::holds_alternative<Loop>(in.op)) continue;
    chains_[i] = enclosing_loops(shape_, static_cast<int32_t>(i));
    used_[i] = used_vars(cp_.code, shape_, static_cast<int32_t>(i));
    const std::vector<int32_t>& chain = chains_[i];
    const uint64_t used = used_[i];
    for (const SymPoint& p : points_) {
      Env env;
      set_syms(env, p);
      for_each_env(
          cp_.code, shape_, chain, used, env,
          [&](const Env& e) {
            for (const Span& s : spans_at(static_cast<int32_t>(i), e)) merge_span(hulls_[i], s);
            return true;
          },
          true);
    }
  }
  if (n == 0) return ok_status();
  build(0, static_cast<int32_t>(n) - 1, -1, -1);
  process(0);
  QBC_RETURN_IF_ERROR(flatten(regions_[0], out));
  *carriers = carriers_;
  return ok_status();
}

/// `code` without the carriers an earlier run inserted (node -1, pass `pass`), loop bodies
/// shortened to match, so that running the pass again gives the same program.
std::vector<Instr> strip_carriers(const std::vector<Instr>& code, int32_t pass) {
  std::vector<Instr> out;
  std::vector<std::pair<size_t, size_t>> open;  // (index in out, last original body index)
  for (size_t i = 0; i < code.size(); ++i) {
    while (!open.empty() && i > open.back().second) {
      std::get<Loop>(out[open.back().first].op).body =
          static_cast<int32_t>(out.size() - open.back().first - 1);
      open.pop_back();
    }
    const Instr& in = code[i];
    if (in.pass == pass && in.node < 0 && !std::holds_alternative<Loop>(in.op)) continue;
    out.push_back(in);
    if (const Loop* l = std::get_if<Loop>(&in.op)) {
      open.push_back({out.size() - 1, i + static_cast<size_t>(std::max(l->body, 0))});
    }
  }
  while (!open.empty()) {
    std::get<Loop>(out[open.back().first].op).body =
        static_cast<int32_t>(out.size() - open.back().first - 1);
    open.pop_back();
  }
  return out;
}

}  // namespace

Status assign_tokens(Bundle& b, Program& p, int instances) {
  QBC_RETURN_IF_ERROR(check_tables(b));
  {
    // The structure is checked as given, so that errors name the caller's indices.
    std::vector<StreamShape> shapes;
    QBC_RETURN_IF_ERROR(check_program_structure(ProgramRef{b, p, -1, instances}, &shapes));
  }
  const auto it = std::find(b.passes.begin(), b.passes.end(), "npu-deps");
  const int32_t pass = static_cast<int32_t>(it - b.passes.begin());
  Program stripped = p;
  for (CoreProgram& cp : stripped.cores) cp.code = strip_carriers(cp.code, pass);
  const ProgramRef pr{b, stripped, -1, instances};
  std::vector<StreamShape> shapes;
  QBC_RETURN_IF_ERROR(check_program_structure(pr, &shapes));
  std::vector<std::vector<Instr>> code(p.cores.size());
  int carriers = 0;
  for (size_t s = 0; s < p.cores.size(); ++s) {
    StreamDeps deps(b, pr, static_cast<int>(s), shapes[s], pass);
    int n = 0;
    QBC_RETURN_IF_ERROR(deps.run(&code[s], &n));
    carriers += n;
  }
  for (size_t s = 0; s < p.cores.size(); ++s) p.cores[s].code = std::move(code[s]);
  if (carriers > 0 && it == b.passes.end()) b.passes.push_back("npu-deps");
  return ok_status();
}

Status assign_tokens(Bundle& b) {
  for (Mode& m : b.modes) {
    QBC_RETURN_IF_ERROR(assign_tokens(b, m.prefill, m.instances));
    QBC_RETURN_IF_ERROR(assign_tokens(b, m.decode, m.instances));
  }
  return ok_status();
}

}  // namespace qbc::isa
