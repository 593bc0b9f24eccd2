// libFuzzer target: quantization_config of a config.json -> PrequantConfig (compressed-tensors,
// GPTQ, AWQ, auto-round, and the exit-3 path of every other method).
#include <string_view>

#include "fuzz_util.h"
#include "qbc/frontend/prequant.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto c = qbc::frontend::parse_prequant_config(text, "config.json");
  qbc::fuzz::check(c.status());
  if (c.ok() && c->has_value()) (void)(*c)->describe();
  return 0;
}
