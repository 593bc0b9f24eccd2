// The Runner over a simulated device (see qbc/runtime/npu_session.h).
#include "qbc/runtime/npu_session.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <utility>
#include <vector>

#include "qbc/mxq/container.h"
#include "qbc/numerics/fp16.h"
#include "qbc/runner/mrope.h"
#include "values.h"

namespace qbc::runtime {
namespace {

/// Bytes between the rows of a rope-table io buffer: head_dim/2 fp16 values, DMA-aligned.
int64_t rope_row_bytes(const isa::Bundle& b) {
  const int64_t bytes = b.rope_inputs.head_dim;  // head_dim / 2 values of 2 bytes
  const int64_t a = std::max<int64_t>(1, b.dma_align);
  return (bytes + a - 1) / a * a;
}

/// Bytes between the rows of a DeepStack io buffer: hidden fp16 values, DMA-aligned.
int64_t deepstack_row_bytes(const isa::Bundle& b) {
  const int64_t a = std::max<int64_t>(1, b.dma_align);
  return (b.hidden * 2 + a - 1) / a * a;
}

}  // namespace

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
  if (b.embed_rows <= 0 || b.embedding_size() != b.embed_rows * b.hidden) {
    return invalid_argument("bundle: host embedding holds ", b.embedding_size(),
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
  const isa::RopeInputs& ri = b.rope_inputs;
  if (ri.present()) {
    const int64_t need = b.chunk * rope_row_bytes(b);
    for (int32_t id : {ri.cos, ri.sin}) {
      if (id < 0 || static_cast<size_t>(id) >= b.buffers.size())
        return invalid_argument("bundle: rope table buffer ", id, " of ", b.buffers.size());
      const isa::Buffer& buf = b.buffers[static_cast<size_t>(id)];
      if (buf.bytes < need)
        return invalid_argument("bundle: rope table buffer '", buf.name, "' holds ", buf.bytes,
                                " bytes, the chunk of ", b.chunk, " tokens needs ", need);
    }
  }
  for (int32_t id : b.deepstack) {
    if (id < 0 || static_cast<size_t>(id) >= b.buffers.size())
      return invalid_argument("bundle: DeepStack buffer ", id, " of ", b.buffers.size());
    const isa::Buffer& buf = b.buffers[static_cast<size_t>(id)];
    if (buf.bytes < b.chunk * deepstack_row_bytes(b))
      return invalid_argument("bundle: DeepStack buffer '", buf.name, "' holds ", buf.bytes,
                              " bytes, the chunk of ", b.chunk, " tokens needs ",
                              b.chunk * deepstack_row_bytes(b));
  }
  return std::unique_ptr<NpuSession>(new NpuSession(std::move(device), slot));
}

int64_t NpuSession::vocab_size() const { return device_->bundle().vocab; }
int64_t NpuSession::hidden_size() const { return device_->bundle().hidden; }

Status NpuSession::embed(const std::vector<int32_t>& tokens, std::vector<float>* out) const {
  const isa::Bundle& b = device_->bundle();
  return runner::embed_tokens_by_row(
      b.embed_rows, b.hidden, tokens, [&](int32_t id, float* dst) { b.embedding_row(id, dst); },
      out);
}

Status NpuSession::forward(const std::vector<int32_t>& tokens, std::vector<float>* logits) {
  if (tokens.empty()) return invalid_argument("forward: no tokens");
  std::vector<float> x;
  QBC_RETURN_IF_ERROR(embed(tokens, &x));
  const int64_t hidden = device_->bundle().hidden;
  const int64_t first = splice_next_;
  const int64_t width = image_row_width(), ds_width = width - hidden;
  const int64_t total = static_cast<int64_t>(splice_rows_.size()) / width;
  std::vector<bool> spliced(tokens.size(), false);
  struct DropRows {  // the rows are this forward()'s only, whichever way it returns
    NpuSession* s;
    ~DropRows() {
      s->call_deepstack_.clear();
      s->call_deepstack_at_ = 0;
    }
  } drop_rows{this};
  for (size_t i = 0; i < tokens.size() && splice_token_ >= 0; ++i) {
    if (tokens[i] != splice_token_ || splice_next_ >= total) continue;
    const float* row = splice_rows_.data() + splice_next_ * width;
    std::memcpy(x.data() + static_cast<int64_t>(i) * hidden, row, sizeof(float) * hidden);
    if (ds_width > 0) {  // this token's DeepStack rows of every level
      call_deepstack_.resize(tokens.size() * static_cast<size_t>(ds_width), 0.0f);
      std::memcpy(call_deepstack_.data() + static_cast<int64_t>(i) * ds_width, row + hidden,
                  sizeof(float) * ds_width);
    }
    ++splice_next_;
    spliced[i] = true;
  }
  const auto seq = static_cast<int64_t>(tokens.size());
  const bool spans = has_span_program() && splice_next_ > first && positions_pending() == 0;
  if (spans) {  // every image one call, checked before anything runs
    const int64_t chunk = device_->bundle().chunk;
    if (spliced.front() && ended_in_span_) {
      splice_next_ = first;
      return invalid_argument(
          "forward: an image's tokens continue from the previous call; with span programs each "
          "image must be given in one call (its tokens attend to each other)");
    }
    for (size_t i = 0; i < spliced.size();) {
      size_t e = i + 1;
      while (e < spliced.size() && spliced[e] == spliced[i]) ++e;
      if (spliced[i] && static_cast<int64_t>(e - i) > chunk) {
        splice_next_ = first;
        return invalid_argument("forward: an image of ", e - i,
                                " tokens does not fit one call of the compiled chunk ", chunk,
                                " (compile with llm.attributes.maxCoreDataLength >= ", e - i, ")");
      }
      i = e;
    }
  }
  Status s;
  if (spans) {
    s = forward_spans(x, spliced, logits);
  } else if (positions_pending() > 0) {  // this call's columns of each stream
    if (positions_pending() < seq) {
      splice_next_ = first;
      return invalid_argument("forward: ", seq, " tokens, but only ", positions_pending(),
                              " of the positions set are left");
    }
    const int64_t n = static_cast<int64_t>(positions_.size()) / 3;
    std::vector<int64_t> part;
    for (int64_t k = 0; k < 3; ++k)
      part.insert(part.end(), positions_.begin() + k * n + positions_next_,
                  positions_.begin() + k * n + positions_next_ + seq);
    s = forward_embeds_mrope(x, seq, part, logits);
    if (s.ok()) positions_next_ += seq;
  } else {
    s = forward_embeds(x, seq, logits);
  }
  if (!s.ok()) splice_next_ = first;  // nothing was consumed
  if (s.ok()) ended_in_span_ = has_span_program() && spliced.back();
  return s;
}

bool NpuSession::mrope() const { return device_->bundle().rope_inputs.present(); }

bool NpuSession::has_span_program() const { return device_->mode().has_span(); }

Status NpuSession::forward_spans(const std::vector<float>& x, const std::vector<bool>& spliced,
                                 std::vector<float>* logits) {
  const isa::Bundle& b = device_->bundle();
  const auto seq = static_cast<int64_t>(spliced.size());
  if (position_ + seq > b.max_cache)
    return resource_exhausted("KV cache capacity: ", position_, " cached + ", seq,
                              " new tokens exceed max_cache ", b.max_cache);
  if (logits != nullptr) logits->assign(static_cast<size_t>(seq * b.vocab), 0.0f);
  std::vector<float> part, out;
  for (int64_t t = 0; t < seq;) {
    int64_t e = t + 1;
    while (e < seq && spliced[static_cast<size_t>(e)] == spliced[static_cast<size_t>(t)]) ++e;
    part.assign(x.begin() + t * b.hidden, x.begin() + e * b.hidden);
    if (spliced[static_cast<size_t>(t)]) {
      QBC_RETURN_IF_ERROR(forward_embeds_span(part, e - t, logits != nullptr ? &out : nullptr));
    } else {
      QBC_RETURN_IF_ERROR(run_chunks(part, e - t, logits != nullptr ? &out : nullptr, nullptr));
    }
    if (logits != nullptr) std::copy(out.begin(), out.end(), logits->begin() + t * b.vocab);
    t = e;
  }
  return ok_status();
}

Status NpuSession::forward_embeds_span(const std::vector<float>& embeds, int64_t seq,
                                       std::vector<float>* logits) {
  const isa::Bundle& b = device_->bundle();
  if (!has_span_program())
    return failed_precondition(
        "forward_embeds_span: the file has no span program (only a Gemma 3 VLM's has one)");
  if (seq <= 0 || static_cast<int64_t>(embeds.size()) != seq * b.hidden)
    return invalid_argument("forward_embeds_span: ", embeds.size(), " values for ", seq,
                            " tokens of hidden size ", b.hidden);
  if (seq > b.chunk)
    return invalid_argument("a bidirectional span of ", seq,
                            " tokens does not fit one call of the compiled chunk ", b.chunk,
                            " (compile with llm.attributes.maxCoreDataLength >= ", seq, ")");
  if (position_ + seq > b.max_cache)
    return resource_exhausted("KV cache capacity: ", position_, " cached + ", seq,
                              " new tokens exceed max_cache ", b.max_cache);
  if (logits != nullptr) logits->assign(static_cast<size_t>(seq * b.vocab), 0.0f);
  return call(embeds.data(), seq, logits != nullptr ? logits->data() : nullptr, nullptr, true);
}

Status NpuSession::set_positions(std::vector<int64_t> positions) {
  if (!mrope())
    return failed_precondition("set_positions: the model takes no rope tables (no M-RoPE)");
  if (positions.empty() || positions.size() % 3 != 0)
    return invalid_argument("set_positions: ", positions.size(),
                            " values are not 3 streams of positions");
  positions_ = std::move(positions);
  positions_next_ = 0;
  return ok_status();
}

Status NpuSession::splice(int32_t token, std::vector<float> rows) {
  const int64_t width = image_row_width();
  if (token < 0 || token >= vocab_size() || token >= device_->bundle().embed_rows)
    return invalid_argument("splice: token ", token, " is outside the vocabulary");
  if (rows.empty() || rows.size() % static_cast<size_t>(width) != 0)
    return invalid_argument("splice: ", rows.size(), " values are not rows of ", width,
                            deepstack_levels() > 0
                                ? " (the feature row and " + std::to_string(deepstack_levels()) +
                                      " DeepStack rows of hidden size " +
                                      std::to_string(hidden_size()) + ")"
                                : " (the hidden size)");
  splice_token_ = token;
  splice_rows_ = std::move(rows);
  splice_next_ = 0;
  return ok_status();
}

int64_t NpuSession::rows_pending() const {
  if (splice_token_ < 0) return 0;
  return static_cast<int64_t>(splice_rows_.size()) / image_row_width() - splice_next_;
}

int64_t NpuSession::image_row_width() const { return hidden_size() * (1 + deepstack_levels()); }

int64_t NpuSession::deepstack_levels() const {
  return static_cast<int64_t>(device_->bundle().deepstack.size());
}

Status NpuSession::write_deepstack(int64_t seq) {
  const isa::Bundle& b = device_->bundle();
  const auto levels = static_cast<int64_t>(b.deepstack.size());
  const int64_t stride = deepstack_row_bytes(b), width = levels * b.hidden;
  const bool rows = !call_deepstack_.empty();
  if (rows && (call_deepstack_at_ + seq) * width > static_cast<int64_t>(call_deepstack_.size()))
    return internal_error("DeepStack rows: a call past the tokens of forward()");
  std::vector<float> row(static_cast<size_t>(b.hidden), 0.0f);
  for (int64_t j = 0; j < levels; ++j) {
    uint8_t* p =
        device_->dram(device_->address(b.deepstack[static_cast<size_t>(j)], slot_), seq * stride);
    if (p == nullptr) return internal_error("DeepStack buffer outside DRAM");
    for (int64_t t = 0; t < seq; ++t) {
      if (rows) {  // fp16 at the NPU boundary, as the fake-quant evaluator rounds its inputs
        const float* src = call_deepstack_.data() + (call_deepstack_at_ + t) * width + j * b.hidden;
        for (int64_t i = 0; i < b.hidden; ++i)
          row[static_cast<size_t>(i)] = numerics::round_fp16(src[i]);
      }
      store_f16(row.data(), b.hidden, p + t * stride);
    }
  }
  if (rows) call_deepstack_at_ += seq;
  return ok_status();
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
  return run_chunks(embeds, seq, logits, nullptr);
}

Status NpuSession::forward_embeds_mrope(const std::vector<float>& embeds, int64_t seq,
                                        const std::vector<int64_t>& positions,
                                        std::vector<float>* logits) {
  const isa::Bundle& b = device_->bundle();
  if (!b.rope_inputs.present())
    return failed_precondition("forward_embeds_mrope: the model takes no rope tables (no M-RoPE)");
  if (seq <= 0 || static_cast<int64_t>(embeds.size()) != seq * b.hidden)
    return invalid_argument("forward_embeds_mrope: ", embeds.size(), " values for ", seq,
                            " tokens of hidden size ", b.hidden);
  if (static_cast<int64_t>(positions.size()) != 3 * seq)
    return invalid_argument("M-RoPE positions: ", positions.size(), " values for 3 streams of ",
                            seq, " tokens");
  for (int64_t p : positions) {
    if (p < 0 || p > (int64_t{1} << 40))
      return invalid_argument("M-RoPE positions: ", p, " outside [0, 2^40]");
  }
  if (position_ + seq > b.max_cache)
    return resource_exhausted("KV cache capacity: ", position_, " cached + ", seq,
                              " new tokens exceed max_cache ", b.max_cache);
  const int64_t start = position_;
  QBC_RETURN_IF_ERROR(run_chunks(embeds, seq, logits, &positions));
  // Later text continues after the largest position (HF rope_deltas).
  rope_delta_ = *std::max_element(positions.begin(), positions.end()) + 1 - (start + seq);
  return ok_status();
}

Status NpuSession::run_chunks(const std::vector<float>& embeds, int64_t seq,
                              std::vector<float>* logits, const std::vector<int64_t>* mrope) {
  const isa::Bundle& b = device_->bundle();
  if (logits != nullptr) logits->assign(static_cast<size_t>(seq * b.vocab), 0.0f);
  std::vector<int64_t> part;
  for (int64_t t = 0; t < seq; t += b.chunk) {
    const int64_t n = std::min(b.chunk, seq - t);
    if (mrope != nullptr) {  // this chunk's columns of each stream
      part.clear();
      for (int64_t s = 0; s < 3; ++s)
        part.insert(part.end(), mrope->begin() + s * seq + t, mrope->begin() + s * seq + t + n);
    }
    QBC_RETURN_IF_ERROR(call(embeds.data() + t * b.hidden, n,
                             logits != nullptr ? logits->data() + t * b.vocab : nullptr,
                             mrope != nullptr ? &part : nullptr, false, seq > 1));
  }
  return ok_status();
}

Status NpuSession::write_rope_tables(int64_t seq, const std::vector<int64_t>* mrope) {
  const isa::Bundle& b = device_->bundle();
  const isa::RopeInputs& ri = b.rope_inputs;
  runner::MRopeSpec spec;
  spec.head_dim = ri.head_dim;
  spec.theta = ri.theta;
  for (size_t k = 0; k < 3; ++k) spec.section[k] = ri.section[k];
  spec.interleaved = ri.interleaved;
  std::vector<int64_t> text;
  if (mrope == nullptr) text = runner::mrope_text_positions(position_, seq, rope_delta_);
  std::vector<double> cos, sin;
  runner::mrope_tables(spec, mrope != nullptr ? *mrope : text, &cos, &sin);
  const int64_t half = ri.head_dim / 2, stride = rope_row_bytes(b);
  std::vector<float> row(static_cast<size_t>(half));
  for (const auto& [id, table] : {std::pair{ri.cos, &cos}, std::pair{ri.sin, &sin}}) {
    uint8_t* p = device_->dram(device_->address(id, slot_), seq * stride);
    if (p == nullptr) return internal_error("rope table buffer outside DRAM");
    for (int64_t t = 0; t < seq; ++t) {
      // The graph's f32 table (fp64 rounded once), then fp16 at the NPU boundary, as the
      // fake-quant evaluator rounds every input.
      for (int64_t i = 0; i < half; ++i)
        row[static_cast<size_t>(i)] =
            numerics::round_fp16(static_cast<float>((*table)[static_cast<size_t>(t * half + i)]));
      store_f16(row.data(), half, p + t * stride);
    }
  }
  return ok_status();
}

Status NpuSession::call(const float* embeds, int64_t seq, float* logits,
                        const std::vector<int64_t>* mrope, bool span, bool in_prompt) {
  const isa::Bundle& b = device_->bundle();
  ended_in_span_ = false;  // forward() sets it again after its calls
  if (b.rope_inputs.present()) QBC_RETURN_IF_ERROR(write_rope_tables(seq, mrope));
  if (!b.deepstack.empty()) QBC_RETURN_IF_ERROR(write_deepstack(seq));
  uint8_t* in = device_->dram(device_->address(b.input, slot_), seq * b.hidden * 2);
  uint8_t* out = device_->dram(device_->address(b.output, slot_), seq * b.vocab * 4);
  if (in == nullptr || out == nullptr) return internal_error("io buffers outside DRAM");
  // The NPU input buffer holds fp16: the host embedding rounded once.
  std::vector<float> rounded(static_cast<size_t>(seq * b.hidden));
  for (size_t i = 0; i < rounded.size(); ++i) rounded[i] = numerics::round_fp16(embeds[i]);
  store_f16(rounded.data(), static_cast<int64_t>(rounded.size()), in);
  const isa::Phase phase = span                     ? isa::Phase::kSpan
                           : seq == 1 && !in_prompt ? isa::Phase::kDecode
                                                    : isa::Phase::kPrefill;
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

namespace qbc::runtime {
namespace {

constexpr char kKvMagic[8] = {'Q', 'B', 'C', 'K', 'V', 0, 0, 1};

/// The KV buffers of the bundle, in buffer order, and the digest of their layout.
std::vector<int32_t> kv_buffers(const isa::Bundle& b, mxq::Digest* layout) {
  std::vector<int32_t> out;
  std::string text = std::to_string(b.max_cache);
  for (size_t i = 0; i < b.buffers.size(); ++i) {
    const isa::Buffer& buf = b.buffers[i];
    if (buf.space != isa::Space::kDram || buf.purpose != isa::Purpose::kKv) continue;
    out.push_back(static_cast<int32_t>(i));
    text += ";" + buf.name + ":" + std::to_string(buf.bytes);
  }
  *layout = mxq::digest_of(text.data(), text.size());
  return out;
}

void put_u64(std::string& s, uint64_t v) {
  for (int i = 0; i < 8; ++i) s += static_cast<char>(v >> (8 * i) & 0xff);
}
uint64_t get_u64(const char* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(static_cast<uint8_t>(p[i])) << (8 * i);
  return v;
}

}  // namespace

Status NpuSession::rewind(int64_t position) {
  if (position < 0 || position > position_)
    return invalid_argument("cache_size ", position, ": the cache of slot ", slot_, " holds ",
                            position_, " tokens (it can be rewound, not advanced)");
  // A ring (sliding-window layer) keeps window + chunk positions: rewinding is exact while
  // the window before the new position is still in it.
  for (const isa::AttnDesc& a : device_->bundle().attentions) {
    if (a.window <= 0 || a.capacity >= device_->bundle().max_cache) continue;
    if (position_ > a.capacity && position_ - position > a.capacity - a.window)
      return invalid_argument("cache_size ", position, ": rewinding ", position_ - position,
                              " tokens passes what the sliding-window ring of ", a.capacity,
                              " positions still holds (at most ", a.capacity - a.window, ")");
  }
  position_ = position;
  ended_in_span_ = false;
  return ok_status();
}

StatusOr<std::string> NpuSession::dump_kv() const {
  const isa::Bundle& b = device_->bundle();
  mxq::Digest layout;
  const std::vector<int32_t> kv = kv_buffers(b, &layout);
  std::string out(kKvMagic, 8);
  put_u64(out, static_cast<uint64_t>(position_));
  put_u64(out, kv.size());
  out.append(reinterpret_cast<const char*>(layout.data()), layout.size());
  for (int32_t id : kv) {
    const int64_t bytes = b.buffers[static_cast<size_t>(id)].bytes;
    const uint8_t* p = device_->dram(device_->address(id, slot_), bytes);
    if (p == nullptr)
      return internal_error("KV buffer ", b.buffers[static_cast<size_t>(id)].name, " outside DRAM");
    put_u64(out, static_cast<uint64_t>(bytes));
    out.append(reinterpret_cast<const char*>(p), static_cast<size_t>(bytes));
  }
  return out;
}

int64_t NpuSession::kv_blob_position(std::string_view blob) {
  if (blob.size() < 40 || std::memcmp(blob.data(), kKvMagic, 8) != 0) return -1;
  const uint64_t position = get_u64(blob.data() + 8);
  return position > static_cast<uint64_t>(INT64_MAX) ? -1 : static_cast<int64_t>(position);
}

Status NpuSession::load_kv(std::string_view blob) {
  const isa::Bundle& b = device_->bundle();
  mxq::Digest layout;
  const std::vector<int32_t> kv = kv_buffers(b, &layout);
  if (blob.size() < 40 || std::memcmp(blob.data(), kKvMagic, 8) != 0)
    return invalid_argument("not a KV cache blob of qbc (bad magic or too short)");
  const uint64_t position = get_u64(blob.data() + 8), count = get_u64(blob.data() + 16);
  if (std::memcmp(blob.data() + 24, layout.data(), layout.size()) != 0 || count != kv.size())
    return invalid_argument("the KV cache blob is of another model's KV layout");
  if (position > static_cast<uint64_t>(b.max_cache))
    return invalid_argument("the KV cache blob holds ", position, " positions, the cache ",
                            b.max_cache);
  size_t at = 40;
  for (int32_t id : kv) {  // sizes first: nothing changes on a bad blob
    const uint64_t bytes = static_cast<uint64_t>(b.buffers[static_cast<size_t>(id)].bytes);
    if (blob.size() - at < 8 || get_u64(blob.data() + at) != bytes || blob.size() - at - 8 < bytes)
      return invalid_argument("the KV cache blob is truncated or sized for another model");
    at += 8 + bytes;
  }
  if (at != blob.size())
    return invalid_argument("the KV cache blob has ", blob.size() - at, " extra bytes");
  at = 40;
  for (int32_t id : kv) {
    const int64_t bytes = b.buffers[static_cast<size_t>(id)].bytes;
    uint8_t* p = device_->dram(device_->address(id, slot_), bytes);
    if (p == nullptr) return internal_error("KV buffer outside DRAM");
    std::memcpy(p, blob.data() + at + 8, static_cast<size_t>(bytes));
    at += 8 + static_cast<size_t>(bytes);
  }
  position_ = static_cast<int64_t>(position);
  ended_in_span_ = false;
  return ok_status();
}

}  // namespace qbc::runtime
