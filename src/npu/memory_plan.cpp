// The memory plan report and the fit check (see qbc/npu/memory_plan.h).
#include "qbc/npu/memory_plan.h"

#include <algorithm>
#include <climits>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <sstream>

namespace qbc::npu {
std::string human_bytes(int64_t bytes) {
  char buf[64];
  const double b = static_cast<double>(bytes);
  if (b >= 1024.0 * 1024 * 1024) {
    std::snprintf(buf, sizeof(buf), "%.2f GiB", b / (1024.0 * 1024 * 1024));
  } else if (b >= 1024.0 * 1024) {
    std::snprintf(buf, sizeof(buf), "%.1f MiB", b / (1024.0 * 1024));
  } else if (b >= 1024.0) {
    std::snprintf(buf, sizeof(buf), "%.1f KiB", b / 1024.0);
  } else {
    std::snprintf(buf, sizeof(buf), "%lld B", static_cast<long long>(bytes));
  }
  return buf;
}

int64_t program_size_estimate(const isa::Bundle& b);

MemoryReport memory_report(const isa::Bundle& b) {
  MemoryReport r;
  r.dram = b.dram;
  r.device_bytes = b.dram_bytes;
  r.sram_bytes = b.sram_bytes;
  r.sram_peak.assign(static_cast<size_t>(std::max(1, b.target_cores)), 0);
  for (const isa::Buffer& buf : b.buffers) {
    if (buf.space != isa::Space::kSram || buf.core < 0 ||
        buf.core >= static_cast<int32_t>(r.sram_peak.size()))
      continue;
    int64_t& p = r.sram_peak[static_cast<size_t>(buf.core)];
    p = std::max(p, buf.offset + buf.bytes);
  }
  // KV growth: a buffer of Purpose kKv whose capacity equals the cache grows per position.
  for (const isa::Buffer& buf : b.buffers) {
    if (buf.purpose != isa::Purpose::kKv || buf.shape.size() != 3) continue;
    const int64_t per_pos = buf.bytes / std::max<int64_t>(1, buf.shape[1]);
    if (buf.shape[1] == b.max_cache) {
      r.kv_bytes_per_position += per_pos;
    } else {
      r.kv_fixed_bytes += buf.bytes;
    }
  }
  r.program_bytes = program_size_estimate(b);
  return r;
}

int64_t program_size_estimate(const isa::Bundle& b) {
  // Encoded size: a 32-byte header per instruction plus 16 bytes per expression node (the
  // MXQ issue replaces this with the encoded section size).
  int64_t bytes = 0;
  for (const isa::Mode& m : b.modes) {
    for (const isa::Program* p : m.programs()) {
      for (const isa::CoreProgram& c : p->cores) bytes += static_cast<int64_t>(c.code.size()) * 64;
    }
  }
  return bytes;
}

std::string memory_text(const isa::Bundle& b, const MemoryReport& r) {
  std::ostringstream os;
  os << "DRAM (" << human_bytes(r.device_bytes) << " device, " << b.batch << " sequence slot"
     << (b.batch == 1 ? "" : "s") << " of " << b.max_cache << " positions)\n";
  const struct {
    const char* name;
    int64_t bytes;
  } rows[] = {
      {"weights", r.dram.weights}, {"kv cache", r.dram.kv}, {"activations", r.dram.activations},
      {"scratch", r.dram.scratch}, {"io", r.dram.io},       {"reserve", r.dram.reserve}};
  for (const auto& row : rows) {
    char line[128];
    std::snprintf(line, sizeof(line), "  %-12s %14lld  %s\n", row.name,
                  static_cast<long long>(row.bytes), human_bytes(row.bytes).c_str());
    os << line;
  }
  char line[160];
  std::snprintf(line, sizeof(line), "  %-12s %14lld  %s of %s (%.1f %%)\n", "total",
                static_cast<long long>(r.dram.total()), human_bytes(r.dram.total()).c_str(),
                human_bytes(r.device_bytes).c_str(),
                100.0 * static_cast<double>(r.dram.total()) /
                    static_cast<double>(std::max<int64_t>(1, r.device_bytes)));
  os << line;
  os << "DRAM buffers (slot 0)\n";
  for (const isa::Buffer& buf : b.buffers) {
    if (buf.space != isa::Space::kDram) continue;
    std::snprintf(line, sizeof(line), "  %#14llx %12lld  %-11s %s\n",
                  static_cast<unsigned long long>(buf.offset), static_cast<long long>(buf.bytes),
                  isa::purpose_name(buf.purpose), buf.name.c_str());
    os << line;
  }
  os << "SRAM peak per core (" << human_bytes(r.sram_bytes) << " each)\n";
  for (size_t c = 0; c < r.sram_peak.size(); ++c) {
    std::snprintf(line, sizeof(line), "  core %zu  %10lld  %s (%.1f %%)\n", c,
                  static_cast<long long>(r.sram_peak[c]), human_bytes(r.sram_peak[c]).c_str(),
                  100.0 * static_cast<double>(r.sram_peak[c]) /
                      static_cast<double>(std::max<int64_t>(1, r.sram_bytes)));
    os << line;
  }
  os << "program " << r.program_bytes << " bytes (" << human_bytes(r.program_bytes) << ")\n";
  return os.str();
}

std::string memory_json(const MemoryReport& r) {
  nlohmann::ordered_json j;
  j["dram"]["weights_bytes"] = r.dram.weights;
  j["dram"]["kv_bytes"] = r.dram.kv;
  j["dram"]["activation_bytes"] = r.dram.activations;
  j["dram"]["scratch_bytes"] = r.dram.scratch;
  j["dram"]["io_bytes"] = r.dram.io;
  j["dram"]["reserve_bytes"] = r.dram.reserve;
  j["dram"]["total_bytes"] = r.dram.total();
  j["dram"]["device_bytes"] = r.device_bytes;
  j["sram_peak_bytes"] = r.sram_peak;
  j["sram_bytes_per_core"] = r.sram_bytes;
  j["program_bytes"] = r.program_bytes;
  j["kv_bytes_per_position"] = r.kv_bytes_per_position;
  return j.dump(2) + "\n";
}

FitLimits fit_limits(const isa::Bundle& b, const MemoryReport& r) {
  FitLimits f;
  f.fits = r.dram.total() <= r.device_bytes;
  const int64_t per_seq =
      (r.dram.kv + r.dram.activations + r.dram.scratch + r.dram.io) / std::max<int64_t>(1, b.batch);
  const int64_t fixed = r.dram.weights + r.dram.reserve;
  // Largest cache: only the global layers' KV grows with it.
  const int64_t kv_now = r.dram.kv / std::max<int64_t>(1, b.batch);
  const int64_t other = per_seq - kv_now;
  const int64_t room = r.device_bytes - fixed - b.batch * (other + r.kv_fixed_bytes);
  if (room > 0 && r.kv_bytes_per_position > 0)
    f.max_cache = room / (b.batch * r.kv_bytes_per_position);
  if (r.kv_bytes_per_position == 0 && room >= 0) f.max_cache = INT64_MAX;  // rings only
  f.max_batch = per_seq > 0 ? std::max<int64_t>(0, (r.device_bytes - fixed) / per_seq) : 0;
  return f;
}

Status check_fit(const isa::Bundle& b, const MemoryReport& r) {
  const int64_t total = r.dram.total();
  if (total <= r.device_bytes) return ok_status();
  const int64_t per_seq =
      (r.dram.kv + r.dram.activations + r.dram.scratch + r.dram.io) / std::max<int64_t>(1, b.batch);
  const int64_t fixed = r.dram.weights + r.dram.reserve;
  const int64_t other = per_seq - r.dram.kv / std::max<int64_t>(1, b.batch);
  const FitLimits lim = fit_limits(b, r);
  const int64_t max_cache = std::min(lim.max_cache, b.max_cache);
  const int64_t max_batch = lim.max_batch;
  const char* decides = "kv cache";
  int64_t biggest = r.dram.kv;
  for (const auto& [name, bytes] : {std::pair<const char*, int64_t>{"weights", r.dram.weights},
                                    {"activations", r.dram.activations},
                                    {"scratch", r.dram.scratch},
                                    {"io", r.dram.io}}) {
    if (bytes > biggest) {
      biggest = bytes;
      decides = name;
    }
  }
  std::ostringstream os;
  os << "the model does not fit target '" << b.target << "': it needs " << human_bytes(total)
     << " of DRAM, the device has " << human_bytes(r.device_bytes) << "\n";
  char line[128];
  const struct {
    const char* name;
    int64_t bytes;
  } rows[] = {{"weights", r.dram.weights},
              {"kv cache", r.dram.kv},
              {"activations", r.dram.activations},
              {"scratch", r.dram.scratch},
              {"io", r.dram.io},
              {"reserve", r.dram.reserve},
              {"total", total},
              {"device", r.device_bytes}};
  for (const auto& row : rows) {
    std::snprintf(line, sizeof(line), "  %-12s %16lld  %s\n", row.name,
                  static_cast<long long>(row.bytes), human_bytes(row.bytes).c_str());
    os << line;
  }
  os << "  the largest term is the " << decides << " (" << human_bytes(biggest) << "); over by "
     << human_bytes(total - r.device_bytes) << "\n";
  if (max_cache > 0) {
    os << "  largest llm.attributes.maxCacheLength that fits: " << max_cache << " (now "
       << b.max_cache << ")\n";
  } else {
    os << "  no maxCacheLength fits: the weights, reserve and per-sequence buffers alone need "
       << human_bytes(fixed + b.batch * other) << "\n";
  }
  os << "  largest llm.attributes.runtime.batchSize that fits: " << max_batch << " (now " << b.batch
     << ")";
  return resource_exhausted(os.str());
}

}  // namespace qbc::npu
