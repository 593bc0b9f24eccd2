// libFuzzer target: the GGUF reader, then everything built from its metadata: the composed
// config.json through parse_hparams, the tensor mapping (ModelSource) and the GGUF vocabulary.
#include "fuzz_util.h"
#include "qbc/frontend/gguf.h"
#include "qbc/frontend/gguf_tokenizer.h"
#include "qbc/frontend/model_source.h"
#include "qbc/tokenizer/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto path = qbc::fuzz::write_input(data, size, "model.gguf");
  auto file = qbc::frontend::GgufFile::open(path);
  qbc::fuzz::check(file.status());
  if (!file.ok()) return 0;
  qbc::fuzz::check(qbc::frontend::tokenizer_from_gguf(*file).status());
  auto source = qbc::frontend::ModelSource::open(path);
  qbc::fuzz::check(source.status());
  return 0;
}
