// V6 (deadlock-free replay) and V5 (ordered conflicts): the program's queues are replayed with
// counted token semaphores and barriers at each vertex of the runtime domain. Loops run every
// iteration when the whole replay has at most kFullReplayInstances instruction instances;
// beyond that each loop runs only its first and last W iterations (W: the loop's sample
// window, domain.h), which can miss a conflict of a skipped middle iteration with an access
// outside the loop (docs/npu.md "V5"). Every executed instruction gets
// a vector clock over the program's queues; two accesses to overlapping bytes, one a write,
// are ordered iff the later one's clock covers the earlier one. Per buffer the replay keeps
// the accesses not yet covered by a later one of the same kind, so it stays near linear.
#include <algorithm>
#include <deque>
#include <map>

#include "qbc/isa/domain.h"
#include "qbc/isa/verify.h"
#include "qbc/support/parallel.h"
#include "verify_internal.h"

namespace qbc::isa {
namespace {

using Clock = std::vector<uint32_t>;

void join(Clock& a, const Clock& b) {
  for (size_t i = 0; i < a.size(); ++i) a[i] = std::max(a[i], b[i]);
}

/// One queue of one stream walking its share of the stream.
struct Cursor {
  struct Frame {
    int32_t loop;
    int64_t iter, trips;
    int32_t end;
  };
  /// The iteration after `iter` of a loop of `trips` iterations: the next one, or, when
  /// sampling with window `w`, the first of the last w once the first w have run.
  static int64_t next_iter(int64_t iter, int64_t trips, int64_t w, bool full) {
    ++iter;
    if (!full && iter == w && trips - w > w) iter = trips - w;
    return iter;
  }
  int32_t stream = 0;
  Queue queue = Queue::kLoad;
  int32_t pc = 0;
  int32_t head = -1;  ///< the instruction to execute next; -1 when the queue is drained
  std::vector<Frame> frames;
  Env env;
};

/// One access not yet covered by a later one.
struct Record {
  int32_t gq;
  uint32_t clock;
  int64_t lo, hi;  ///< physical bytes
  bool write;
  int32_t stream, instr;
  int64_t stride = 0, row_bytes = 0;  ///< strided rows inside [lo, hi) (Access::stride)
};

/// True when the byte sets of two accesses can meet: their extents overlap and, for two
/// strided sets on the same row stride, their column windows (modulo the stride) overlap.
bool sets_meet(int64_t lo_a, int64_t hi_a, int64_t sa, int64_t ra, int64_t lo_b, int64_t hi_b,
               int64_t sb, int64_t rb) {
  if (hi_a <= lo_b || hi_b <= lo_a) return false;
  if (sa <= 0 || sa != sb || ra > sa || rb > sb) return true;
  const int64_t ca = ((lo_a % sa) + sa) % sa, cb = ((lo_b % sa) + sa) % sa;
  // Column windows [ca, ca + ra) and [cb, cb + rb) on a circle of sa bytes.
  auto meet = [&](int64_t x0, int64_t x1, int64_t y0, int64_t y1) { return x0 < y1 && y0 < x1; };
  for (int64_t sh : {int64_t{-1}, int64_t{0}, int64_t{1}}) {
    if (meet(ca, ca + ra, cb + sh * sa, cb + sh * sa + rb)) return true;
  }
  return false;
}

/// Where the buffers are at one sequence slot: their physical addresses, their memories, and
/// per buffer the buffers sharing bytes with it (itself included). The same for every vertex
/// of that slot, so computed once per slot.
struct Placement {
  std::vector<std::vector<int32_t>> aliases;
  std::vector<int64_t> base;    ///< physical address
  std::vector<int64_t> memory;  ///< 0 DRAM, 1 + c the SRAM of core c, -1 none (no bytes)
};

Placement placement_at(const Bundle& b, int64_t slot) {
  const size_t nb = b.buffers.size();
  Placement pl;
  pl.base.assign(nb, 0);
  pl.memory.assign(nb, -1);
  pl.aliases.assign(nb, {});
  // Memory 0: DRAM; memory 1 + c: the SRAM of core c.
  struct Extent {
    int64_t memory, lo, hi;
    int32_t id;
  };
  std::vector<Extent> ext;
  for (size_t i = 0; i < nb; ++i) {
    const Buffer& buf = b.buffers[i];
    pl.base[i] = buf.offset + (buf.space == Space::kDram ? slot * buf.slot_stride : 0);
    if (buf.purpose == Purpose::kWeights || buf.bytes <= 0) continue;
    const int64_t memory = buf.space == Space::kDram ? 0 : 1 + buf.core;
    pl.memory[i] = memory;
    ext.push_back({memory, pl.base[i], pl.base[i] + buf.bytes, static_cast<int32_t>(i)});
  }
  std::sort(ext.begin(), ext.end(), [](const Extent& x, const Extent& y) {
    return x.memory != y.memory ? x.memory < y.memory : x.lo < y.lo;
  });
  for (size_t x = 0; x < ext.size(); ++x) {
    pl.aliases[static_cast<size_t>(ext[x].id)].push_back(ext[x].id);
    for (size_t y = x + 1; y < ext.size(); ++y) {
      if (ext[y].memory != ext[x].memory || ext[y].lo >= ext[x].hi) break;
      pl.aliases[static_cast<size_t>(ext[x].id)].push_back(ext[y].id);
      pl.aliases[static_cast<size_t>(ext[y].id)].push_back(ext[x].id);
    }
  }
  return pl;
}

class Replay {
 public:
  Replay(const ProgramRef& pr, const std::vector<StreamShape>& shapes,
         const std::vector<std::vector<std::vector<Access>>>& accs, const Placement& pl,
         const SymPoint& point, bool full)
      : pr_(pr), b_(pr.b), shapes_(shapes), accs_(accs), point_(point), full_(full), pl_(pl) {}

  Status run();

 private:
  const std::vector<Instr>& code(const Cursor& c) const {
    return pr_.p.cores[static_cast<size_t>(c.stream)].code;
  }
  void advance(Cursor& c);
  bool waits_ready(const Cursor& c, const Instr& in) const;
  void take_waits(Cursor& c, const Instr& in, Clock& clock);
  void give_signals(const Cursor& c, const Instr& in, const Clock& clock);
  Status execute(Cursor& c);
  Status check_access(const Cursor& c, int gq, const Access& a);
  Status check_segment(const Cursor& c, int gq, const Access& a, int64_t off, int64_t n);
  /// Drops the records every queue still to run is ordered after (they can no longer
  /// conflict with anything), so the record lists of SRAM that every stage reuses stay short.
  void prune_dead();
  std::string at() const;
  std::string where_env(const Cursor& c) const;
  void reset_records();

  const ProgramRef& pr_;
  const Bundle& b_;
  const std::vector<StreamShape>& shapes_;
  const std::vector<std::vector<std::vector<Access>>>& accs_;
  SymPoint point_;
  bool full_;
  std::vector<Cursor> cursors_;                       // [3*stream + queue]
  std::vector<Clock> clocks_;                         // per cursor
  std::vector<std::vector<int64_t>> counts_;          // [stream][channel]
  std::vector<std::vector<std::deque<Clock>>> fifo_;  // [stream][channel]
  std::vector<std::vector<Record>> records_;          // per buffer
  const Placement& pl_;
  const std::vector<std::vector<int32_t>>& aliases_ = pl_.aliases;
  const std::vector<int64_t>& base_ = pl_.base;
  const std::vector<int64_t>& memory_ = pl_.memory;
  // Per memory: the buffers that may hold records (every one that does).
  std::vector<std::vector<int32_t>> live_;
  // Per buffer and queue: an upper bound of the clocks of its records of that queue, of all
  // of them and of the writes (0: none). An access skips a buffer whose bounds its clock
  // covers: every record there is ordered before it.
  std::vector<Clock> bound_, bound_write_;
  std::vector<char> in_live_;  // per buffer: listed in live_
  int64_t executed_ = 0;
  Status conflict_;  ///< the first V5 violation; reported once the replay ends without a V6 one
};

std::string Replay::at() const {
  return where(pr_) + " at start=" + std::to_string(point_.start) +
         " seq=" + std::to_string(point_.seq) + " slot=" + std::to_string(point_.slot);
}

std::string Replay::where_env(const Cursor& c) const {
  std::string s;
  for (const Cursor::Frame& f : c.frames) {
    const int var = std::get<Loop>(code(c)[static_cast<size_t>(f.loop)].op).var;
    s += (s.empty() ? " (" : ", ") + ("i" + std::to_string(var)) + "=" + std::to_string(f.iter);
  }
  return s.empty() ? s : s + ")";
}

void Replay::advance(Cursor& c) {
  const std::vector<Instr>& cd = code(c);
  const StreamShape& shape = shapes_[static_cast<size_t>(c.stream)];
  for (;;) {
    while (!c.frames.empty() && c.pc > c.frames.back().end) {
      Cursor::Frame& f = c.frames.back();
      const int var = std::get<Loop>(cd[static_cast<size_t>(f.loop)].op).var;
      f.iter = Cursor::next_iter(f.iter, f.trips, shape.window[static_cast<size_t>(f.loop)], full_);
      if (f.iter < f.trips) {
        c.env.loop[static_cast<size_t>(var)] = f.iter;
        c.pc = f.loop + 1;
      } else {
        c.pc = f.end + 1;
        c.frames.pop_back();
      }
    }
    if (c.pc >= static_cast<int32_t>(cd.size())) {
      c.head = -1;
      return;
    }
    const Instr& in = cd[static_cast<size_t>(c.pc)];
    if (const Loop* loop = std::get_if<Loop>(&in.op)) {
      int64_t trip = 0;
      eval_checked(loop->trip, c.env, &trip);  // V8 checked it evaluates
      if (trip <= 0) {
        c.pc += loop->body + 1;
        continue;
      }
      c.frames.push_back({c.pc, 0, trip, c.pc + loop->body});
      c.env.loop[static_cast<size_t>(loop->var)] = 0;
      ++c.pc;
      continue;
    }
    if (in.queue == c.queue) {
      c.head = c.pc++;
      return;
    }
    ++c.pc;
  }
}

bool Replay::waits_ready(const Cursor& c, const Instr& in) const {
  for (int ch = 0; ch < kNumChannels; ++ch) {
    if ((in.wait >> ch & 1) &&
        counts_[static_cast<size_t>(c.stream)][static_cast<size_t>(ch)] <= 0) {
      return false;
    }
  }
  return true;
}

void Replay::take_waits(Cursor& c, const Instr& in, Clock& clock) {
  for (int ch = 0; ch < kNumChannels; ++ch) {
    if (!(in.wait >> ch & 1)) continue;
    --counts_[static_cast<size_t>(c.stream)][static_cast<size_t>(ch)];
    std::deque<Clock>& q = fifo_[static_cast<size_t>(c.stream)][static_cast<size_t>(ch)];
    join(clock, q.front());
    q.pop_front();
  }
}

void Replay::give_signals(const Cursor& c, const Instr& in, const Clock& clock) {
  for (int ch = 0; ch < kNumChannels; ++ch) {
    if (!(in.signal >> ch & 1)) continue;
    ++counts_[static_cast<size_t>(c.stream)][static_cast<size_t>(ch)];
    fifo_[static_cast<size_t>(c.stream)][static_cast<size_t>(ch)].push_back(clock);
  }
}

Status Replay::check_access(const Cursor& c, int gq, const Access& a) {
  const Buffer& buf = b_.buffers[static_cast<size_t>(a.ref.buffer)];
  if (buf.purpose == Purpose::kWeights) return ok_status();  // read-only: never conflicts
  int64_t off = 0, n = 0;
  eval_checked(a.ref.offset, c.env, &off);  // V2 checked both evaluate
  eval_checked(a.bytes, c.env, &n);
  if (n <= 0) return ok_status();
  if (a.ring_rows <= 0) return check_segment(c, gq, a, off, n);
  // A ring side: the rows it touches are at most two runs of ring rows.
  int64_t r0 = 0, count = 0;
  eval_checked(a.ring_row0, c.env, &r0);
  eval_checked(a.ring_count, c.env, &count);
  count = std::min(count, a.ring_rows);
  if (count <= 0) return ok_status();
  r0 = ((r0 % a.ring_rows) + a.ring_rows) % a.ring_rows;
  const int64_t first = std::min(count, a.ring_rows - r0);
  for (const auto& [start, rows] :
       {std::pair<int64_t, int64_t>{r0, first}, std::pair<int64_t, int64_t>{0, count - first}}) {
    if (rows <= 0) continue;
    QBC_RETURN_IF_ERROR(
        check_segment(c, gq, a, off + start * a.stride, (rows - 1) * a.stride + a.row_bytes));
  }
  return ok_status();
}

Status Replay::check_segment(const Cursor& c, int gq, const Access& a, int64_t off, int64_t n) {
  const int64_t lo = base_[static_cast<size_t>(a.ref.buffer)] + off, hi = lo + n;
  const Clock& clock = clocks_[static_cast<size_t>(gq)];
  // The buffers to look at: those sharing bytes with this one, or, when fewer, those that
  // hold records at all (pruning keeps them few) in the same memory.
  const std::vector<int32_t>& aliases = aliases_[static_cast<size_t>(a.ref.buffer)];
  // A buffer of no bytes (memory -1) holds no access: V2 refused any that reached it.
  if (memory_[static_cast<size_t>(a.ref.buffer)] < 0) return ok_status();
  const size_t memory = static_cast<size_t>(memory_[static_cast<size_t>(a.ref.buffer)]);
  const std::vector<int32_t>& live = live_[memory];
  const std::vector<int32_t>& others = live.size() < aliases.size() ? live : aliases;
  const size_t g = clock.size();
  for (int32_t other : others) {
    const Clock& bound = (a.write ? bound_ : bound_write_)[static_cast<size_t>(other)];
    bool open = false;
    for (size_t q = 0; q < g && !open; ++q) open = static_cast<int>(q) != gq && bound[q] > clock[q];
    if (!open) continue;
    for (const Record& r : records_[static_cast<size_t>(other)]) {
      if (r.gq == gq || !(r.write || a.write) ||
          !sets_meet(lo, hi, a.stride, a.row_bytes, r.lo, r.hi, r.stride, r.row_bytes))
        continue;
      if (clock[static_cast<size_t>(r.gq)] >= r.clock) continue;
      const int64_t ob = base_[static_cast<size_t>(other)];
      const int64_t ov_lo = std::max(lo, r.lo), ov_hi = std::min(hi, r.hi);
      return violation(5, at() + ": " + instr_where(pr_, c.stream, c.head) + where_env(c) +
                              (a.write ? " writes " : " reads ") + buffer_name(b_, a.ref.buffer) +
                              " bytes [" + std::to_string(off) + ", " + std::to_string(off + n) +
                              "), and " + instr_where(pr_, r.stream, r.instr) + " earlier " +
                              (r.write ? "wrote " : "read ") + buffer_name(b_, other) + " bytes [" +
                              std::to_string(r.lo - ob) + ", " + std::to_string(r.hi - ob) +
                              ") (overlap at " + std::to_string(ov_lo - ob) + ".." +
                              std::to_string(ov_hi - ob) +
                              "), on another queue with no token or barrier ordering them");
    }
  }
  std::vector<Record>& mine = records_[static_cast<size_t>(a.ref.buffer)];
  mine.erase(std::remove_if(mine.begin(), mine.end(),
                            [&](const Record& r) {
                              return a.stride == 0 && lo <= r.lo && r.hi <= hi &&
                                     clock[static_cast<size_t>(r.gq)] >= r.clock &&
                                     (a.write || !r.write);
                            }),
             mine.end());
  if (!in_live_[static_cast<size_t>(a.ref.buffer)]) {
    in_live_[static_cast<size_t>(a.ref.buffer)] = 1;
    live_[memory].push_back(a.ref.buffer);
  }
  Clock& bound = bound_[static_cast<size_t>(a.ref.buffer)];
  bound[static_cast<size_t>(gq)] = clock[static_cast<size_t>(gq)];  // clocks only grow
  if (a.write)
    bound_write_[static_cast<size_t>(a.ref.buffer)][static_cast<size_t>(gq)] =
        bound[static_cast<size_t>(gq)];
  mine.push_back(Record{gq, clock[static_cast<size_t>(gq)], lo, hi, a.write, c.stream, c.head,
                        a.stride, a.row_bytes});
  return ok_status();
}

Status Replay::execute(Cursor& c) {
  const int gq = 3 * c.stream + static_cast<int>(c.queue);
  const Instr& in = code(c)[static_cast<size_t>(c.head)];
  Clock& clock = clocks_[static_cast<size_t>(gq)];
  take_waits(c, in, clock);
  ++clock[static_cast<size_t>(gq)];
  for (const Access& a : accs_[static_cast<size_t>(c.stream)][static_cast<size_t>(c.head)]) {
    if (!conflict_.ok()) break;
    conflict_ = check_access(c, gq, a);
  }
  give_signals(c, in, clock);
  if ((executed_ & 255) == 0) prune_dead();
  if (++executed_ > kMaxReplayInstances) {
    return violation(8, at() + ": the replay executes more than " +
                            std::to_string(kMaxReplayInstances) + " instructions");
  }
  return ok_status();
}

void Replay::prune_dead() {
  // A record r is ordered before every later access of queue q once clocks_[q][r.gq] >=
  // r.clock; clocks only grow, and a drained queue accesses nothing more.
  const size_t g = cursors_.size();
  std::vector<uint32_t> frontier(g, UINT32_MAX);
  for (size_t q = 0; q < g; ++q) {
    if (cursors_[q].head < 0) continue;
    for (size_t s = 0; s < g; ++s) frontier[s] = std::min(frontier[s], clocks_[q][s]);
  }
  for (std::vector<int32_t>& live : live_) {
    std::vector<int32_t> still;
    for (int32_t id : live) {
      std::vector<Record>& recs = records_[static_cast<size_t>(id)];
      recs.erase(std::remove_if(recs.begin(), recs.end(),
                                [&](const Record& r) {
                                  return frontier[static_cast<size_t>(r.gq)] >= r.clock;
                                }),
                 recs.end());
      if (!recs.empty()) {
        still.push_back(id);
      } else {  // the bounds start again from nothing
        in_live_[static_cast<size_t>(id)] = 0;
        std::fill(bound_[static_cast<size_t>(id)].begin(), bound_[static_cast<size_t>(id)].end(),
                  0);
        std::fill(bound_write_[static_cast<size_t>(id)].begin(),
                  bound_write_[static_cast<size_t>(id)].end(), 0);
      }
    }
    live = std::move(still);
  }
}

void Replay::reset_records() {
  const size_t nb = b_.buffers.size();
  records_.assign(nb, {});
  const size_t g = 3 * pr_.p.cores.size();
  bound_.assign(nb, Clock(g, 0));
  bound_write_.assign(nb, Clock(g, 0));
  in_live_.assign(nb, 0);
  int32_t max_core = 0;
  for (const Buffer& buf : b_.buffers) max_core = std::max(max_core, buf.core);
  live_.assign(static_cast<size_t>(max_core) + 2, {});
}

Status Replay::run() {
  const size_t streams = pr_.p.cores.size();
  const size_t g = 3 * streams;
  reset_records();
  cursors_.assign(g, Cursor{});
  clocks_.assign(g, Clock(g, 0));
  counts_.assign(streams, std::vector<int64_t>(kNumChannels, 0));
  fifo_.assign(streams, std::vector<std::deque<Clock>>(kNumChannels));
  for (size_t q = 0; q < g; ++q) {
    Cursor& c = cursors_[q];
    c.stream = static_cast<int32_t>(q / 3);
    c.queue = static_cast<Queue>(q % 3);
    set_syms(c.env, point_);
    advance(c);
  }
  for (bool progress = true; progress;) {
    progress = false;
    for (size_t q = 0; q < g; ++q) {
      Cursor& c = cursors_[q];
      while (c.head >= 0) {
        const Instr& in = code(c)[static_cast<size_t>(c.head)];
        if (std::holds_alternative<Barrier>(in.op) || !waits_ready(c, in)) break;
        QBC_RETURN_IF_ERROR(execute(c));
        advance(c);
        progress = true;
      }
    }
    // A barrier passes once every stream's queue holding one has its waits met.
    std::vector<Cursor*> at_barrier;
    for (size_t s = 0; s < streams; ++s) {
      for (int q = 0; q < kNumQueues; ++q) {
        Cursor& c = cursors_[3 * s + static_cast<size_t>(q)];
        if (c.head < 0) continue;
        const Instr& in = code(c)[static_cast<size_t>(c.head)];
        if (std::holds_alternative<Barrier>(in.op) && waits_ready(c, in)) {
          at_barrier.push_back(&c);
          break;
        }
      }
    }
    if (at_barrier.size() != streams) continue;
    const int32_t id =
        std::get<Barrier>(code(*at_barrier[0])[static_cast<size_t>(at_barrier[0]->head)].op).id;
    Clock all(g, 0);
    for (Cursor* c : at_barrier) {
      const Instr& in = code(*c)[static_cast<size_t>(c->head)];
      const int32_t cid = std::get<Barrier>(in.op).id;
      if (cid != id) {
        return violation(
            7, at() + ": " + instr_where(pr_, c->stream, c->head) + " reaches barrier " +
                   std::to_string(cid) + " while core " +
                   std::to_string(pr_.p.cores[static_cast<size_t>(at_barrier[0]->stream)].core) +
                   " reaches barrier " + std::to_string(id));
      }
      Clock& clock = clocks_[static_cast<size_t>(3 * c->stream + static_cast<int>(c->queue))];
      take_waits(*c, in, clock);
      join(all, clock);
    }
    for (Cursor* c : at_barrier) {
      const int gq = 3 * c->stream + static_cast<int>(c->queue);
      Clock& clock = clocks_[static_cast<size_t>(gq)];
      clock = all;
      ++clock[static_cast<size_t>(gq)];
      give_signals(*c, code(*c)[static_cast<size_t>(c->head)], clock);
      advance(*c);
    }
    executed_ += static_cast<int64_t>(streams);
    progress = true;
  }
  std::string stuck;
  for (const Cursor& c : cursors_) {
    if (c.head < 0) continue;
    const Instr& in = code(c)[static_cast<size_t>(c.head)];
    std::string why;
    for (int ch = 0; ch < kNumChannels; ++ch) {
      if ((in.wait >> ch & 1) &&
          counts_[static_cast<size_t>(c.stream)][static_cast<size_t>(ch)] <= 0) {
        why += (why.empty() ? "waits on " : ", ") +
               std::string(channel_name(static_cast<Channel>(ch)));
      }
    }
    if (why.empty()) why = "waits for the other cores at the barrier";
    stuck +=
        (stuck.empty() ? "" : "; ") + instr_where(pr_, c.stream, c.head) + where_env(c) + " " + why;
  }
  if (!stuck.empty()) return violation(6, at() + ": deadlock: " + stuck);
  for (size_t s = 0; s < streams; ++s) {
    for (int ch = 0; ch < kNumChannels; ++ch) {
      const int64_t left = counts_[s][static_cast<size_t>(ch)];
      if (left == 0) continue;
      return violation(6, at() + ": core " + std::to_string(pr_.p.cores[s].core) + " ends with " +
                              std::to_string(left) + " token(s) on " +
                              channel_name(static_cast<Channel>(ch)) +
                              " (a signal no wait consumes: the next call would start unbalanced)");
    }
  }
  return conflict_;
}

/// The instruction instances one stream executes at `env` with every iteration, counted up
/// to `budget` (more returns budget + 1).
int64_t count_instances(const std::vector<Instr>& code, size_t from, size_t to, Env& env,
                        int64_t budget) {
  int64_t n = 0;
  for (size_t i = from; i < to && n <= budget; ++i) {
    const Loop* loop = std::get_if<Loop>(&code[i].op);
    if (!loop) {
      ++n;
      continue;
    }
    int64_t trip = 0;
    eval_checked(loop->trip, env, &trip);
    const size_t end = i + 1 + static_cast<size_t>(loop->body);
    for (int64_t k = 0; k < trip && n <= budget; ++k) {
      env.loop[static_cast<size_t>(loop->var)] = k;
      n += count_instances(code, i + 1, end, env, budget - n);
    }
    i = end - 1;
  }
  return n;
}

}  // namespace

Status check_replay(const ProgramRef& pr, const std::vector<StreamShape>& shapes,
                    const std::vector<std::vector<std::vector<Access>>>& accs) {
  const Bundle& b = pr.b;
  for (size_t s = 0; s < pr.p.cores.size(); ++s) {
    const std::vector<Instr>& code = pr.p.cores[s].code;
    for (size_t i = 0; i < code.size(); ++i) {
      for (const Access& a : accs[s][i]) {
        if (a.write && b.buffers[static_cast<size_t>(a.ref.buffer)].purpose == Purpose::kWeights) {
          return violation(5, where(pr, static_cast<int>(s), static_cast<int>(i)) + ": writes " +
                                  buffer_name(b, a.ref.buffer) +
                                  ", a read-only weights buffer (weights never conflict because "
                                  "nothing writes them)");
        }
      }
    }
  }
  // The vertices replay independently: on the host's threads, the first failing one (in
  // vertex order) reported, as a sequential run would.
  const std::vector<SymPoint> points = sym_vertices(b.max_cache, pr.p.max_seq, pr.instances, false);
  std::map<int64_t, Placement> placements;  // per slot, shared by its vertices
  for (const SymPoint& p : points) {
    if (placements.count(p.slot) == 0) placements.emplace(p.slot, placement_at(b, p.slot));
  }
  return first_error_parallel(static_cast<int64_t>(points.size()), [&](int64_t i) {
    const SymPoint& p = points[static_cast<size_t>(i)];
    int64_t total = 0;
    for (const CoreProgram& cp : pr.p.cores) {
      Env env;
      set_syms(env, p);
      total += count_instances(cp.code, 0, cp.code.size(), env, kFullReplayInstances - total);
      if (total > kFullReplayInstances) break;
    }
    Replay r(pr, shapes, accs, placements.at(p.slot), p, total <= kFullReplayInstances);
    return r.run();
  });
}

}  // namespace qbc::isa
