// libFuzzer target: MXQ bytes -> mxq::load_model_bytes with the section digests off (so the
// fuzzer reaches the container rules, the protobuf decoders and the part checks instead of
// stopping at a digest), then the program verifier, and for what it accepts the runtime
// device and one prefill and one decode call.
#include <string>

#include "fuzz_util.h"
#include "qbc/isa/verify.h"
#include "qbc/mxq/model_file.h"
#include "qbc/runtime/device.h"
#include "qbc/runtime/npu_session.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  qbc::mxq::ReadOptions ro;
  ro.verify_digests = false;
  auto m = qbc::mxq::load_model_bytes(std::string(reinterpret_cast<const char*>(data), size),
                                      "fuzz.mxq", ro);
  qbc::fuzz::check(m.status());
  if (!m.ok()) return 0;
  const qbc::Status v = qbc::isa::verify(*m->bundle);
  qbc::fuzz::check(v);
  if (!v.ok() || m->bundle->modes.empty()) return 0;
  qbc::runtime::DeviceOptions d;
  d.scheme = m->bundle->modes.front().scheme;
  d.host_threads = 1;
  auto dev = qbc::runtime::Device::create(m->bundle, d);
  qbc::fuzz::check(dev.status());
  if (!dev.ok()) return 0;
  auto s = qbc::runtime::NpuSession::create(*dev, 0);
  qbc::fuzz::check(s.status());
  if (!s.ok()) return 0;
  std::vector<float> logits;
  qbc::fuzz::check((*s)->forward({1, 2}, &logits));
  qbc::fuzz::check((*s)->forward({3}, &logits));
  return 0;
}
