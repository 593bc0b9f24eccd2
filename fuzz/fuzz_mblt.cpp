// libFuzzer target: MBLT protobuf bytes → ir::Graph (parse, conversion, verifier), then the text
// form of what loaded, parsed back (the MBLT text reader).
#include <string>

#include "fuzz_util.h"
#include "qbc/ir/serialize.h"
#include "qbc/ir/text.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  auto g = qbc::ir::from_proto_bytes(bytes, "fuzz.mblt");
  qbc::fuzz::check(g.status());
  if (!g.ok()) return 0;
  auto back = qbc::ir::parse_text(qbc::ir::print_text(*g), "fuzz.mblt.txt");
  qbc::fuzz::check(back.status());
  return 0;
}
