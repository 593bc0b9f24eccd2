// Pre-quantized HF checkpoints: `quantization_config` of config.json (compressed-tensors, GPTQ,
// AWQ, auto-round) and the unpacking of their integer tensors into codes, scales and zero points
// per output channel and group, and into the float weights those codes stand for.
//
// Every supported layout is reduced to one form (PackedLinear):
//   w[o][i] = (codes[o][i] - zeros[o][g]) * scales[o][g],   g = g_idx[i] (act order) or i / group
// The layouts themselves are documented in docs/frontend.md ("Pre-quantized HF checkpoints").
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "qbc/frontend/safetensors.h"
#include "qbc/support/status.h"

namespace qbc::frontend {

/// How a checkpoint stores one quantized linear.
enum class PackLayout {
  /// compressed-tensors pack-quantized: `weight_packed` int32 [out, words] (codes + 2^(b-1)
  /// packed along the input), `weight_scale`, optional packed `weight_zero_point`, `weight_g_idx`.
  kCtPacked,
  /// compressed-tensors int-quantized / naive-quantized: `weight` int8 [out, in] (signed codes),
  /// `weight_scale`, optional unpacked `weight_zero_point`, `weight_g_idx`.
  kCtInt,
  /// AutoGPTQ / GPTQModel / auto-round gptq exports: `qweight` int32 [in*b/32, out] (unsigned
  /// codes packed along the input), `qzeros` int32 [groups, out*b/32], `scales` [groups, out],
  /// `g_idx` [in].
  kGptq,
  /// AutoAWQ GEMM: `qweight` int32 [in, out/8] and `qzeros` [groups, out/8] packed along the
  /// output in the order 0,2,4,6,1,3,5,7; `scales` [groups, out].
  kAwqGemm,
  /// A GGUF's Q8_0, Q5_0 or Q4_0 linear (frontend/gguf_codes.h): one fp16 scale per block of
  /// 32 inputs; codes and zero points are read already signed, in qbc's convention.
  kGgufBlocks,
};

/// A stable lower-case name for `layout`, e.g. "gptq".
std::string_view pack_layout_name(PackLayout layout);

/// The weight quantization of one group of linears.
struct WeightQuantArgs {
  int bits = 4;
  /// Inputs per scale; 0 = one scale per output channel; -1 = one scale for the whole tensor.
  int64_t group_size = 0;
  bool symmetric = true;
  /// compressed-tensors `actorder` / GPTQ `desc_act`: groups may be given by a g_idx.
  bool act_order = false;
};

/// One scheme of the config (a compressed-tensors config group, or the single scheme of GPTQ,
/// AWQ and auto-round), and which modules it covers.
struct PrequantScheme {
  /// The config group's name ("group_0"), or the method for single-scheme configs.
  std::string name;
  PackLayout layout = PackLayout::kCtPacked;
  WeightQuantArgs args;
  /// Module names or patterns: "Linear" (any linear), "re:<regex>" (matched at the start of the
  /// module name, as Python's re.match), or an exact module name. Empty = every linear.
  std::vector<std::string> targets;
};

/// One rule of GPTQModel's `dynamic` (per-module overrides): a module whose name matches
/// `regex` at its start (Python's re.match) is kept in float (`exclude`: key prefix "-:") or
/// packed with `args` (prefix "+:" or none: the base scheme with the rule's bits, group_size,
/// sym and desc_act). The first matching rule applies, in the order the config writes them.
struct ModuleRule {
  /// The key as the config writes it ("-:model\\.layers\\.1\\..*"), for messages.
  std::string key;
  std::string regex;
  bool exclude = false;
  WeightQuantArgs args;
};

/// `quantization_config` of a config.json.
struct PrequantConfig {
  /// "compressed-tensors", "gptq", "awq" or "auto-round".
  std::string method;
  /// What the checkpoint calls its format: "pack-quantized", "gptq", "gptq_v2", "gemm",
  /// "auto_round:auto_gptq", ...
  std::string format;
  /// GPTQ v1 layouts store each zero point minus one.
  bool zero_minus_one = false;
  std::vector<PrequantScheme> schemes;
  /// Modules kept in float (compressed-tensors `ignore`, AWQ `modules_to_not_convert`).
  std::vector<std::string> ignore;
  /// Per-module overrides of auto-round's `extra_config` (module name -> args; bits >= 16 means
  /// the module stays float).
  std::vector<std::pair<std::string, WeightQuantArgs>> overrides;
  /// GPTQModel `dynamic` rules, in the config's order.
  std::vector<ModuleRule> dynamic;
  /// compressed-tensors `kv_cache_scheme` in words ("int8 tensor symmetric"); empty when absent.
  std::string kv_cache_scheme;
  /// Bits of `kv_cache_scheme` (0 when absent).
  int kv_cache_bits = 0;
  /// The config file, for messages.
  std::string source;

  /// One line: method, format, bits, groups, symmetry, act order.
  std::string describe() const;
};

/// Parses `quantization_config` of the config.json text `config_json` (`source` names the file
/// in messages). std::nullopt when the key is absent. kUnimplemented naming the method or format
/// and the key, and saying "use the float checkpoint", for methods and formats qbc does not read
/// (fp8, nvfp4, mxfp4, sparse, marlin, exllama, bitsandbytes, ...); kInvalidArgument naming the
/// key for malformed values.
StatusOr<std::optional<PrequantConfig>> parse_prequant_config(std::string_view config_json,
                                                              std::string_view source);

/// One imported linear in the common integer form (see the top of this file).
struct PackedLinear {
  /// HF module name, e.g. "model.layers.0.self_attn.q_proj".
  std::string module;
  PackLayout layout = PackLayout::kCtPacked;
  int64_t out = 0;
  int64_t in = 0;
  int bits = 4;
  /// Inputs per group (`in` for one scale per channel).
  int64_t group_size = 0;
  int64_t num_groups = 0;
  bool symmetric = true;
  /// [out * in]: signed codes in [-2^(b-1), 2^(b-1)) for compressed-tensors, unsigned codes in
  /// [0, 2^b) for GPTQ and AWQ.
  std::vector<int32_t> codes;
  /// [out * num_groups].
  std::vector<float> scales;
  /// [out * num_groups], in the codes' convention (GPTQ v1's stored minus-one already undone).
  std::vector<int32_t> zeros;
  /// [out * num_groups] float offsets, w = s·(q − z) + m (GGUF Q4_1 / Q5_1), or empty.
  std::vector<float> mins;
  /// [in] group of every input column; empty when groups are contiguous (i / group_size).
  std::vector<int32_t> g_idx;

  /// The group of input column `i`.
  int64_t group_of(int64_t i) const {
    return g_idx.empty() ? i / group_size : static_cast<int64_t>(g_idx[static_cast<size_t>(i)]);
  }
};

/// The float weight [out * in] row-major: (code - zero) * scale, in fp32.
std::vector<float> dequantize(const PackedLinear& linear);

/// A quantized linear found in a checkpoint: its module, scheme and stored tensors.
struct PackedTensorRef {
  std::string module;
  PackLayout layout = PackLayout::kCtPacked;
  WeightQuantArgs args;
  /// Row-major float shape of the weight the module stands for: [out, in].
  std::vector<int64_t> shape;
  /// The stored tensors holding it (names in the checkpoint), hidden from the float view.
  std::vector<std::string> parts;
  /// The file holding the main packed tensor.
  std::filesystem::path file;
};

/// Every quantized linear of `checkpoint` under `config`, sorted by module name, plus the
/// tensors the config makes redundant (kv-cache scales). Errors name the file, the tensor and
/// the config key: a packed module matched by no scheme or listed in `ignore`, missing parts,
/// and shapes that disagree with the scheme.
struct PrequantTensors {
  std::vector<PackedTensorRef> linears;
  /// Stored tensors to hide that are not part of a linear (`*.k_scale`, `*.v_scale`, ...).
  std::vector<std::string> hidden;
};
StatusOr<PrequantTensors> find_packed_linears(const SafetensorsCheckpoint& checkpoint,
                                              const PrequantConfig& config);

/// Unpacks `ref` from `checkpoint` into codes, scales and zero points. Errors name the file,
/// the tensor and what is wrong (dtype, shape, a code or group index out of range).
StatusOr<PackedLinear> unpack_linear(const SafetensorsCheckpoint& checkpoint,
                                     const PrequantConfig& config, const PackedTensorRef& ref);

}  // namespace qbc::frontend
