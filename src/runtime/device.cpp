// The simulated device: memory, the per-core interpreters and the barrier scheduler (see
// qbc/runtime/device.h).
#include "qbc/runtime/device.h"

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <thread>
#include <utility>
#include <variant>
#include <vector>

#include "core.h"
#include "interpreter.h"
#include "thread_pool.h"
#include "validate.h"

namespace qbc::runtime {
namespace {

/// Zeroed host memory from calloc, so untouched pages of a large DRAM cost nothing.
struct Zeroed {
  uint8_t* p = nullptr;
  explicit Zeroed(int64_t bytes)
      : p(static_cast<uint8_t*>(std::calloc(static_cast<size_t>(std::max<int64_t>(bytes, 1)), 1))) {
  }
  ~Zeroed() { std::free(p); }
  Zeroed(const Zeroed&) = delete;
  Zeroed& operator=(const Zeroed&) = delete;
};

numerics::Rope decode_rope(const isa::RopeDesc& d) {
  numerics::Rope r;
  r.heads = d.heads;
  r.head_dim = d.head_dim;
  r.rotary_dim = d.rotary_dim;
  r.inv_freq = d.inv_freq;
  r.long_inv_freq = d.long_inv_freq;
  r.attention_factor = d.attention_factor;
  r.dynamic_factor = d.dynamic_factor;
  r.theta = d.theta;
  r.original_max_positions = d.original_max_positions;
  return r;
}

template <size_t... I>
std::vector<std::string> op_type_names(std::index_sequence<I...>) {
  return {isa::op_name(isa::Op(std::in_place_index<I>))...};
}

/// The name of the isa::Op alternative `index`.
const char* op_type_name(size_t index) {
  static const std::vector<std::string> names =
      op_type_names(std::make_index_sequence<std::variant_size_v<isa::Op>>{});
  return names[index].c_str();
}

/// Decoded::read_only: weights buffers in DRAM whose bytes (over every slot) no DMA store of
/// mode `m` can write.
std::vector<bool> read_only_buffers(const isa::Bundle& b, const isa::Mode& m) {
  auto hull = [&](const isa::Buffer& buf) {
    return std::pair<int64_t, int64_t>(
        buf.offset, buf.offset + (m.instances - 1) * buf.slot_stride + buf.bytes);
  };
  std::vector<std::pair<int64_t, int64_t>> written;
  for (const isa::Program* p : m.programs()) {
    for (const isa::CoreProgram& cp : p->cores) {
      for (const isa::Instr& in : cp.code) {
        const auto* d = std::get_if<isa::Dma>(&in.op);
        if (d == nullptr || !d->dst.valid()) continue;
        const isa::Buffer& dst = b.buffers[static_cast<size_t>(d->dst.buffer)];
        if (dst.space == isa::Space::kDram) written.push_back(hull(dst));
      }
    }
  }
  std::vector<bool> ro(b.buffers.size(), false);
  for (size_t i = 0; i < b.buffers.size(); ++i) {
    const isa::Buffer& buf = b.buffers[i];
    if (buf.space != isa::Space::kDram || buf.purpose != isa::Purpose::kWeights) continue;
    const auto span = hull(buf);  // not a structured binding: C++17 lambdas cannot capture one
    const auto lo = span.first, hi = span.second;
    ro[i] = std::none_of(written.begin(), written.end(),
                         [&](const auto& w) { return w.first < hi && lo < w.second; });
  }
  return ro;
}

double steady_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::string schemes_present(const isa::Bundle& b) {
  std::string s;
  for (const isa::Mode& m : b.modes)
    s += (s.empty() ? "" : ", ") + std::string(isa::scheme_name(m.scheme));
  return s.empty() ? "none" : s;
}

}  // namespace

struct Device::Impl {
  std::shared_ptr<const isa::Bundle> bundle;
  const isa::Mode* mode = nullptr;
  BundleLayout layout;
  std::unique_ptr<Zeroed> dram;
  std::vector<std::unique_ptr<Zeroed>> sram;  // per physical core of the mode
  std::vector<CoreCounters> counters;         // per physical core
  std::vector<CoreData> data;                 // per physical core
  Decoded decoded;
  std::unique_ptr<ThreadPool> pool;
  std::vector<Interpreter> prefill, decode, span;  // per stream of each program
  bool profile = false;                            // QBC_EXEC_PROFILE: time every instruction
  bool profile_cpu = false;                        // QBC_EXEC_PROFILE=cpu: in thread CPU time
  bool counters_only = false;                      // DeviceOptions::counters_only: no memory
  std::vector<int32_t> placement;                  // DeviceOptions::cores
  std::vector<uint8_t> weights;                    // DeviceOptions::take_image: the weight memory
  uint8_t* mapped = nullptr;  // or the bundle's viewed image (Bundle::image_view; the bundle,
                              // which this device holds, keeps it alive)
  int64_t weights_base = 0, weights_bytes = 0;
  ExecTrace* trace = nullptr;  // Device::set_trace

  ~Impl();
  Status run(isa::Phase phase, int slot, int64_t start, int64_t seq);
  /// Appends a recorded call to `trace`.
  void record_call(isa::Phase phase, int slot, int64_t start, int64_t seq, double call_t0,
                   std::vector<std::vector<ExecSpan>> spans);
  /// The DRAM the cores address (the block and the taken weight image).
  DramMemory memory() {
    return DramMemory{dram == nullptr ? nullptr : dram->p,
                      mapped            ? mapped
                      : weights.empty() ? nullptr
                                        : weights.data(),
                      weights_base, weights_bytes};
  }
};

Device::Impl::~Impl() {
  if (!profile) return;
  // The time per instruction type over every core (host seconds; cores that ran side by
  // side on host threads count twice).
  OpProfile sum;
  for (const CoreData& d : data) {
    for (size_t k = 0; k < OpProfile::kOps; ++k) {
      sum.count[k] += d.profile.count[k];
      sum.seconds[k] += d.profile.seconds[k];
    }
  }
  double total = 0;
  for (double s : sum.seconds) total += s;
  std::fprintf(stderr, "qbc executor profile (QBC_EXEC_PROFILE%s): %.3f s in instructions\n",
               profile_cpu ? "=cpu, thread CPU time" : "", total);
  std::vector<size_t> order;
  for (size_t k = 0; k < OpProfile::kOps; ++k) {
    if (sum.count[k] > 0) order.push_back(k);
  }
  std::sort(order.begin(), order.end(),
            [&](size_t a, size_t b) { return sum.seconds[a] > sum.seconds[b]; });
  for (size_t k : order) {
    std::fprintf(stderr, "  %-10s %12lld instr %10.3f s %5.1f %% %8.2f us/instr\n", op_type_name(k),
                 static_cast<long long>(sum.count[k]), sum.seconds[k],
                 total > 0 ? 100.0 * sum.seconds[k] / total : 0.0,
                 1e6 * sum.seconds[k] / static_cast<double>(sum.count[k]));
  }
}

Device::Device(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Device::~Device() = default;

StatusOr<std::shared_ptr<Device>> Device::create(std::shared_ptr<const isa::Bundle> bundle,
                                                 const DeviceOptions& options) {
  if (bundle == nullptr) return invalid_argument("Device::create: no bundle");
  const isa::Bundle& b = *bundle;
  if (options.verify) QBC_RETURN_IF_ERROR(options.verify(b).with_context("bundle"));
  if (options.host_threads < 0)
    return invalid_argument("host_threads ", options.host_threads, " is negative");
  if (!options.counters_only && ((b.embed_rows > 0 && b.embedding_size() == 0) ||
                                 (b.dram.weights > 0 && b.image_size() == 0))) {
    return failed_precondition(
        "the bundle holds no weights (a plan compiled from shapes only): "
        "compile it with its weights to run it");
  }
  auto impl = std::make_unique<Impl>();
  for (const isa::Mode& m : b.modes) {
    if (m.scheme == options.scheme) {
      impl->mode = &m;
      break;
    }
  }
  if (impl->mode == nullptr) {
    return not_found("bundle has no mode for inferenceScheme '", isa::scheme_name(options.scheme),
                     "' (present: ", schemes_present(b), ")");
  }
  const isa::Mode& m = *impl->mode;
  StatusOr<BundleLayout> layout = validate_bundle(b, m);
  if (!layout.ok()) return layout.status().with_context("mode ", isa::scheme_name(m.scheme));
  impl->layout = *layout;
  impl->counters_only = options.counters_only;
  for (int32_t p : options.cores) {
    if (p < 0 || p >= b.target_cores)
      return invalid_argument("core ", p, " is outside the ", b.target_cores, "-core target");
  }
  impl->placement = options.cores;
  const int cores = m.cores_per_instance * m.instances;
  if (!impl->counters_only) {
    impl->dram = std::make_unique<Zeroed>(impl->layout.dram_size);
    if (impl->dram->p == nullptr) {
      return resource_exhausted("cannot allocate ", impl->layout.dram_size,
                                " bytes of simulated DRAM");
    }
    if (!b.image_view.empty() && b.image_view.size > 0) {
      // The file's weights section is the weight memory: nothing is copied, and the DRAM
      // block's pages under it are never touched (they cost nothing).
      impl->mapped = b.image_view.data;
      impl->weights_base = b.image_base;
      impl->weights_bytes = b.image_view.size;
    } else if (options.take_image != nullptr && options.take_image->size() == b.image.size() &&
               !b.image.empty()) {
      // The image becomes the weight memory (the DRAM block's untouched pages cost nothing).
      impl->weights.swap(*options.take_image);
      impl->weights_base = b.image_base;
      impl->weights_bytes = static_cast<int64_t>(impl->weights.size());
    } else if (!b.image.empty()) {
      std::memcpy(impl->dram->p + b.image_base, b.image.data(), b.image.size());
    }
    for (int i = 0; i < cores; ++i) {
      impl->sram.push_back(std::make_unique<Zeroed>(b.sram_bytes));
      if (impl->sram.back()->p == nullptr)
        return resource_exhausted("cannot allocate the SRAM of core ", i);
    }
  }
  impl->counters.resize(static_cast<size_t>(cores));
  impl->data.resize(static_cast<size_t>(cores));
  for (CoreData& d : impl->data) {
    d.attentions.resize(b.attentions.size());
    d.ropes.resize(b.ropes.size());
  }
  for (const isa::RopeDesc& r : b.ropes) impl->decoded.ropes.push_back(decode_rope(r));
  impl->decoded.read_only = read_only_buffers(b, m);
  const int threads = options.host_threads > 0
                          ? options.host_threads
                          : std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  impl->pool = std::make_unique<ThreadPool>(threads);
  const char* prof = std::getenv("QBC_EXEC_PROFILE");
  impl->profile = prof != nullptr;
  impl->profile_cpu = prof != nullptr && std::string(prof) == "cpu";
  for (size_t i = 0; i < m.prefill.cores.size(); ++i)
    impl->prefill.emplace_back(b, m.prefill, i, impl->layout.loop_vars[0]);
  for (size_t i = 0; i < m.decode.cores.size(); ++i)
    impl->decode.emplace_back(b, m.decode, i, impl->layout.loop_vars[1]);
  for (size_t i = 0; i < m.span.cores.size(); ++i)
    impl->span.emplace_back(b, m.span, i, impl->layout.loop_vars[2]);
  impl->bundle = std::move(bundle);
  return std::shared_ptr<Device>(new Device(std::move(impl)));
}

Status Device::run(isa::Phase phase, int slot, int64_t start, int64_t seq) {
  return impl_->run(phase, slot, start, seq);
}

Status Device::Impl::run(isa::Phase phase, int slot, int64_t start, int64_t seq) {
  const isa::Bundle& b = *bundle;
  const isa::Program& p = mode->program(phase);
  const std::string where =
      std::string(isa::scheme_name(mode->scheme)) + " " + isa::phase_name(phase);
  if (p.cores.empty())
    return failed_precondition(where, ": the file has no ", isa::phase_name(phase), " program");
  if (slot < 0 || slot >= mode->instances)
    return invalid_argument(where, ": slot ", slot, " outside the mode's ", mode->instances,
                            " instances");
  if (!placement.empty() &&
      static_cast<size_t>((slot + 1) * mode->cores_per_instance) > placement.size()) {
    return invalid_argument(where, ": slot ", slot, " has no core (the cores given place ",
                            placement.size() / static_cast<size_t>(mode->cores_per_instance),
                            " slot(s))");
  }
  if (seq < 1 || seq > p.max_seq || start < 0)
    return invalid_argument(where, ": ", seq, " tokens at position ", start,
                            " (the program takes 1..", p.max_seq, ")");
  if (start + seq > b.max_cache) {
    return resource_exhausted(where, ": position ", start, " + ", seq,
                              " tokens exceed the KV cache capacity max_cache ", b.max_cache);
  }
  std::vector<Interpreter>& streams = phase == isa::Phase::kPrefill  ? prefill
                                      : phase == isa::Phase::kDecode ? decode
                                                                     : span;
  std::vector<Core> cores;
  cores.reserve(streams.size());
  for (size_t i = 0; i < streams.size(); ++i) {
    streams[i].start(start, seq, slot);
    const int32_t index = p.cores[i].core;
    const size_t phys = static_cast<size_t>(slot * mode->cores_per_instance + index);
    cores.push_back(Core{b, decoded, streams[i].env(), counters_only ? nullptr : sram[phys]->p,
                         memory(), layout.dram_size, slot, index, counters[phys], data[phys], *pool,
                         profile, profile_cpu, counters_only});
  }
  // SRAM aliases do not outlive the call: the host may write DRAM between calls.
  struct Materialize {
    std::vector<Core>& cores;
    ~Materialize() {
      for (Core& c : cores) c.materialize(0, INT64_MAX);
    }
  } materialize{cores};
  const size_t n = streams.size();
  // Device::set_trace: this call's spans, per stream, on the clock of its start.
  const bool record = trace != nullptr && trace->wants(phase);
  const double call_t0 = record ? steady_seconds() : 0.0;
  std::vector<std::vector<ExecSpan>> spans(record ? n : 0);
  for (size_t i = 0; i < spans.size(); ++i) {
    cores[i].trace = &spans[i];
    cores[i].trace_t0 = call_t0;
  }
  std::vector<Status> status(n);
  std::vector<const isa::Barrier*> at(n, nullptr);
  std::vector<bool> waiting(n, false);
  std::vector<size_t> runnable(n);
  for (size_t i = 0; i < n; ++i) runnable[i] = i;
  while (!runnable.empty()) {
    // Every runnable core runs to its next barrier or its end; cores touch shared DRAM only
    // across barriers, so the order and the threads do not matter.
    pool->parallel_for(static_cast<int64_t>(runnable.size()), [&](int64_t k) {
      const size_t i = runnable[static_cast<size_t>(k)];
      status[i] = streams[i].run(cores[i], &at[i]);
    });
    for (size_t i = 0; i < n; ++i) {
      if (!status[i].ok()) return status[i].with_context(where);
    }
    for (size_t i : runnable) waiting[i] = at[i] != nullptr;
    runnable.clear();
    std::map<int32_t, std::vector<size_t>> arrived;
    for (size_t i = 0; i < n; ++i) {
      if (waiting[i]) arrived[at[i]->id].push_back(i);
    }
    for (const auto& [id, who] : arrived) {
      const int32_t want = at[who.front()]->cores;
      for (size_t i : who) {
        if (at[i]->cores != want) {
          return invalid_argument(where, ": barrier ", id, " counts ", want, " cores on core ",
                                  p.cores[who.front()].core, " and ", at[i]->cores, " on core ",
                                  p.cores[i].core);
        }
      }
      if (static_cast<int32_t>(who.size()) > want) {
        return invalid_argument(where, ": ", who.size(), " cores reached barrier ", id,
                                ", which counts ", want);
      }
      if (static_cast<int32_t>(who.size()) == want) {
        for (size_t i : who) {
          waiting[i] = false;
          runnable.push_back(i);
        }
      }
    }
    if (runnable.empty() && !arrived.empty()) {
      std::string s;
      for (const auto& [id, who] : arrived) {
        s += (s.empty() ? "" : "; ") + std::string("barrier ") + std::to_string(id) + ": " +
             std::to_string(who.size()) + " of " + std::to_string(at[who.front()]->cores) +
             " cores";
      }
      return failed_precondition(where, ": deadlock, no barrier can complete (", s,
                                 "; the other cores have ended)");
    }
  }
  if (record) record_call(phase, slot, start, seq, call_t0, std::move(spans));
  return ok_status();
}

void Device::Impl::record_call(isa::Phase phase, int slot, int64_t start, int64_t seq,
                               double call_t0, std::vector<std::vector<ExecSpan>> spans) {
  const double seconds = steady_seconds() - call_t0;
  if (trace->epoch < 0) trace->epoch = call_t0;
  ExecCall c;
  c.phase = phase;
  c.start = start;
  c.seq = seq;
  c.slot = slot;
  c.offset_s = call_t0 - trace->epoch;
  c.seconds = seconds;
  c.core_end_s.assign(static_cast<size_t>(mode->cores_per_instance), 0.0);
  for (std::vector<ExecSpan>& core : spans) {
    for (const ExecSpan& sp : core) {
      double& end = c.core_end_s[static_cast<size_t>(sp.core)];
      end = std::max(end, sp.end);
    }
    c.spans.insert(c.spans.end(), core.begin(), core.end());
  }
  trace->calls.push_back(std::move(c));
}

uint8_t* Device::dram(int64_t address, int64_t bytes) {
  if (address < 0 || bytes < 0 || address + bytes > impl_->layout.dram_size) return nullptr;
  return impl_->memory().at(address, bytes);
}

int64_t Device::dram_size() const { return impl_->layout.dram_size; }

int64_t Device::address(int32_t buffer, int slot) const {
  const isa::Buffer& b = impl_->bundle->buffers[static_cast<size_t>(buffer)];
  return b.offset + static_cast<int64_t>(slot) * b.slot_stride;
}

const std::vector<CoreCounters>& Device::counters() const { return impl_->counters; }

int32_t Device::physical_core(int32_t logical) const {
  const auto& p = impl_->placement;
  return logical >= 0 && static_cast<size_t>(logical) < p.size() ? p[static_cast<size_t>(logical)]
                                                                 : logical;
}

void Device::set_trace(ExecTrace* trace) { impl_->trace = trace; }

void Device::reset_counters() {
  for (CoreCounters& c : impl_->counters) c = CoreCounters();
}

const isa::Bundle& Device::bundle() const { return *impl_->bundle; }
const isa::Mode& Device::mode() const { return *impl_->mode; }

}  // namespace qbc::runtime
