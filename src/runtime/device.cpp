// The simulated device: memory, the per-core interpreters and the barrier scheduler (see
// qbc/runtime/device.h).
#include "qbc/runtime/device.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <thread>
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
  std::vector<Interpreter> prefill, decode;  // per stream of each program

  Status run(isa::Phase phase, int slot, int64_t start, int64_t seq);
};

Device::Device(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Device::~Device() = default;

StatusOr<std::shared_ptr<Device>> Device::create(std::shared_ptr<const isa::Bundle> bundle,
                                                 const DeviceOptions& options) {
  if (bundle == nullptr) return invalid_argument("Device::create: no bundle");
  const isa::Bundle& b = *bundle;
  if (options.verify) QBC_RETURN_IF_ERROR(options.verify(b).with_context("bundle"));
  if (options.host_threads < 0)
    return invalid_argument("host_threads ", options.host_threads, " is negative");
  if ((b.embed_rows > 0 && b.embedding.empty()) || (b.dram.weights > 0 && b.image.empty())) {
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
  impl->dram = std::make_unique<Zeroed>(impl->layout.dram_size);
  if (impl->dram->p == nullptr) {
    return resource_exhausted("cannot allocate ", impl->layout.dram_size,
                              " bytes of simulated DRAM");
  }
  if (!b.image.empty()) std::memcpy(impl->dram->p + b.image_base, b.image.data(), b.image.size());
  const int cores = m.cores_per_instance * m.instances;
  for (int i = 0; i < cores; ++i) {
    impl->sram.push_back(std::make_unique<Zeroed>(b.sram_bytes));
    if (impl->sram.back()->p == nullptr)
      return resource_exhausted("cannot allocate the SRAM of core ", i);
  }
  impl->counters.resize(static_cast<size_t>(cores));
  impl->data.resize(static_cast<size_t>(cores));
  for (CoreData& d : impl->data) d.attentions.resize(b.attentions.size());
  for (const isa::RopeDesc& r : b.ropes) impl->decoded.ropes.push_back(decode_rope(r));
  const int threads = options.host_threads > 0
                          ? options.host_threads
                          : std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  impl->pool = std::make_unique<ThreadPool>(threads);
  for (size_t i = 0; i < m.prefill.cores.size(); ++i)
    impl->prefill.emplace_back(b, m.prefill, i, impl->layout.loop_vars[0]);
  for (size_t i = 0; i < m.decode.cores.size(); ++i)
    impl->decode.emplace_back(b, m.decode, i, impl->layout.loop_vars[1]);
  impl->bundle = std::move(bundle);
  return std::shared_ptr<Device>(new Device(std::move(impl)));
}

Status Device::run(isa::Phase phase, int slot, int64_t start, int64_t seq) {
  return impl_->run(phase, slot, start, seq);
}

Status Device::Impl::run(isa::Phase phase, int slot, int64_t start, int64_t seq) {
  const isa::Bundle& b = *bundle;
  const isa::Program& p = phase == isa::Phase::kPrefill ? mode->prefill : mode->decode;
  const std::string where =
      std::string(isa::scheme_name(mode->scheme)) + " " + isa::phase_name(phase);
  if (slot < 0 || slot >= mode->instances)
    return invalid_argument(where, ": slot ", slot, " outside the mode's ", mode->instances,
                            " instances");
  if (seq < 1 || seq > p.max_seq || start < 0)
    return invalid_argument(where, ": ", seq, " tokens at position ", start,
                            " (the program takes 1..", p.max_seq, ")");
  if (start + seq > b.max_cache) {
    return resource_exhausted(where, ": position ", start, " + ", seq,
                              " tokens exceed the KV cache capacity max_cache ", b.max_cache);
  }
  std::vector<Interpreter>& streams = phase == isa::Phase::kPrefill ? prefill : decode;
  std::vector<Core> cores;
  cores.reserve(streams.size());
  for (size_t i = 0; i < streams.size(); ++i) {
    streams[i].start(start, seq, slot);
    const int32_t index = p.cores[i].core;
    const size_t phys = static_cast<size_t>(slot * mode->cores_per_instance + index);
    cores.push_back(Core{b, decoded, streams[i].env(), sram[phys]->p, dram->p, layout.dram_size,
                         slot, index, counters[phys], data[phys], *pool});
  }
  const size_t n = streams.size();
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
  return ok_status();
}

uint8_t* Device::dram(int64_t address, int64_t bytes) {
  if (address < 0 || bytes < 0 || address + bytes > impl_->layout.dram_size) return nullptr;
  return impl_->dram->p + address;
}

int64_t Device::dram_size() const { return impl_->layout.dram_size; }

int64_t Device::address(int32_t buffer, int slot) const {
  const isa::Buffer& b = impl_->bundle->buffers[static_cast<size_t>(buffer)];
  return b.offset + static_cast<int64_t>(slot) * b.slot_stride;
}

const std::vector<CoreCounters>& Device::counters() const { return impl_->counters; }

void Device::reset_counters() {
  for (CoreCounters& c : impl_->counters) c = CoreCounters();
}

const isa::Bundle& Device::bundle() const { return *impl_->bundle; }
const isa::Mode& Device::mode() const { return *impl_->mode; }

}  // namespace qbc::runtime
