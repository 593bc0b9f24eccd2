// `qbc verify` over the runtime's own loading code (see qbc/runtime/verify_model.h).
#include "qbc/runtime/verify_model.h"

#include "qbc/isa/verify.h"
#include "qbc/runtime/device.h"
#include "qbc/runtime/generator.h"
#include "qbc/runtime/npu_session.h"

namespace qbc::runtime {
namespace {

Status as_data_loss(const Status& s, const std::string& context) {
  return Status(s.code() == Code::kDataLoss ? s.code() : Code::kDataLoss,
                context + ": " + s.message());
}

}  // namespace

StatusOr<VerifyReport> verify_model(const mxq::LoadedModel& file, const std::string& path) {
  VerifyReport r;
  if (Status s = isa::verify(*file.bundle); !s.ok())
    return as_data_loss(s, path + ": program verifier");
  for (const isa::Mode& mode : file.bundle->modes) {
    const std::string where = path + ": mode " + isa::scheme_name(mode.scheme);
    DeviceOptions d;
    d.scheme = mode.scheme;
    d.host_threads = 1;
    // The device's checks of the mode (every buffer, instruction, attention, rope, loop)
    // without allocating its memory: nothing runs.
    d.counters_only = true;
    auto dev = Device::create(file.bundle, d);
    if (!dev.ok()) return as_data_loss(dev.status(), where);
    // The model interface a session of run checks (io buffers, embedding, max_seq).
    auto session = NpuSession::create(std::move(dev).value(), 0);
    if (!session.ok()) return as_data_loss(session.status(), where);
    r.modes.push_back(isa::scheme_name(mode.scheme));
  }
  // The host side, as Generator::create loads it.
  auto tok = load_tokenizer(file);
  if (!tok.ok()) return as_data_loss(tok.status(), path);
  if (Status s = check_host_side(file, *tok); !s.ok()) return s;
  // Generation runs without a chat template that does not parse, but the asset is broken.
  auto chat = load_chat_template(file);
  if (!chat.ok()) return as_data_loss(chat.status(), path);
  r.chat_template = chat->has_value();
  return r;
}

}  // namespace qbc::runtime
