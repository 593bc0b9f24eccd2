// libFuzzer target: HF tokenizer.json → Tokenizer, then one encode/decode round.
#include "fuzz_util.h"
#include "qbc/tokenizer/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto path = qbc::fuzz::write_input(data, size, "tokenizer.json");
  auto tok = qbc::tokenizer::Tokenizer::from_hf_json(path);
  qbc::fuzz::check(tok.status());
  if (!tok.ok()) return 0;
  const std::vector<int32_t> ids = tok->encode("Once upon a time, 42 cats\n", /*add_bos=*/true);
  (void)tok->decode(ids);
  return 0;
}
