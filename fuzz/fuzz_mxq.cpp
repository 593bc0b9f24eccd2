// libFuzzer target: MXQ bytes -> mxq::load_model_bytes with the section digests off (so the
// fuzzer reaches the container rules, the protobuf decoders and the part checks instead of
// stopping at a digest), then the program verifier, and for what it accepts the runtime
// device and one prefill and one decode call; a VLM's vision part (the nested MXQ of its
// vision section) encodes a small synthetic image.
#include <string>

#include "fuzz_util.h"
#include "qbc/isa/verify.h"
#include "qbc/mxq/model_file.h"
#include "qbc/runtime/device.h"
#include "qbc/runtime/npu_session.h"
#include "qbc/runtime/vision_encoder.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  qbc::mxq::ReadOptions ro;
  ro.verify_digests = false;
  auto m = qbc::mxq::load_model_bytes(std::string(reinterpret_cast<const char*>(data), size),
                                      "fuzz.mxq", ro);
  qbc::fuzz::check(m.status());
  if (!m.ok()) return 0;
  if (m->vision != nullptr) {
    auto enc = qbc::runtime::VisionEncoder::create(*m, m->bundle->modes.front().scheme, 1);
    qbc::fuzz::check(enc.status());
    if (enc.ok()) {
      qbc::image::Image img;
      img.width = 40;
      img.height = 30;
      img.rgb.assign(40 * 30 * 3, 0);
      for (size_t i = 0; i < img.rgb.size(); ++i) img.rgb[i] = static_cast<uint8_t>(i * 7);
      qbc::fuzz::check((*enc)->encode(img, "fuzz image").status());
    }
  }
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
