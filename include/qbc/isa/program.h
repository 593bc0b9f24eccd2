// The NPU program: our model of the ARIES instruction set (docs/npu.md). A compiled model is
// a Bundle: explicitly placed buffers (DRAM regions and per-core SRAM allocations), the DRAM
// image of the weights, and per inference scheme ("mode") two programs, prefill of a chunk of
// up to `chunk` tokens and decode of one token. A program holds one instruction stream per
// cooperating core. Each instruction belongs to one of the core's three queues (DMA load,
// compute, DMA store); queues run concurrently on the NPU and are ordered only by the
// dependency tokens an instruction waits for and signals, and cores only by counted barriers.
// Executing a core's stream in program order is one valid schedule (the executor's); the
// verifier checks that every other schedule the tokens allow computes the same thing.
//
// These are plain data types with no compiler dependency: the backend (src/npu) builds them,
// the runtime (src/runtime) executes them, and the MXQ format serialises them.
#pragma once

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <variant>
#include <vector>

#include "qbc/isa/expr.h"
#include "qbc/isa/scheme.h"

namespace qbc::isa {

/// Element types of buffers. kI4 is packed two per byte, low nibble first.
enum class DType : uint8_t { kI4, kI8, kU8, kI16, kI32, kI64, kF16, kF32 };
const char* dtype_name(DType t);
int dtype_bits(DType t);
/// Bytes of `n` elements (kI4: ceil(n / 2)).
int64_t dtype_bytes(DType t, int64_t n);
/// The storage type of `bits`-bit integer codes (KV cache, activations): packed kI4 for 4,
/// kI16 for 16, kI8 otherwise.
DType code_type(int bits);

enum class Space : uint8_t { kDram, kSram };
/// What a DRAM region holds; DMA counters are kept per purpose.
enum class Purpose : uint8_t { kWeights, kKv, kActivations, kScratch, kIo, kSram };
const char* purpose_name(Purpose p);

/// A core's three instruction queues.
enum class Queue : uint8_t { kLoad = 0, kCompute = 1, kStore = 2 };
inline constexpr int kNumQueues = 3;
const char* queue_name(Queue q);

/// Dependency-token channels between the queues of one core (bit i of Instr::wait /
/// Instr::signal). A signal on channel X->Y is consumed by the next wait on X->Y of queue Y,
/// in order (counted semaphores, as in VTA).
enum class Channel : uint8_t {
  kLoadToCompute,
  kComputeToLoad,
  kComputeToStore,
  kStoreToCompute,
  kLoadToStore,
  kStoreToLoad
};
inline constexpr int kNumChannels = 6;
Queue channel_from(Channel c);
Queue channel_to(Channel c);
const char* channel_name(Channel c);

/// An explicitly placed buffer. DRAM buffers live at `offset` in device memory, plus
/// `slot * slot_stride` for per-instance regions (KV cache, activations, scratch); SRAM
/// buffers live at `offset` in the SRAM of `core`. `shape` is informational (elements, for
/// the text form and the memory map); `bytes` is what is reserved.
struct Buffer {
  std::string name;
  Space space = Space::kDram;
  int32_t core = -1;  ///< SRAM: the owning core; DRAM: -1
  Purpose purpose = Purpose::kScratch;
  DType dtype = DType::kI8;
  int64_t offset = 0, bytes = 0;
  int64_t slot_stride = 0;  ///< DRAM: bytes between instance slots (0: shared, e.g. weights)
  std::vector<int64_t> shape;
  /// Weights: the decoder block of the node they belong to (-1 outside blocks); an MXQ
  /// split by blocks puts them in that block's part.
  int32_t block = -1;
};

/// A byte position inside a buffer: buffers[buffer] + offset (an expression of loop
/// variables and runtime values).
struct Ref {
  int32_t buffer = -1;
  Expr offset;
  bool valid() const { return buffer >= 0; }
};

/// A loop over the next `body` instructions of the stream (nested loops included), with
/// `var` running 0..trip-1. Every queue sees the loop (each runs its share of the body).
struct Loop {
  int32_t var = 0;
  Expr trip;
  int32_t body = 0;
};

/// A strided 2-D copy between DRAM and one core's SRAM (kLoad: DRAM -> SRAM, kStore: SRAM ->
/// DRAM). Row r is read at src + r*src_stride and written at dst + r*dst_stride. With
/// `ring_rows > 0` the DRAM side is a ring of `ring_rows` rows of `ring_stride` bytes: row r
/// goes to ring row (ring_row0 + r) mod ring_rows (KV caches: slot = position mod capacity),
/// and the DRAM side's own stride is ignored. Bytes are copied unchanged (int4 stays packed).
struct Dma {
  Ref dst, src;
  Expr rows = 1;
  int64_t row_bytes = 0, dst_stride = 0, src_stride = 0;
  int64_t ring_rows = 0, ring_stride = 0;
  Expr ring_row0 = 0;
};

/// All `cores` cores of the program reach barrier `id` before any passes it. Barriers
/// order DRAM traffic between cores; ids increase along every core's stream.
struct Barrier {
  int32_t id = 0;
  int32_t cores = 1;
};

/// Quantization modes of activation rows (docs/numerics.md "Quantizers").
enum class QuantMode : uint8_t { kStaticSymmetric, kStaticAffine, kTokenSymmetric, kTokenAffine };
const char* quant_mode_name(QuantMode m);

/// Quantizes rows of fp16 values x[rows, k] to codes[rows, k] (int8 for bits 8, int16 for
/// 16), writing each row's scale (fp32) and zero point (int32; 0 when symmetric). Per-token
/// modes compute them from the row (numerics per_token_scale / per_token_affine), static
/// modes use `scale` / `zero`. Codes are the quantizer's codes (zero point not subtracted).
struct Quantize {
  Ref x, codes, scale, zero;
  Expr rows = 1;
  int64_t k = 0;
  int32_t bits = 8;
  QuantMode mode = QuantMode::kTokenAffine;
  float static_scale = 1.0f;
  int32_t static_zero = 0;
};

/// Integer matmul tile: acc[m, j, g] (+)= Σ_{k in group g} (x[m, k] − xz[m]) · (w[j, k] −
/// wz[j, g]) for m < rows, j < n, k < kt, exactly (int64 arithmetic, stored as acc's type).
/// x: codes [rows, ldx] (int8 or int16), xz: int32 [rows] (may be invalid: 0); w: [n, kt]
/// int8 or packed int4 (kt/2 bytes a row); wz: int32 [n, gt] or invalid (0); groups of `group`
/// columns (0: one group of kt, gt = 1). `accumulate` adds to acc instead of assigning.
struct MatMul {
  Ref x, xzero, w, wzero, acc;
  Expr rows = 1;
  int64_t n = 0, kt = 0, ldx = 0, group = 0;
  DType xtype = DType::kI8, wtype = DType::kI8, acctype = DType::kI32;
  bool accumulate = false;
};

/// Requantizes acc[rows, n, gt] (group order g = 0..gt-1) into the fp32 sums fsum[rows, n]:
/// part_g = fp32(fp32(acc) · fp32(xs[m] · ws[j, g])), v = (first ? part_0 : fsum + part_0) +
/// part_1 + ...; `last`: y[m, j] = round(v + bias[j]) (fp16 or fp32 by ytype, row stride
/// ldy elements), else fsum = v. ws rows are `ws_stride` floats apart (the channel's groups).
struct Requant {
  Ref acc, xscale, wscale, fsum, bias, y;
  Expr rows = 1;
  int64_t n = 0, gt = 1, ws_stride = 1, ldy = 0;
  DType acctype = DType::kI32, ytype = DType::kF16;
  bool first = true, last = true;
};

/// RMSNorm of fp16 rows x[rows, width] with fp32 weights [width], or with `group > 0` of
/// every group of `group` columns with the same weights [group] (q/k norms per head)
/// (numerics rms_norm).
struct RmsNorm {
  Ref x, weight, y;
  Expr rows = 1;
  int64_t width = 0, group = 0;
  double eps = 0.0, unit_offset = 0.0;
};

/// RoPE of fp16 rows [rows, heads*head_dim] at positions pos0.. with Bundle::ropes[rope];
/// frequencies are those of a call whose last position is `freq_pos` (numerics rope).
struct Rope {
  Ref x, y;  ///< rows of heads*head_dim fp16 values
  Expr rows = 1, pos0 = 0, freq_pos = 0;
  int32_t rope = -1;
};

/// Elementwise ops over rows*width contiguous values (numerics elementwise).
enum class EltOp : uint8_t { kAdd, kSilu, kGelu, kScale, kSoftcap };
const char* elt_name(EltOp op);
struct Eltwise {
  EltOp op = EltOp::kAdd;
  Ref a, b, y;  ///< b: the second input of kAdd and the up input of kSilu/kGelu (y = act(a) * b)
  Expr rows = 1;
  int64_t width = 0;
  float factor = 1.0f;  ///< kScale: factor, kSoftcap: cap
  /// Type of the inputs and the output: kF16 (body values, rounded to fp16) or kF32 (values
  /// of the head, e.g. soft-capped logits, not rounded).
  DType type = DType::kF16;
};

/// Attention parameter block layout in SRAM/DRAM (fp32): q_scale[H], k_scale[KV*d],
/// v_scale[KV*d], k_offset[KV*d], v_offset[KV*d], k_rot_offset[KV*d].
int64_t attn_params_floats(int64_t heads, int64_t kv_heads, int64_t head_dim);

/// Quantizes rows of K and V (fp16 [rows, KV*d], K after RoPE) into cache codes [rows, KV*d]
/// (the K and V dtypes of the attention), subtracting rope(m) at positions pos0.. first when
/// the attention has rotating key offsets (numerics attention append).
struct KvQuant {
  Ref k, v, kcodes, vcodes, params;
  Expr rows = 1, pos0 = 0;
  int32_t attn = -1;
};

/// Prepares the queries of the g query heads of KV head `kv_head`: q points at row 0, column
/// kv_head*g*d of fp16 rows of H*d values; qcodes int32 [rows*g, d] and multipliers mq fp32
/// [rows*g] (numerics query_codes).
struct QueryPrep {
  Ref q, params, qcodes, mq;
  Expr rows = 1;
  int64_t kv_head = 0;
  int32_t attn = -1;
};

/// Scores of the g query heads of `kv_head` (rows [rows]) against a chunk of `bc` cached keys
/// kcodes [bc, d] at positions kpos0.. (q as in QueryPrep, read for the rotating-offset
/// correction): scores fp32 [rows*g, bc] (numerics key_score, with
/// rope(m) at the key's position under rotating offsets); a key after the query (qpos0 + r),
/// outside the window or before position 0 scores −inf. max_mode: kNone leaves rowmax,
/// kInit sets it to this chunk's row max, kUpdate takes the max with it.
enum class MaxMode : uint8_t { kNone, kInit, kUpdate };
struct QkScores {
  Ref qcodes, mq, q, kcodes, params, scores, rowmax;
  Expr rows = 1, qpos0 = 0, kpos0 = 0;
  int64_t bc = 0, kv_head = 0;
  MaxMode max_mode = MaxMode::kNone;
  int32_t attn = -1;
};

/// Exponent codes of scores [rows*g, bc] against rowmax (numerics exp_code) and their
/// integer sums: esum int64 [rows*g] (+)= Σ_j e, acc int64 [rows*g, d] (+)= Σ_j e · vcodes[j].
struct ExpAccum {
  Ref scores, rowmax, vcodes, esum, acc;
  Expr rows = 1;
  int64_t bc = 0;
  bool first = false;
  int32_t attn = -1;
};

/// Merges `parts` partial rows parts[p, count] into out[count]: elementwise max (fp32) or
/// integer sum (int64). Both are order-free, so any number of cores gives the same bits.
enum class MergeOp : uint8_t { kMax, kSum };
struct Merge {
  MergeOp op = MergeOp::kSum;
  Ref parts, out;
  int64_t parts_count = 1, count = 0, part_stride = 0;  ///< part_stride: elements between parts
};

/// The attention output of the g heads of `kv_head`: y points at row 0, column kv_head*g*d
/// of fp16 rows of H*d values; y[r, i*d + c] = attention_output(acc, esum, v_scale[c],
/// v_offset[c]) for the head's channels.
struct AttnOut {
  Ref acc, esum, params, y;
  Expr rows = 1;
  int64_t kv_head = 0;
  int32_t attn = -1;
};

/// Sets `count` elements of y (kF32 or kI64) to `value` (rowmax = −inf, sums = 0).
struct Fill {
  Ref y;
  Expr count = 1;
  DType type = DType::kF32;
  double value = 0.0;
};

using Op = std::variant<Loop, Dma, Barrier, Quantize, MatMul, Requant, RmsNorm, Rope, Eltwise,
                        KvQuant, QueryPrep, QkScores, ExpAccum, Merge, AttnOut, Fill>;
/// The mnemonic of an instruction's op ("loop", "dma", ...).
const char* op_name(const Op& op);

struct Instr {
  Op op;
  Queue queue = Queue::kCompute;
  uint8_t wait = 0, signal = 0;  ///< Channel bitmasks
  int32_t node = -1;             ///< Bundle::nodes: the MBLT node it implements (-1: none)
  int32_t pass = -1;             ///< Bundle::passes: the backend pass that made it
};

/// One buffer access of an instruction, for the verifier, the dependency pass and the
/// counters: `bytes` bytes at ref (a conservative extent for strided and ring accesses).
struct Access {
  Ref ref;
  Expr bytes;
  bool write = false;
  /// A strided DMA side touches only rows of `row_bytes` bytes `stride` apart inside that
  /// extent (0: every byte of it). Cores storing different column tiles of the same rows
  /// therefore do not conflict.
  int64_t stride = 0, row_bytes = 0;
  /// A ring side (Dma::ring_rows > 0): rows (ring_row0 + r) mod ring_rows for r < ring_count
  /// of `stride` bytes, `row_bytes` each, from the ring's start at `ref`.
  int64_t ring_rows = 0;
  Expr ring_row0 = 0, ring_count = 0;
};

/// Attention parameters of the program (Bundle::attentions).
struct AttnDesc {
  int64_t heads = 0, kv_heads = 0, head_dim = 0, window = 0, capacity = 0;
  double scale = 0.0, softcap = 0.0;
  int32_t k_bits = 8, v_bits = 8, p_bits = 8;
  bool q_dynamic = false, rotating = false;
  int32_t k_rope = -1;  ///< Bundle::ropes: K's rope (rotating offsets)
};

/// A rope table's parameters (numerics::Rope).
struct RopeDesc {
  int64_t heads = 0, head_dim = 0, rotary_dim = 0;
  std::vector<double> inv_freq, long_inv_freq;
  double attention_factor = 1.0, dynamic_factor = 0.0, theta = 10000.0;
  int64_t original_max_positions = 0;
};

enum class Phase : uint8_t { kPrefill, kDecode };
const char* phase_name(Phase p);

struct CoreProgram {
  int32_t core = 0;  ///< the physical core of the instance's first core plus this index
  std::vector<Instr> code;
};

/// One phase of one mode: the streams of the cooperating cores. Runtime values: start + seq
/// <= max_cache, 1 <= seq <= max_seq, slot < instances of the mode.
struct Program {
  Phase phase = Phase::kDecode;
  int64_t max_seq = 1;
  std::vector<CoreProgram> cores;
};

struct Mode {
  Scheme scheme = Scheme::kSingle;
  int32_t cores_per_instance = 1;
  int32_t instances = 1;
  Program prefill, decode;
};

/// DRAM map summary (bytes), as `qbc inspect --memory --json` prints it.
struct DramPlan {
  int64_t weights = 0, kv = 0, activations = 0, scratch = 0, io = 0, reserve = 0;
  int64_t total() const { return weights + kv + activations + scratch + io + reserve; }
};

struct Bundle;
/// The accesses of `in` (empty for loops and barriers).
std::vector<Access> accesses(const Instr& in, const Bundle& b);

/// A compiled model.
struct Bundle {
  // Target
  std::string target;
  int32_t target_cores = 1;
  int32_t target_clusters = 1;  ///< cores are addressed cluster:core, target_cores / clusters each
  int64_t sram_bytes = 0, dram_bytes = 0, dma_align = 16;
  // Model interface
  int64_t hidden = 0, vocab = 0, max_cache = 0, chunk = 1, batch = 1;
  int64_t embed_rows = 0;
  std::vector<float> embedding;  ///< host fp32 token embedding [embed_rows, hidden]
  // Placement and code
  std::vector<Buffer> buffers;
  std::vector<AttnDesc> attentions;
  std::vector<RopeDesc> ropes;
  std::vector<std::string> nodes;   ///< MBLT node names (debug information)
  std::vector<std::string> passes;  ///< backend pass names
  std::vector<Mode> modes;
  int32_t input = -1,
          output =
              -1;  ///< DRAM buffers: fp16 inputs_embeds [chunk, hidden], fp32 logits [chunk, vocab]
  int64_t image_base = 0;      ///< DRAM address of image[0]
  std::vector<uint8_t> image;  ///< initial DRAM contents of the weight region
  DramPlan dram;

  /// A reader that maps its file sets these instead of filling `image` and `embedding` (which
  /// stay empty): the weight image and the embedding table are then the file's own bytes (a
  /// private mapping, so nothing written to them reaches the file). The pointers keep the
  /// mapping alive.
  std::shared_ptr<uint8_t> mapped_image;
  int64_t mapped_image_bytes = 0;
  std::shared_ptr<const float> mapped_embedding;
  int64_t mapped_embedding_floats = 0;
  /// Or, from a file that stores the table as bf16 (every value of it exactly a bf16: a bf16
  /// source without a rotation; docs/mxq.md), the mapped bf16 values; rows are widened to
  /// fp32 as they are looked up (embedding_row), which gives the same fp32 values.
  std::shared_ptr<const uint16_t> mapped_embedding_bf16;
  int64_t mapped_embedding_bf16_values = 0;

  /// The weight image and the embedding table, wherever they live.
  const uint8_t* image_data() const { return mapped_image ? mapped_image.get() : image.data(); }
  int64_t image_size() const {
    return mapped_image ? mapped_image_bytes : static_cast<int64_t>(image.size());
  }
  /// The fp32 table, or nullptr when the table is held as bf16 (mapped_embedding_bf16).
  const float* embedding_data() const {
    if (mapped_embedding_bf16) return nullptr;
    return mapped_embedding ? mapped_embedding.get() : embedding.data();
  }
  /// Values in the table, in whichever form it is held.
  int64_t embedding_size() const {
    if (mapped_embedding_bf16) return mapped_embedding_bf16_values;
    return mapped_embedding ? mapped_embedding_floats : static_cast<int64_t>(embedding.size());
  }
  /// Row `r` of the table as fp32 (`hidden` values); the caller checks 0 <= r < embed_rows.
  void embedding_row(int64_t r, float* out) const {
    if (mapped_embedding_bf16) {
      const uint16_t* src = mapped_embedding_bf16.get() + r * hidden;
      for (int64_t i = 0; i < hidden; ++i) {
        const uint32_t bits = static_cast<uint32_t>(src[i]) << 16;
        std::memcpy(out + i, &bits, sizeof(bits));
      }
      return;
    }
    std::memcpy(out, embedding_data() + r * hidden, static_cast<size_t>(hidden) * sizeof(float));
  }
};

}  // namespace qbc::isa
