// `qbc verify` (see qbc/driver/verify_compiled.h).
#include "qbc/driver/verify_compiled.h"

#include <cstdint>
#include <nlohmann/json.hpp>
#include <vector>

#include "qbc/driver/compiled_target.h"
#include "qbc/mxq/model_file.h"
#include "qbc/runtime/verify_model.h"

namespace qbc::driver {

StatusOr<VerifyOutcome> verify_compiled(const std::string& path, const std::string& target_device,
                                        const std::string& target_profile) {
  QBC_ASSIGN_OR_RETURN(mxq::LoadedModel m, mxq::load_model(path));
  QBC_RETURN_IF_ERROR(check_compiled_target(path, m, target_device, target_profile));
  QBC_ASSIGN_OR_RETURN(runtime::VerifyReport report, runtime::verify_model(m, path));
  const std::vector<std::string>& modes = report.modes;
  size_t sections = 0;
  uint64_t bytes = 0;
  for (const mxq::Container& c : m.containers) {
    sections += c.sections().size();
    bytes += c.file_size();
  }
  std::string mode_list;
  for (const std::string& s : modes) mode_list += (mode_list.empty() ? "" : ", ") + s;
  const nlohmann::ordered_json j = {{"file", path},
                                    {"ok", true},
                                    {"parts", m.files.size()},
                                    {"sections", sections},
                                    {"bytes", bytes},
                                    {"modes", modes},
                                    {"model_hash", m.meta.model_hash()},
                                    {"target", m.bundle->target}};
  VerifyOutcome out;
  out.summary = path + ": ok (" + std::to_string(m.files.size()) + " file" +
                (m.files.size() > 1 ? "s" : "") + ", " + std::to_string(sections) + " sections, " +
                std::to_string(bytes) + " bytes; digests, format rules, " +
                "program verifier V1-V8, device checks of the modes " + mode_list + ", tokenizer" +
                (report.chat_template ? ", chat template" : "") + "; target '" + m.bundle->target +
                "')";
  out.json = j.dump();
  out.json_text = j.dump(2) + "\n";
  return out;
}

}  // namespace qbc::driver
