// The dependency-token analysis of one stream, first half (see token_streams.h): the region
// tree, access conflicts and same-iteration pairs.
#include "token_streams.h"

namespace qbc::npu::tokens {

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

}  // namespace qbc::npu::tokens
