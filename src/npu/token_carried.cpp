// The dependency-token analysis of one stream, second half (see token_streams.h): syncs
// carried from one loop iteration to the next, carriers and the flattened output.
#include "token_streams.h"

namespace qbc::npu::tokens {

// ---------------------------------------------------------------------------------------
// Iteration-to-iteration syncs

std::vector<std::array<StreamDeps::Clock, kNumQueues>> StreamDeps::iteration_clocks(
    const Region& r) const {
  using Clk = Clock;  // per queue: (iteration, position) as a time
  const auto join = [](Clk& a, const Clk& b) {
    for (size_t q = 0; q < a.size(); ++q) a[q] = std::max(a[q], b[q]);
  };
  // Two iterations of the body with clocks; before[p]: what each queue knew when element p
  // of the second iteration started (for a plain element: after its waits).
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
  return before;
}

std::pair<int, int> StreamDeps::first_carried(
    const Region& r, const std::vector<std::array<Clock, kNumQueues>>& before) const {
  // The first channel with a conflict from iteration k into a later one that is not yet
  // ordered, and its smallest distance. For element B only the elements of the earlier
  // iteration that B does not already know to have completed are tried, and a distance of
  // 1 ends the search: covered pairs are never tested.
  const size_t n = r.elems.size();
  for (int c = 0; c < kNumChannels; ++c) {
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
    if (found > 0) return {c, found};
  }
  return {-1, 0};
}

void StreamDeps::add_carried(Region& r, int best, int best_d) {
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

void StreamDeps::carried(Region& r) {
  if (r.elems.empty()) return;
  for (;;) {
    const auto [best, best_d] = first_carried(r, iteration_clocks(r));
    if (best < 0) return;
    add_carried(r, best, best_d);
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

}  // namespace qbc::npu::tokens
