// Loading a compiled model for the runtime (see qbc/runtime/model.h).
#include "qbc/runtime/model.h"

#include "qbc/isa/verify.h"

namespace qbc::runtime {

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

StatusOr<Model> load_model(const std::string& path, const LoadOptions& options) {
  Model m;
  mxq::ReadOptions ro;
  ro.verify_digests = options.verify_digests;
  QBC_ASSIGN_OR_RETURN(m.file, mxq::load_model(path, ro));
  QBC_ASSIGN_OR_RETURN(const isa::Scheme scheme,
                       pick_mode(*m.file.bundle, options.core_mode, path));
  DeviceOptions d;
  d.scheme = scheme;
  d.host_threads = options.host_threads;
  d.verify = [](const isa::Bundle& b) { return isa::verify(b); };
  auto device = Device::create(m.file.bundle, d);
  if (!device.ok()) return Status(Code::kDataLoss, path + ": " + device.status().message());
  m.device = std::move(device).value();
  return m;
}

}  // namespace qbc::runtime
