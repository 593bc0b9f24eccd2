// Names and sizes of the NPU program types, and access sets from the instruction table
// (see qbc/isa/program.h and qbc/isa/ops.h).
#include "qbc/isa/program.h"

#include <type_traits>
#include <utility>

namespace qbc::isa {

const char* dtype_name(DType t) {
  switch (t) {
    case DType::kI4:
      return "i4";
    case DType::kI8:
      return "i8";
    case DType::kU8:
      return "u8";
    case DType::kI16:
      return "i16";
    case DType::kI32:
      return "i32";
    case DType::kI64:
      return "i64";
    case DType::kF16:
      return "f16";
    case DType::kF32:
      return "f32";
  }
  return "?";
}

int dtype_bits(DType t) {
  switch (t) {
    case DType::kI4:
      return 4;
    case DType::kI8:
    case DType::kU8:
      return 8;
    case DType::kI16:
    case DType::kF16:
      return 16;
    case DType::kI32:
    case DType::kF32:
      return 32;
    case DType::kI64:
      return 64;
  }
  return 8;
}

int64_t dtype_bytes(DType t, int64_t n) { return (n * dtype_bits(t) + 7) / 8; }

const char* purpose_name(Purpose p) {
  switch (p) {
    case Purpose::kWeights:
      return "weights";
    case Purpose::kKv:
      return "kv";
    case Purpose::kActivations:
      return "activations";
    case Purpose::kScratch:
      return "scratch";
    case Purpose::kIo:
      return "io";
    case Purpose::kSram:
      return "sram";
  }
  return "?";
}

const char* queue_name(Queue q) {
  switch (q) {
    case Queue::kLoad:
      return "ld";
    case Queue::kCompute:
      return "cmp";
    case Queue::kStore:
      return "st";
  }
  return "?";
}

namespace {
struct ChannelInfo {
  Queue from, to;
  const char* name;
};
constexpr ChannelInfo kChannels[kNumChannels] = {
    {Queue::kLoad, Queue::kCompute, "ld>cmp"},  {Queue::kCompute, Queue::kLoad, "cmp>ld"},
    {Queue::kCompute, Queue::kStore, "cmp>st"}, {Queue::kStore, Queue::kCompute, "st>cmp"},
    {Queue::kLoad, Queue::kStore, "ld>st"},     {Queue::kStore, Queue::kLoad, "st>ld"}};
}  // namespace

Queue channel_from(Channel c) { return kChannels[static_cast<int>(c)].from; }
Queue channel_to(Channel c) { return kChannels[static_cast<int>(c)].to; }
const char* channel_name(Channel c) { return kChannels[static_cast<int>(c)].name; }

const char* quant_mode_name(QuantMode m) {
  switch (m) {
    case QuantMode::kStaticSymmetric:
      return "static-sym";
    case QuantMode::kStaticAffine:
      return "static-affine";
    case QuantMode::kTokenSymmetric:
      return "token-sym";
    case QuantMode::kTokenAffine:
      return "token-affine";
  }
  return "?";
}

const char* elt_name(EltOp op) {
  switch (op) {
    case EltOp::kAdd:
      return "add";
    case EltOp::kSilu:
      return "silu_mul";
    case EltOp::kGelu:
      return "gelu_mul";
    case EltOp::kScale:
      return "scale";
    case EltOp::kSoftcap:
      return "softcap";
    case EltOp::kGeluErf:
      return "gelu";
    case EltOp::kGeluQuick:
      return "quick_gelu";
    case EltOp::kGeluTanh:
      return "gelu_tanh";
  }
  return "?";
}

const char* phase_name(Phase p) {
  switch (p) {
    case Phase::kPrefill:
      return "prefill";
    case Phase::kDecode:
      return "decode";
    case Phase::kSpan:
      return "span";
  }
  return "?";
}

std::vector<const Program*> Mode::programs() const {
  std::vector<const Program*> v{&prefill, &decode};
  if (has_span()) v.push_back(&span);
  return v;
}

std::vector<Program*> Mode::programs() {
  std::vector<Program*> v{&prefill, &decode};
  if (has_span()) v.push_back(&span);
  return v;
}

int64_t attn_params_floats(int64_t heads, int64_t kv_heads, int64_t head_dim) {
  return heads + 5 * kv_heads * head_dim;
}

std::string kv4_fields_problem(const AttnDesc& a) {
  if (a.k_group < 0 || (a.k_group > 0 && (a.head_dim % a.k_group != 0)))
    return "k_group " + std::to_string(a.k_group) + " is not 0 or a divisor of head_dim " +
           std::to_string(a.head_dim);
  if ((a.k_group > 0 || a.qk_hadamard || a.k_asym) && !a.k_token_scale)
    return "k_group, qk_hadamard and k_asym need k_token_scale";
  const int64_t block = a.head_dim / a.key_groups();
  if (a.qk_hadamard && (block & (block - 1)) != 0)
    return "qk_hadamard over blocks of " + std::to_string(block) + ", not a power of two";
  if (a.k_asym && a.k_bits != 4)
    return "k_asym with " + std::to_string(a.k_bits) + "-bit keys (4 only)";
  return "";
}

DType code_type(int bits) { return bits == 4 ? DType::kI4 : bits == 16 ? DType::kI16 : DType::kI8; }

namespace {

/// Collects the accesses an op's row reports (OpRow<T>::accesses).
struct AccessSink {
  const Bundle& b;
  std::vector<Access> out;
  void read(const Ref& r, const Expr& bytes) { add(r, bytes, false); }
  void write(const Ref& r, const Expr& bytes) { add(r, bytes, true); }
  void add(const Ref& r, const Expr& bytes, bool write) {
    if (r.valid()) out.push_back(Access{r, bytes, write});
  }
  const AttnDesc& attn(int32_t i) const { return b.attentions.at(static_cast<size_t>(i)); }
  const RopeDesc& rope(int32_t i) const { return b.ropes.at(static_cast<size_t>(i)); }
  int64_t params_bytes(int32_t i) const {
    const AttnDesc& a = attn(i);
    return 4 * attn_params_floats(a.heads, a.kv_heads, a.head_dim);
  }
  bool dram(const Ref& r) const {
    return b.buffers.at(static_cast<size_t>(r.buffer)).space == Space::kDram;
  }
  /// Shapes the last access as a DMA side: a ring side, or rows `stride` apart.
  void shape(bool ring_side, int64_t stride, const Dma& d) {
    Access& a = out.back();
    if (ring_side) {
      a.stride = d.ring_stride;
      a.row_bytes = d.row_bytes;
      a.ring_rows = d.ring_rows;
      a.ring_row0 = d.ring_row0;
      a.ring_count = d.rows;
    } else if (stride > d.row_bytes) {
      a.stride = stride;
      a.row_bytes = d.row_bytes;
    }
  }
};

template <class T, class = void>
struct HasAccesses : std::false_type {};
template <class T>
struct HasAccesses<T, std::void_t<decltype(OpRow<T>::accesses(std::declval<const T&>(),
                                                              std::declval<AccessSink&>()))>>
    : std::true_type {};

}  // namespace

std::vector<Access> accesses(const Instr& in, const Bundle& b) {
  AccessSink sink{b, {}};
  std::visit(
      [&](const auto& op) {
        using T = std::decay_t<decltype(op)>;
        if constexpr (HasAccesses<T>::value) OpRow<T>::accesses(op, sink);
      },
      in.op);
  return std::move(sink.out);
}

}  // namespace qbc::isa
