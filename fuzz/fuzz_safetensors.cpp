// libFuzzer target: the safetensors reader (header JSON, entries, offsets), then the f32 read.
#include <vector>

#include "fuzz_util.h"
#include "qbc/frontend/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto path = qbc::fuzz::write_input(data, size, "model.safetensors");
  auto file = qbc::frontend::SafetensorsFile::open(path);
  qbc::fuzz::check(file.status());
  if (!file.ok()) return 0;
  for (const auto& t : file->tensors()) {
    if (t.num_elements() > (1 << 20)) continue;  // the data is in the file; keep runs fast
    std::vector<float> values;
    qbc::fuzz::check(qbc::frontend::read_f32(t, &values));
  }
  return 0;
}
