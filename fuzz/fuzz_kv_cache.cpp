// libFuzzer target: sequence cache files (runtime/sequence_cache.h) and the KV-cache blob inside
// them (NpuSession::load_kv), loaded into a Generator of a compiled model, the door of
// `qbc run --load-cache`. The model is an MXQ named by $QBC_FUZZ_KV_MODEL (tools/fuzz.sh sets it
// to the one tools/fuzz_seeds.py compiles; its seeds are caches that `qbc run --save-cache`
// wrote). Each input goes in three ways: as it is (the magic, size and digest checks); with its
// trailing digest recomputed (so mutations reach the token list and the blob); and as a bare
// KV blob to NpuSession::load_kv. Whatever loads must then generate two tokens from its state.
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "fuzz_util.h"
#include "qbc/mxq/container.h"
#include "qbc/runtime/generator.h"

namespace {

std::unique_ptr<qbc::runtime::Generator>& generator() {
  static std::unique_ptr<qbc::runtime::Generator> g;
  return g;
}

void try_cache(const std::string& bytes) {
  qbc::runtime::Generator& g = *generator();
  const qbc::Status s = g.load_cache(bytes, "fuzz.seq");
  qbc::fuzz::check(s);
  if (!s.ok()) return;
  // Continue the loaded sequence: its own tokens plus one, then two new tokens.
  std::vector<int32_t> prompt = g.cached_tokens();
  prompt.push_back(1);
  if (static_cast<int64_t>(prompt.size()) + 2 > g.capacity()) return;
  qbc::fuzz::check(g.generate_reusing_cache(prompt, 2).status());
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  const char* path = std::getenv("QBC_FUZZ_KV_MODEL");
  if (path == nullptr) {
    std::fprintf(stderr, "fuzz_kv_cache: set QBC_FUZZ_KV_MODEL to a compiled .mxq\n");
    std::abort();
  }
  qbc::runtime::LoadOptions lo;
  lo.host_threads = 1;
  auto g = qbc::runtime::Generator::create(path, lo);
  if (!g.ok()) {
    std::fprintf(stderr, "fuzz_kv_cache: %s\n", g.status().to_string().c_str());
    std::abort();
  }
  generator() = std::move(g).value();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  generator()->session().reset();  // every input starts from an empty sequence
  try_cache(bytes);
  if (bytes.size() > 16) {
    std::string sealed = bytes;
    const qbc::mxq::Digest d = qbc::mxq::digest_of(sealed.data(), sealed.size() - 16);
    sealed.replace(sealed.size() - 16, 16, reinterpret_cast<const char*>(d.data()), d.size());
    try_cache(sealed);
  }
  qbc::runtime::NpuSession& s = generator()->session();
  const qbc::Status kv = s.load_kv(bytes);
  qbc::fuzz::check(kv);
  if (kv.ok() && s.position() + 1 <= generator()->capacity()) {
    std::vector<float> logits;
    qbc::fuzz::check(s.forward({1}, &logits));
  }
  return 0;
}
