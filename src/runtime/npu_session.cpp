// The Runner over a simulated device (see qbc/runtime/npu_session.h).
#include "qbc/runtime/npu_session.h"

#include <algorithm>

#include "qbc/numerics/fp16.h"
#include "values.h"

namespace qbc::runtime {

StatusOr<std::unique_ptr<NpuSession>> NpuSession::create(std::shared_ptr<Device> device, int slot) {
  if (device == nullptr) return invalid_argument("NpuSession: no device");
  const isa::Bundle& b = device->bundle();
  const isa::Mode& m = device->mode();
  if (slot < 0 || slot >= m.instances) {
    return invalid_argument("NpuSession: slot ", slot, " outside the ", m.instances,
                            " instances of mode ", isa::scheme_name(m.scheme));
  }
  if (b.hidden <= 0 || b.vocab <= 0)
    return invalid_argument("bundle: hidden ", b.hidden, ", vocab ", b.vocab);
  if (b.embed_rows <= 0 || static_cast<int64_t>(b.embedding.size()) != b.embed_rows * b.hidden) {
    return invalid_argument("bundle: host embedding holds ", b.embedding.size(),
                            " values, expected embed_rows ", b.embed_rows, " x hidden ", b.hidden);
  }
  if (m.prefill.max_seq != b.chunk || m.decode.max_seq < 1) {
    return invalid_argument("mode ", isa::scheme_name(m.scheme), ": prefill max_seq ",
                            m.prefill.max_seq, " is not the bundle's chunk ", b.chunk,
                            " or decode max_seq is ", m.decode.max_seq);
  }
  const std::pair<int32_t, int64_t> io[] = {{b.input, b.chunk * b.hidden * 2},
                                            {b.output, b.chunk * b.vocab * 4}};
  for (const auto& [buffer, bytes] : io) {
    if (buffer < 0) return invalid_argument("bundle: no input or output io buffer");
    const isa::Buffer& buf = b.buffers[static_cast<size_t>(buffer)];
    if (buf.bytes < bytes) {
      return invalid_argument("bundle: io buffer '", buf.name, "' holds ", buf.bytes,
                              " bytes, the chunk of ", b.chunk, " tokens needs ", bytes);
    }
  }
  return std::unique_ptr<NpuSession>(new NpuSession(std::move(device), slot));
}

int64_t NpuSession::vocab_size() const { return device_->bundle().vocab; }
int64_t NpuSession::hidden_size() const { return device_->bundle().hidden; }

Status NpuSession::embed(const std::vector<int32_t>& tokens, std::vector<float>* out) const {
  const isa::Bundle& b = device_->bundle();
  return runner::embed_tokens(b.embedding.data(), b.embed_rows, b.hidden, tokens, out);
}

Status NpuSession::forward(const std::vector<int32_t>& tokens, std::vector<float>* logits) {
  if (tokens.empty()) return invalid_argument("forward: no tokens");
  std::vector<float> x;
  QBC_RETURN_IF_ERROR(embed(tokens, &x));
  return forward_embeds(x, static_cast<int64_t>(tokens.size()), logits);
}

Status NpuSession::forward_embeds(const std::vector<float>& embeds, int64_t seq,
                                  std::vector<float>* logits) {
  const isa::Bundle& b = device_->bundle();
  if (seq <= 0 || static_cast<int64_t>(embeds.size()) != seq * b.hidden) {
    return invalid_argument("forward_embeds: ", embeds.size(), " values for ", seq,
                            " tokens of hidden size ", b.hidden);
  }
  if (position_ + seq > b.max_cache) {
    return resource_exhausted("KV cache capacity: ", position_, " cached + ", seq,
                              " new tokens exceed max_cache ", b.max_cache);
  }
  if (logits != nullptr) logits->assign(static_cast<size_t>(seq * b.vocab), 0.0f);
  for (int64_t t = 0; t < seq; t += b.chunk) {
    const int64_t n = std::min(b.chunk, seq - t);
    QBC_RETURN_IF_ERROR(call(embeds.data() + t * b.hidden, n,
                             logits != nullptr ? logits->data() + t * b.vocab : nullptr));
  }
  return ok_status();
}

Status NpuSession::call(const float* embeds, int64_t seq, float* logits) {
  const isa::Bundle& b = device_->bundle();
  uint8_t* in = device_->dram(device_->address(b.input, slot_), seq * b.hidden * 2);
  uint8_t* out = device_->dram(device_->address(b.output, slot_), seq * b.vocab * 4);
  if (in == nullptr || out == nullptr) return internal_error("io buffers outside DRAM");
  // The NPU input buffer holds fp16: the host embedding rounded once.
  std::vector<float> rounded(static_cast<size_t>(seq * b.hidden));
  for (size_t i = 0; i < rounded.size(); ++i) rounded[i] = numerics::round_fp16(embeds[i]);
  store_f16(rounded.data(), static_cast<int64_t>(rounded.size()), in);
  const isa::Phase phase = seq == 1 ? isa::Phase::kDecode : isa::Phase::kPrefill;
  QBC_RETURN_IF_ERROR(device_->run(phase, slot_, position_, seq)
                          .with_context("position ", position_, ", ", seq, " tokens"));
  position_ += seq;
  if (logits != nullptr) load(out, seq * b.vocab, logits);
  return ok_status();
}

Status NpuSession::activation(const std::string& node, std::vector<float>* out,
                              std::vector<int64_t>* shape) const {
  return unimplemented("activation of node '", node,
                       "': the NPU executor keeps no per-node values; they exist only in the "
                       "fake-quant evaluator (quant::FakeQuantSession)");
}

}  // namespace qbc::runtime
