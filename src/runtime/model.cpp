// Loading a compiled model for the runtime (see qbc/runtime/model.h).
#include "qbc/runtime/model.h"

#include <algorithm>

#include "qbc/isa/verify.h"

namespace qbc::runtime {

std::vector<std::string> core_modes() {
  std::vector<std::string> out = {"auto"};
  for (const isa::SchemeInfo& s : isa::kSchemes) out.push_back(s.name);
  return out;
}

StatusOr<isa::Scheme> pick_mode(const isa::Bundle& bundle, const std::string& core_mode,
                                const std::string& path) {
  std::string have;
  for (const isa::Mode& m : bundle.modes)
    have += std::string(have.empty() ? "" : ", ") + isa::scheme_name(m.scheme);
  if (core_mode == "auto") {
    if (bundle.modes.size() == 1) return bundle.modes[0].scheme;
    return invalid_argument(path, ": holds the modes ", have,
                            "; choose one with --core-mode (auto needs a one-mode file)");
  }
  for (const isa::Mode& m : bundle.modes)
    if (core_mode == isa::scheme_name(m.scheme)) return m.scheme;
  return invalid_argument(path, ": has no mode '", core_mode.substr(0, 32), "' (it holds ", have,
                          ")");
}

StatusOr<std::vector<int32_t>> place_cores(const isa::Bundle& bundle, const isa::Mode& mode,
                                           const std::vector<std::string>& cores) {
  std::vector<int32_t> out;
  if (cores.empty()) return out;
  const int32_t clusters = std::max(1, bundle.target_clusters);
  const int32_t per = bundle.target_cores / clusters;
  std::vector<bool> seen(static_cast<size_t>(bundle.target_cores), false);
  for (const std::string& c : cores) {
    const size_t colon = c.find(':');
    auto number = [](const std::string& t, int32_t* v) {
      if (t.empty() || t.size() > 4 || t.find_first_not_of("0123456789") != std::string::npos)
        return false;
      *v = std::stoi(t);
      return true;
    };
    int32_t cl = -1, k = -1;
    if (colon == std::string::npos || !number(c.substr(0, colon), &cl) ||
        !number(c.substr(colon + 1), &k)) {
      return invalid_argument("--cores '", c.substr(0, 32), "': expected cluster:core, e.g. 0:1");
    }
    if (cl >= clusters || k >= per) {
      return invalid_argument("--cores '", c, "': target '", bundle.target, "' has ", clusters,
                              " cluster(s) of ", per, " cores (0:0 .. ", clusters - 1, ":", per - 1,
                              ")");
    }
    const int32_t phys = cl * per + k;
    if (seen[static_cast<size_t>(phys)]) return invalid_argument("--cores lists '", c, "' twice");
    seen[static_cast<size_t>(phys)] = true;
    out.push_back(phys);
  }
  const int32_t n = static_cast<int32_t>(out.size());
  const char* scheme = isa::scheme_name(mode.scheme);
  auto one_cluster = [&] {
    for (int32_t p : out)
      if (p / per != out.front() / per) return false;
    return true;
  };
  switch (isa::scheme_info(mode.scheme).placement) {
    case isa::CorePlacement::kCorePerSlot:
      if (n > mode.instances) {
        return invalid_argument("--cores lists ", n, " cores; the ", scheme,
                                " mode of this file serves ", mode.instances,
                                " sequence slot(s), one core each");
      }
      break;
    case isa::CorePlacement::kOneCluster:
      if (n != mode.cores_per_instance * mode.instances || !one_cluster()) {
        return invalid_argument("--cores: ", scheme, " runs on the ",
                                mode.cores_per_instance * mode.instances,
                                " cores of one cluster (e.g. 0:0,0:1,0:2,0:3)");
      }
      break;
    case isa::CorePlacement::kAllCores:
      if (n != mode.cores_per_instance * mode.instances) {
        return invalid_argument("--cores: ", scheme, " runs on all ",
                                mode.cores_per_instance * mode.instances, " cores");
      }
      break;
  }
  return out;
}

StatusOr<Model> load_model(const std::string& path, const LoadOptions& options) {
  Model m;
  mxq::ReadOptions ro;
  ro.verify_digests = options.verify_digests;
  QBC_ASSIGN_OR_RETURN(m.file, mxq::load_model(path, ro));
  QBC_ASSIGN_OR_RETURN(const isa::Scheme scheme,
                       pick_mode(*m.file.bundle, options.core_mode, path));
  DeviceOptions d;
  d.scheme = scheme;
  for (const isa::Mode& mode : m.file.bundle->modes) {
    if (mode.scheme != scheme) continue;
    auto placed = place_cores(*m.file.bundle, mode, options.cores);
    if (!placed.ok()) return placed.status().with_context(path);
    d.cores = std::move(placed).value();
  }
  d.host_threads = options.host_threads;
  d.verify = [](const isa::Bundle& b) { return isa::verify(b); };
  d.take_image = &m.file.bundle->image;  // the weights live once, in the device
  auto device = Device::create(m.file.bundle, d);
  if (!device.ok()) return Status(Code::kDataLoss, path + ": " + device.status().message());
  m.device = std::move(device).value();
  return m;
}

}  // namespace qbc::runtime
