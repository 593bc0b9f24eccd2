// libFuzzer target: a packed pre-quantized checkpoint (config.json with its quantization_config
// + model.safetensors holding GPTQ / AWQ / compressed-tensors tensors) opened through the model
// source, every packed linear read back as codes and as floats. Input: a little-endian uint32 n,
// then n bytes of config.json, then the safetensors file (seeds: tools/fuzz_seeds.py).
#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "fuzz_util.h"
#include "qbc/frontend/model_source.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 4) return 0;
  uint32_t n = 0;
  std::memcpy(&n, data, 4);
  n = static_cast<uint32_t>(std::min<size_t>(n, size - 4));
  qbc::fuzz::write_input(data + 4, n, "config.json");
  const auto st = qbc::fuzz::write_input(data + 4 + n, size - 4 - n, "model.safetensors");
  auto src = qbc::frontend::ModelSource::open(st.parent_path());
  qbc::fuzz::check(src.status());
  if (!src.ok()) return 0;
  qbc::fuzz::check(src->validate());
  for (const qbc::frontend::PackedTensorRef& ref : src->packed_linears()) {
    const std::string name = ref.module + ".weight";
    auto p = src->read_packed(name);
    qbc::fuzz::check(p.status());
    std::vector<float> w;
    // Bounded: the floats of a fuzzed shape could be large.
    if (p.ok() && p->out * p->in <= (int64_t{1} << 22)) qbc::fuzz::check(src->read_f32(name, &w));
  }
  return 0;
}
