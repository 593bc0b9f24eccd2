// Session::create: loads the LibTorch plugin (libqbc_ref_torch.so) on first use
// and calls its entry point. Keeping LibTorch out of the qbc binary's link makes
// every command that does not compute with tensors start in milliseconds
// instead of the ~0.4 s LibTorch takes to load.
#include <dlfcn.h>
#include <unistd.h>

#include <filesystem>
#include <mutex>

#include "qbc/ref/session.h"

namespace qbc::ref {
namespace {

using CreateFn = Session* (*)(const ir::Graph*, const ir::WeightReader*, const SessionOptions*,
                              Status*);

constexpr const char* kPluginName = "libqbc_ref_torch.so";

struct Plugin {
  CreateFn create = nullptr;
  std::string error;
};

// Next to the running executable first (an installed or built qbc), then the
// build tree's copy (tests, which run from another folder).
const Plugin& plugin() {
  static Plugin p;
  static std::once_flag once;
  std::call_once(once, [] {
    std::vector<std::string> candidates;
    std::error_code ec;
    const auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
    if (!ec) candidates.push_back((exe.parent_path() / kPluginName).string());
    candidates.push_back(QBC_REF_PLUGIN_BUILD_PATH);
    for (const std::string& path : candidates) {
      if (!std::filesystem::exists(path, ec)) continue;
      void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
      if (!handle) {
        p.error += std::string(" ") + path + ": " + dlerror() + ";";
        continue;
      }
      p.create = reinterpret_cast<CreateFn>(dlsym(handle, "qbc_ref_create_session"));
      if (p.create) return;
      p.error += " " + path + ": no entry point qbc_ref_create_session;";
    }
    if (p.error.empty()) {
      for (const std::string& c : candidates) p.error += " " + c + " (not found);";
    }
  });
  return p;
}

}  // namespace

StatusOr<std::unique_ptr<Session>> Session::create(const ir::Graph& g,
                                                   const ir::WeightReader& weights,
                                                   const SessionOptions& options) {
  const Plugin& p = plugin();
  if (!p.create) return internal_error("cannot load the LibTorch reference runtime", p.error);
  Status error;
  Session* s = p.create(&g, &weights, &options, &error);
  if (!s) return error;
  return std::unique_ptr<Session>(s);
}

}  // namespace qbc::ref
