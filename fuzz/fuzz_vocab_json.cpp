// libFuzzer target: the qbc_vocab.json asset of an MXQ (read from memory, as the runtime reads
// it) -> Tokenizer, then one encode/decode round.
#include "fuzz_util.h"
#include "qbc/tokenizer/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto tok = qbc::tokenizer::Tokenizer::from_vocab_json(text, "qbc_vocab.json");
  qbc::fuzz::check(tok.status());
  if (!tok.ok()) return 0;
  const std::vector<int32_t> ids = tok->encode("Once upon a time, 42 cats\n", /*add_bos=*/true);
  (void)tok->decode(ids);
  return 0;
}
