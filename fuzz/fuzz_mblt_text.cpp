// libFuzzer target: the MBLT text form (.mblt.txt, `qbc inspect` reads it) → ir::Graph.
#include <string>

#include "fuzz_util.h"
#include "qbc/ir/text.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  qbc::fuzz::check(qbc::ir::parse_text(text, "fuzz.mblt.txt").status());
  return 0;
}
