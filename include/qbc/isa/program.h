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
#include <string>
#include <variant>
#include <vector>

#include "qbc/isa/ops.h"
#include "qbc/isa/scheme.h"
#include "qbc/isa/types.h"

namespace qbc::isa {

/// Attention parameter block layout in SRAM/DRAM (fp32): q_scale[H], k_scale[KV*d],
/// v_scale[KV*d], k_offset[KV*d], v_offset[KV*d], k_rot_offset[KV*d].
int64_t attn_params_floats(int64_t heads, int64_t kv_heads, int64_t head_dim);

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
  // The KV4 rules (docs/numerics.md): per-token key multipliers per key group of k_group
  // channels (0: one per row), their int16 zero points, the block-diagonal Q·K Hadamard,
  // per-token V multipliers. Each stored key/value of a KV head is a record (key_record).
  bool k_token_scale = false, qk_hadamard = false, k_asym = false, v_token_scale = false;
  int64_t k_group = 0;
  /// The caches hold their records densely (each KV head's records `key_record()` /
  /// `value_record()` bytes apart, not one DMA-aligned row each; docs/npu.md "KV records"):
  /// `kv_quant` writes into whole aligned blocks of records loaded and stored back, and a
  /// cache chunk moves as one row. A declaration for the reader (MXQ feature bit 8): the
  /// instructions carry the layout.
  bool packed = false;

  /// Key multipliers per stored key of a KV head (head_dim / k_group, or 1).
  int64_t key_groups() const { return k_group > 0 && k_group < head_dim ? head_dim / k_group : 1; }
  /// Bytes of one stored key of a KV head: its codes, then with k_token_scale an fp16
  /// multiplier per key group, then with k_asym an int16 zero point per group.
  int64_t key_record() const {
    return dtype_bytes(code_type(k_bits), head_dim) + (k_token_scale ? 2 * key_groups() : 0) +
           (k_asym ? 2 * key_groups() : 0);
  }
  /// Bytes of one stored value of a KV head: its codes, then with v_token_scale its u8
  /// multiplier.
  int64_t value_record() const {
    return dtype_bytes(code_type(v_bits), head_dim) + (v_token_scale ? 1 : 0);
  }
  /// The KV4 rules are on (the records carry per-token fields).
  bool token_fields() const { return k_token_scale || v_token_scale; }
  /// The caches are not rows of codes padded to the DMA alignment (MXQ feature bit 8).
  bool kv_records() const { return token_fields() || packed; }
  /// A vision tower's full_attention (feature bundles): no causal mask. Every query row of
  /// a qk_scores sees the keys at positions [0, qpos0] (qpos0 does not advance with the row),
  /// so the lowering passes the key range's last position as qpos0. The cache is a scratch
  /// of the call's own keys, appended at positions 0.. before any query.
  bool bidirectional = false;
};

/// Why the KV4 fields of `a` are inconsistent (k_group not 0 or a divisor of head_dim;
/// k_group, qk_hadamard or k_asym without k_token_scale; qk_hadamard over a block that is
/// not a power of two; k_asym with keys of other than 4 bits), or "" when they are not.
std::string kv4_fields_problem(const AttnDesc& a);

/// A rope table's parameters (numerics::Rope).
struct RopeDesc {
  int64_t heads = 0, head_dim = 0, rotary_dim = 0;
  std::vector<double> inv_freq, long_inv_freq;
  double attention_factor = 1.0, dynamic_factor = 0.0, theta = 10000.0;
  int64_t original_max_positions = 0;
};

/// Host-computed rope tables (M-RoPE models, docs/multimodal.md): the programs read per-token
/// cos and sin rows from two io buffers, fp16 [chunk, head_dim/2] each, which the host fills
/// before every call: frequency i (of head_dim/2) has angle p_{s(i)} · theta^(-2i/head_dim),
/// p the token's position in stream s(i) (the first section[0] frequencies stream 0, the next
/// section[1] stream 1, the rest stream 2; interleaved: stream 1 when i % 3 == 1 and
/// i < 3·section[1], stream 2 when i % 3 == 2 and i < 3·section[2], else 0 —
/// runner::mrope_stream), computed in fp64, rounded to fp32, then to fp16.
struct RopeInputs {
  int32_t cos = -1, sin = -1;  ///< Bundle::buffers (DRAM, io); -1: the model takes no tables
  int64_t head_dim = 0;
  double theta = 0.0;
  int64_t section[3] = {0, 0, 0};
  /// Qwen3-VL: the streams take the frequencies in turn (runner::MRopeSpec::interleaved).
  bool interleaved = false;
  bool present() const { return cos >= 0; }
};

/// What a bundle computes (docs/npu.md "Feature bundles"). A decoder: one fp16
/// inputs_embeds input, fp32 logits, prefill and decode programs over a KV cache. A feature
/// graph (a vision tower): named fp16 row inputs (`Bundle::feature_inputs`), an fp32 feature
/// output [chunk, vocab] (vocab: the feature width), one call per image through the prefill
/// program (chunk: the image's rows; start 0, seq the rows), decode programs without code.
enum class BundleKind : uint8_t { kDecoder, kFeatures };

/// A feature bundle's input: fp16 rows [chunk, width], `stride` bytes apart, in DRAM buffer
/// `buffer` (io). The host converts its values to fp16 and writes them there before the call.
struct FeatureInput {
  std::string name;  ///< the MBLT input node's name
  int32_t buffer = -1;
  int64_t width = 0, stride = 0;
};

/// kSpan: a decoder's prefill program whose calls are each one bidirectional span (a Gemma 3
/// image: every token of the call sees every key of the call; QkScores::span).
enum class Phase : uint8_t { kPrefill, kDecode, kSpan };
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
  /// A prefill program for bidirectional spans (Phase::kSpan), or no streams when the model
  /// has none (every model but a Gemma 3 VLM's language part).
  Program span{Phase::kSpan, 1, {}};

  bool has_span() const { return !span.cores.empty(); }
  /// The program of phase `p`.
  const Program& program(Phase p) const {
    return p == Phase::kPrefill ? prefill : p == Phase::kDecode ? decode : span;
  }
  /// prefill, decode and, when present, span.
  std::vector<const Program*> programs() const;
  std::vector<Program*> programs();
};

/// DRAM map summary (bytes), as `qbc inspect --memory --json` prints it.
struct DramPlan {
  int64_t weights = 0, kv = 0, activations = 0, scratch = 0, io = 0, reserve = 0;
  int64_t total() const { return weights + kv + activations + scratch + io + reserve; }
};

/// `size` values held outside the bundle (see Bundle::image_view); empty when data is null.
template <class T>
struct View {
  T* data = nullptr;
  int64_t size = 0;
  bool empty() const { return data == nullptr; }
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
  RopeInputs rope_inputs;  ///< M-RoPE models: the per-token rope-table inputs
  /// Qwen3-VL: the DeepStack inputs' DRAM io buffers, fp16 [chunk, hidden] each (level J is
  /// added to the residual stream after decoder layer J), which the host fills per call: the
  /// image's DeepStack rows at its tokens, zeros elsewhere. Empty: the model takes none.
  std::vector<int32_t> deepstack;
  BundleKind kind = BundleKind::kDecoder;
  std::vector<FeatureInput> feature_inputs;  ///< kFeatures: the graph's inputs, in node order
  int64_t output_stride = 0;                 ///< kFeatures: bytes between output rows
  /// kFeatures: output rows per call (chunk, or chunk / f after a merge of f rows into one)
  int64_t output_rows = 0;
  int64_t image_base = 0;      ///< DRAM address of image[0]
  std::vector<uint8_t> image;  ///< initial DRAM contents of the weight region
  DramPlan dram;

  /// Weight bytes held outside the bundle. A reader that maps its file (the MXQ layer, which
  /// owns the mapping) points these at the file's own bytes instead of filling `image` and
  /// `embedding`, which then stay empty (a private mapping: nothing written to the image
  /// reaches the file). The bundle does not own what they view: the reader hands the bundle
  /// out through a shared_ptr that keeps the storage alive (mxq::load_model), and a copy of
  /// the Bundle shares the views, not the storage.
  View<uint8_t> image_view;
  View<const float> embedding_view;
  /// Or, from a file that stores the table as bf16 (every value of it exactly a bf16: a bf16
  /// source without a rotation; docs/mxq.md), the bf16 values; rows are widened to fp32 as
  /// they are looked up (embedding_row), which gives the same fp32 values.
  View<const uint16_t> embedding_bf16_view;
  /// Or the 8-bit table (bit.embedding 8; docs/numerics.md "8-bit embedding"): int8 codes
  /// [embed_rows, hidden] and one fp32 scale per row, held here by the compiler and viewed in
  /// the file by a reader; a row is looked up as fp32(code) · scale.
  std::vector<int8_t> embedding_i8;
  std::vector<float> embedding_row_scales;
  View<const int8_t> embedding_i8_view;
  View<const float> embedding_row_scales_view;

  /// Whether the table is held as int8 codes with row scales.
  bool embedding_is_i8() const {
    return embedding_i8_view.data != nullptr || !embedding_i8.empty();
  }
  const int8_t* embedding_codes() const {
    return embedding_i8_view.data ? embedding_i8_view.data : embedding_i8.data();
  }
  const float* embedding_scales() const {
    return embedding_row_scales_view.data ? embedding_row_scales_view.data
                                          : embedding_row_scales.data();
  }

  /// The weight image and the embedding table, wherever they live.
  const uint8_t* image_data() const { return image_view.data ? image_view.data : image.data(); }
  int64_t image_size() const {
    return image_view.data ? image_view.size : static_cast<int64_t>(image.size());
  }
  /// The fp32 table, or nullptr when the table is held as bf16 (embedding_bf16_view).
  const float* embedding_data() const {
    if (embedding_bf16_view.data || embedding_is_i8()) return nullptr;
    return embedding_view.data ? embedding_view.data : embedding.data();
  }
  /// Values in the table, in whichever form it is held.
  int64_t embedding_size() const {
    if (embedding_bf16_view.data) return embedding_bf16_view.size;
    if (embedding_i8_view.data) return embedding_i8_view.size;
    if (!embedding_i8.empty()) return static_cast<int64_t>(embedding_i8.size());
    return embedding_view.data ? embedding_view.size : static_cast<int64_t>(embedding.size());
  }
  /// Row `r` of the table as fp32 (`hidden` values); the caller checks 0 <= r < embed_rows.
  void embedding_row(int64_t r, float* out) const {
    if (embedding_bf16_view.data) {
      const uint16_t* src = embedding_bf16_view.data + r * hidden;
      for (int64_t i = 0; i < hidden; ++i) {
        const uint32_t bits = static_cast<uint32_t>(src[i]) << 16;
        std::memcpy(out + i, &bits, sizeof(bits));
      }
      return;
    }
    if (embedding_is_i8()) {
      // numerics::dequantize_embedding_row: one fp32 multiply a value.
      const int8_t* c = embedding_codes() + r * hidden;
      const float s = embedding_scales()[r];
      for (int64_t i = 0; i < hidden; ++i) out[i] = static_cast<float>(c[i]) * s;
      return;
    }
    std::memcpy(out, embedding_data() + r * hidden, static_cast<size_t>(hidden) * sizeof(float));
  }
};

}  // namespace qbc::isa
