// libFuzzer target: the GGUF reader, then everything built from its metadata: the composed
// config.json through parse_hparams, the tensor mapping (ModelSource), the GGUF vocabulary and
// the decoding of every (small) tensor.
#include <vector>

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
  // Every tensor's decoder (all ggml types qbc reads), on tensors small enough to stay fast.
  std::vector<float> values;
  for (const qbc::frontend::GgufTensor& t : file->tensors()) {
    if (t.num_elements() <= (1 << 16)) qbc::fuzz::check(file->read_f32(t, &values));
  }
  auto source = qbc::frontend::ModelSource::open(path);
  qbc::fuzz::check(source.status());
  return 0;
}
