// libFuzzer target: a compile config file (json) resolved over the defaults and validated.
#include "fuzz_util.h"
#include "qbc/config/config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto path = qbc::fuzz::write_input(data, size, "compile.json");
  qbc::config::LoadRequest request;
  request.files.push_back(path.string());
  qbc::fuzz::check(qbc::config::resolve(request).status());
  return 0;
}
