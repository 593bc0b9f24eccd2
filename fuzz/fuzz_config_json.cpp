// libFuzzer target: HF config.json → HParams (every family), and the derived parameter counts.
#include <string_view>

#include "fuzz_util.h"
#include "qbc/frontend/hparams.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto hp = qbc::frontend::parse_hparams(text, "config.json");
  qbc::fuzz::check(hp.status());
  if (hp.ok()) (void)hp->param_counts().total_bytes(32);
  return 0;
}
