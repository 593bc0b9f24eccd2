// A test packer for pre-quantized HF checkpoints, written from the published layouts (not from
// qbc's reader): compressed-tensors pack-quantized / int-quantized (compressed_tensors
// pack_to_int32, NaiveQuantizationCompressor), AutoGPTQ / GPTQModel (QuantLinear.pack,
// checkpoint_format gptq and gptq_v2), AutoAWQ GEMM (WQLinear_GEMM.from_linear, AWQ_ORDER).
// It rounds a float weight to codes, scales and zero points itself, so tests know the truth.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "json_events.h"
#include "qbc/frontend/random_model.h"
#include "qbc/frontend/safetensors.h"
#include "qbc/tensorfile/dtype.h"
#include "qbc/tensorfile/safetensors_writer.h"
#include "test_support.h"

namespace qbc::testing {

/// Which published layout to write.
enum class TestPackFormat {
  kCtPackedDense,   ///< compressed-tensors pack-quantized, value k at bit k*b (2026 layout).
  kCtPackedPadded,  ///< compressed-tensors pack-quantized, floor(32/b) values a word (older).
  kCtInt,           ///< compressed-tensors int-quantized (int8 weight tensor).
  kCtNaive,         ///< compressed-tensors naive-quantized (NaiveQuantizationCompressor: the
                    ///< same int8 `weight` + `weight_scale` tensors under its own format name).
  kGptqV1,          ///< AutoGPTQ checkpoint_format gptq: zero points stored minus one.
  kGptqV2,          ///< GPTQModel checkpoint_format gptq_v2.
  kAwqGemm,         ///< AutoAWQ GEMM.
};

/// The scheme the test packs with.
struct TestPackScheme {
  TestPackFormat format = TestPackFormat::kGptqV1;
  int bits = 4;
  int64_t group = 32;  ///< 0: one scale per output channel.
  bool symmetric = false;
  bool act_order = false;  ///< Groups follow a column permutation (g_idx).
};

/// Changes the scheme of one module (GPTQModel `dynamic` rules, act order on some modules only
/// in tests); `bits` of 16 or more stores the module as a plain float weight.
using TestPackPerModule = std::function<void(const std::string& module, TestPackScheme& s)>;

/// The truth for one packed linear: w ~= (code - zero) * scale, in the format's own convention
/// (signed codes and zeros for compressed-tensors, unsigned for GPTQ / AWQ).
struct TestPacked {
  int64_t out = 0, in = 0, groups = 0;
  std::vector<int32_t> codes;  ///< [out * in]
  std::vector<float> scales;   ///< [out * groups], already rounded to the stored dtype
  std::vector<int32_t> zeros;  ///< [out * groups]
  std::vector<int32_t> g_idx;  ///< [in]
  std::vector<tensorfile::TensorToWrite> tensors;

  float dequant(int64_t o, int64_t i) const {
    const size_t k = static_cast<size_t>(o * groups + g_idx[static_cast<size_t>(i)]);
    return static_cast<float>(codes[static_cast<size_t>(o * in + i)] - zeros[k]) * scales[k];
  }
};

/// The qbc node of an HF linear module ("model.layers.1.mlp.down_proj" -> "blk.1.ffn.down_proj").
inline std::string linear_node_of(const std::string& module) {
  std::string n = module;
  n.replace(0, std::string("model.layers.").size(), "blk.");
  for (const auto& [from, to] : {std::pair{".self_attn.", ".attn."}, std::pair{".mlp.", ".ffn."}}) {
    const size_t at = n.find(from);
    if (at != std::string::npos) n.replace(at, std::string(from).size(), to);
  }
  return n;
}

/// The small random Llama the pre-quantized and GGUF-codes tests pack: 2 layers, hidden 64,
/// 4 heads of 16 (2 KV heads), vocabulary 256, intermediate `intermediate`, written to `dir`.
inline frontend::RandomModelOptions small_llama_options(const std::filesystem::path& dir,
                                                        uint64_t seed, int64_t intermediate) {
  frontend::RandomModelOptions o;
  o.output_dir = dir;
  o.seed = seed;
  o.overrides.num_hidden_layers = 2;
  o.overrides.hidden_size = 64;
  o.overrides.intermediate_size = intermediate;
  o.overrides.vocab_size = 256;
  o.overrides.num_attention_heads = 4;
  o.overrides.num_key_value_heads = 2;
  o.overrides.head_dim = 16;
  return o;
}

/// A small smoke compile of `model` to DIR/q.mxq, keeping the quantized MBLT and its weights
/// in DIR (llm_fast, 2 random calibration samples of 16 tokens, 64 positions), with JSON events.
inline RunResult run_small_compile(const std::filesystem::path& model,
                                   const std::filesystem::path& dir) {
  return run_qbc("--log-format json compile " + shell_quote(model) +
                 " --preset llm_fast --use-random-calib --set calibration.numSamples=2 "
                 "--set calibration.seqLength=16 --set llm.attributes.maxCacheLength=64 "
                 "--set llm.attributes.maxSequenceLength=64 -o " +
                 shell_quote(dir / "q.mxq") + " --keep-intermediate " + shell_quote(dir));
}

inline bool test_pack_is_ct(TestPackFormat f) {
  return f == TestPackFormat::kCtPackedDense || f == TestPackFormat::kCtPackedPadded ||
         f == TestPackFormat::kCtInt || f == TestPackFormat::kCtNaive;
}

/// Little-endian bytes of 32-bit words.
inline std::vector<uint8_t> test_words_bytes(const std::vector<uint32_t>& w) {
  std::vector<uint8_t> out(w.size() * 4);
  for (size_t i = 0; i < w.size(); ++i) {
    for (int b = 0; b < 4; ++b) out[4 * i + b] = static_cast<uint8_t>(w[i] >> (8 * b));
  }
  return out;
}

/// ORs `value` (`bits` wide) into value slot `k` of a word stream (`stride` words apart): at bit
/// k*bits (dense; may cross into the next word) or, `padded`, at slot k % (32/bits) of word
/// k / (32/bits).
inline void test_put(std::vector<uint32_t>& w, size_t base, size_t stride, int64_t k, int bits,
                     uint32_t value, bool padded) {
  uint64_t bit = padded ? static_cast<uint64_t>(k / (32 / bits)) * 32 +
                              static_cast<uint64_t>(k % (32 / bits)) * bits
                        : static_cast<uint64_t>(k) * bits;
  const uint64_t v = static_cast<uint64_t>(value) << (bit % 32);
  w[base + (bit / 32) * stride] |= static_cast<uint32_t>(v);
  if ((bit % 32) + bits > 32) w[base + (bit / 32 + 1) * stride] |= static_cast<uint32_t>(v >> 32);
}

inline int64_t test_ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

/// Rounds `w` [out, in] to the scheme (min/max per group, fp16 or bf16 scales) and packs it
/// under `module`. `seed` picks the act-order permutation.
inline TestPacked test_pack(const std::string& module, const std::vector<float>& w, int64_t out,
                            int64_t in, const TestPackScheme& s, uint32_t seed = 1) {
  using tensorfile::DType;
  TestPacked p;
  p.out = out;
  p.in = in;
  const int64_t gsize = s.group > 0 ? s.group : in;
  p.groups = test_ceil_div(in, gsize);
  const bool ct = test_pack_is_ct(s.format);
  // Column -> group: contiguous, or by a seeded permutation (act order).
  std::vector<int64_t> perm(static_cast<size_t>(in));
  for (int64_t i = 0; i < in; ++i) perm[static_cast<size_t>(i)] = i;
  if (s.act_order) {
    uint32_t x = seed * 2654435761u + 1;
    for (int64_t i = in - 1; i > 0; --i) {
      x = x * 1664525u + 1013904223u;
      std::swap(perm[static_cast<size_t>(i)], perm[(x >> 8) % static_cast<uint32_t>(i + 1)]);
    }
  }
  p.g_idx.assign(static_cast<size_t>(in), 0);
  for (int64_t k = 0; k < in; ++k)
    p.g_idx[static_cast<size_t>(perm[static_cast<size_t>(k)])] = static_cast<int32_t>(k / gsize);
  // Code range: compressed-tensors signed [-2^(b-1), 2^(b-1)-1], GPTQ/AWQ unsigned [0, 2^b-1].
  const int32_t qmin = ct ? -(1 << (s.bits - 1)) : 0;
  const int32_t qmax = ct ? (1 << (s.bits - 1)) - 1 : (1 << s.bits) - 1;
  const bool bf16_scales = ct;
  p.scales.assign(static_cast<size_t>(out * p.groups), 0.f);
  p.zeros.assign(static_cast<size_t>(out * p.groups), 0);
  p.codes.assign(static_cast<size_t>(out * in), 0);
  for (int64_t o = 0; o < out; ++o) {
    for (int64_t g = 0; g < p.groups; ++g) {
      float lo = 0.f, hi = 0.f;
      for (int64_t i = 0; i < in; ++i) {
        if (p.g_idx[static_cast<size_t>(i)] != g) continue;
        lo = std::min(lo, w[static_cast<size_t>(o * in + i)]);
        hi = std::max(hi, w[static_cast<size_t>(o * in + i)]);
      }
      float scale;
      int32_t zero;
      if (s.symmetric) {
        scale = std::max(std::fabs(lo), std::fabs(hi)) /
                static_cast<float>(qmax - (ct ? 0 : (1 << (s.bits - 1))));
        zero = ct ? 0 : (1 << (s.bits - 1));
      } else {
        scale = (hi - lo) / static_cast<float>(qmax - qmin);
        zero = static_cast<int32_t>(std::lround(qmin - lo / std::max(scale, 1e-12f)));
        // GPTQ v1 cannot store a zero point of 0 (it stores z - 1).
        zero = std::clamp(zero, s.format == TestPackFormat::kGptqV1 ? 1 : qmin, qmax);
      }
      if (scale <= 0.f) scale = 1e-3f;
      scale = bf16_scales ? tensorfile::bf16_to_f32(tensorfile::f32_to_bf16(scale))
                          : tensorfile::fp16_to_f32(tensorfile::f32_to_fp16(scale));
      const size_t k = static_cast<size_t>(o * p.groups + g);
      p.scales[k] = scale;
      p.zeros[k] = zero;
      for (int64_t i = 0; i < in; ++i) {
        if (p.g_idx[static_cast<size_t>(i)] != g) continue;
        const float q = std::nearbyint(w[static_cast<size_t>(o * in + i)] / scale) + zero;
        p.codes[static_cast<size_t>(o * in + i)] =
            static_cast<int32_t>(std::clamp(q, static_cast<float>(qmin), static_cast<float>(qmax)));
      }
    }
  }
  const int b = s.bits;
  auto scales_tensor = [&](const std::string& name, bool transposed) {
    std::vector<float> v(p.scales.size());
    for (int64_t o = 0; o < out; ++o) {
      for (int64_t g = 0; g < p.groups; ++g) {
        v[static_cast<size_t>(transposed ? g * out + o : o * p.groups + g)] =
            p.scales[static_cast<size_t>(o * p.groups + g)];
      }
    }
    return tensorfile::make_tensor(
        name, bf16_scales ? DType::kBF16 : DType::kF16,
        transposed ? std::vector<int64_t>{p.groups, out} : std::vector<int64_t>{out, p.groups}, v);
  };
  auto int_tensor = [](const std::string& name, DType dt, std::vector<int64_t> shape,
                       const std::vector<int64_t>& v) {
    tensorfile::TensorToWrite t{name, dt, std::move(shape), {}};
    const size_t width = tensorfile::dtype_size(dt);
    t.data.resize(v.size() * width);
    for (size_t i = 0; i < v.size(); ++i) {
      for (size_t byte = 0; byte < width; ++byte)
        t.data[i * width + byte] = static_cast<uint8_t>(static_cast<uint64_t>(v[i]) >> (8 * byte));
    }
    return t;
  };
  const std::vector<int64_t> g_idx64(p.g_idx.begin(), p.g_idx.end());
  switch (s.format) {
    case TestPackFormat::kCtPackedDense:
    case TestPackFormat::kCtPackedPadded: {
      const bool padded = s.format == TestPackFormat::kCtPackedPadded;
      const int64_t words = padded ? test_ceil_div(in, 32 / b) : test_ceil_div(in * b, 32);
      std::vector<uint32_t> wp(static_cast<size_t>(out * words), 0);
      for (int64_t o = 0; o < out; ++o) {
        for (int64_t i = 0; i < in; ++i) {
          const uint32_t u =
              static_cast<uint32_t>(p.codes[static_cast<size_t>(o * in + i)] + (1 << (b - 1)));
          test_put(wp, static_cast<size_t>(o * words), 1, i, b, u, padded);
        }
      }
      p.tensors.push_back(
          {module + ".weight_packed", DType::kI32, {out, words}, test_words_bytes(wp)});
      p.tensors.push_back(int_tensor(module + ".weight_shape", DType::kI64, {2}, {out, in}));
      p.tensors.push_back(scales_tensor(module + ".weight_scale", false));
      if (!s.symmetric) {
        // Zero points + 2^(b-1), packed along dim 0: [words(out), groups].
        const int64_t zw = padded ? test_ceil_div(out, 32 / b) : test_ceil_div(out * b, 32);
        std::vector<uint32_t> zp(static_cast<size_t>(zw * p.groups), 0);
        for (int64_t g = 0; g < p.groups; ++g) {
          for (int64_t o = 0; o < out; ++o) {
            const uint32_t u = static_cast<uint32_t>(
                p.zeros[static_cast<size_t>(o * p.groups + g)] + (1 << (b - 1)));
            test_put(zp, static_cast<size_t>(g), static_cast<size_t>(p.groups), o, b, u, padded);
          }
        }
        p.tensors.push_back(
            {module + ".weight_zero_point", DType::kI32, {zw, p.groups}, test_words_bytes(zp)});
      }
      if (s.act_order)
        p.tensors.push_back(int_tensor(module + ".weight_g_idx", DType::kI32, {in}, g_idx64));
      break;
    }
    case TestPackFormat::kCtInt:
    case TestPackFormat::kCtNaive: {
      const std::vector<int64_t> q(p.codes.begin(), p.codes.end());
      p.tensors.push_back(int_tensor(module + ".weight", DType::kI8, {out, in}, q));
      p.tensors.push_back(scales_tensor(module + ".weight_scale", false));
      if (!s.symmetric) {
        const std::vector<int64_t> z(p.zeros.begin(), p.zeros.end());
        p.tensors.push_back(
            int_tensor(module + ".weight_zero_point", DType::kI8, {out, p.groups}, z));
      }
      if (s.act_order)
        p.tensors.push_back(int_tensor(module + ".weight_g_idx", DType::kI32, {in}, g_idx64));
      break;
    }
    case TestPackFormat::kGptqV1:
    case TestPackFormat::kGptqV2: {
      // qweight [in*b/32, out]: column o is a bit stream over the inputs.
      const int64_t rows = in * b / 32;
      std::vector<uint32_t> qw(static_cast<size_t>(rows * out), 0);
      for (int64_t o = 0; o < out; ++o) {
        for (int64_t i = 0; i < in; ++i) {
          test_put(qw, static_cast<size_t>(o), static_cast<size_t>(out), i, b,
                   static_cast<uint32_t>(p.codes[static_cast<size_t>(o * in + i)]), false);
        }
      }
      // qzeros [groups, out*b/32]: row g is a bit stream over the outputs.
      const int64_t zcols = test_ceil_div(out * b, 32);
      std::vector<uint32_t> qz(static_cast<size_t>(p.groups * zcols), 0);
      const int32_t minus = s.format == TestPackFormat::kGptqV1 ? 1 : 0;
      for (int64_t g = 0; g < p.groups; ++g) {
        for (int64_t o = 0; o < out; ++o) {
          test_put(qz, static_cast<size_t>(g * zcols), 1, o, b,
                   static_cast<uint32_t>(p.zeros[static_cast<size_t>(o * p.groups + g)] - minus),
                   false);
        }
      }
      p.tensors.push_back({module + ".qweight", DType::kI32, {rows, out}, test_words_bytes(qw)});
      p.tensors.push_back(
          {module + ".qzeros", DType::kI32, {p.groups, zcols}, test_words_bytes(qz)});
      p.tensors.push_back(scales_tensor(module + ".scales", true));
      p.tensors.push_back(int_tensor(module + ".g_idx", DType::kI32, {in}, g_idx64));
      break;
    }
    case TestPackFormat::kAwqGemm: {
      // AWQ_ORDER: nibble k of word c holds output 8c + order[k].
      const int order[8] = {0, 2, 4, 6, 1, 3, 5, 7};
      std::vector<uint32_t> qw(static_cast<size_t>(in * out / 8), 0);
      std::vector<uint32_t> qz(static_cast<size_t>(p.groups * out / 8), 0);
      for (int64_t c = 0; c < out / 8; ++c) {
        for (int k = 0; k < 8; ++k) {
          const int64_t o = 8 * c + order[k];
          for (int64_t i = 0; i < in; ++i) {
            qw[static_cast<size_t>(i * (out / 8) + c)] |=
                static_cast<uint32_t>(p.codes[static_cast<size_t>(o * in + i)]) << (4 * k);
          }
          for (int64_t g = 0; g < p.groups; ++g) {
            qz[static_cast<size_t>(g * (out / 8) + c)] |=
                static_cast<uint32_t>(p.zeros[static_cast<size_t>(o * p.groups + g)]) << (4 * k);
          }
        }
      }
      p.tensors.push_back({module + ".qweight", DType::kI32, {in, out / 8}, test_words_bytes(qw)});
      p.tensors.push_back(
          {module + ".qzeros", DType::kI32, {p.groups, out / 8}, test_words_bytes(qz)});
      p.tensors.push_back(scales_tensor(module + ".scales", true));
      break;
    }
  }
  return p;
}

/// The quantization_config a checkpoint of `s` carries.
inline nlohmann::json test_quantization_config(const TestPackScheme& s) {
  const int64_t g = s.group > 0 ? s.group : -1;
  switch (s.format) {
    case TestPackFormat::kCtPackedDense:
    case TestPackFormat::kCtPackedPadded:
    case TestPackFormat::kCtInt:
    case TestPackFormat::kCtNaive: {
      nlohmann::json weights = {
          {"num_bits", s.bits},
          {"type", "int"},
          {"symmetric", s.symmetric},
          {"strategy", s.group > 0 ? "group" : "channel"},
          {"dynamic", false},
          {"actorder", s.act_order ? nlohmann::json("group") : nlohmann::json()}};
      if (s.group > 0) weights["group_size"] = s.group;
      return {{"quant_method", "compressed-tensors"},
              {"format", s.format == TestPackFormat::kCtInt     ? "int-quantized"
                         : s.format == TestPackFormat::kCtNaive ? "naive-quantized"
                                                                : "pack-quantized"},
              {"quantization_status", "compressed"},
              {"config_groups",
               {{"group_0",
                 {{"targets", {"Linear"}}, {"weights", weights}, {"input_activations", nullptr}}}}},
              {"ignore", {"lm_head"}},
              {"kv_cache_scheme", nullptr}};
    }
    case TestPackFormat::kGptqV1:
    case TestPackFormat::kGptqV2:
      return {{"quant_method", "gptq"},
              {"bits", s.bits},
              {"group_size", g},
              {"desc_act", s.act_order},
              {"sym", s.symmetric},
              {"checkpoint_format", s.format == TestPackFormat::kGptqV1 ? "gptq" : "gptq_v2"}};
    case TestPackFormat::kAwqGemm:
      return {{"quant_method", "awq"},
              {"bits", 4},
              {"group_size", g},
              {"zero_point", !s.symmetric},
              {"version", "gemm"}};
  }
  return {};
}

/// Rewrites the random HF model in `dir` (config.json + model.safetensors) as a pre-quantized
/// checkpoint of `s`: every 2-D `model.layers.*.weight` becomes its packed tensors, the rest stays.
/// Returns the truth per module.
inline std::map<std::string, TestPacked> test_pack_model(const std::filesystem::path& dir,
                                                         const TestPackScheme& s,
                                                         const nlohmann::json& qconfig,
                                                         const TestPackPerModule& per_module = {}) {
  std::map<std::string, TestPacked> truth;
  auto st = frontend::SafetensorsFile::open(dir / "model.safetensors");
  EXPECT_TRUE(st.ok()) << st.status().message();
  if (!st.ok()) return truth;
  std::vector<tensorfile::TensorToWrite> out;
  uint32_t seed = 1;
  for (const frontend::SafetensorsTensor& t : st->tensors()) {
    std::vector<float> v;
    EXPECT_TRUE(frontend::read_f32(t, &v).ok());
    const bool linear = t.name.rfind("model.layers.", 0) == 0 && t.shape.size() == 2 &&
                        t.name.size() > 7 && t.name.substr(t.name.size() - 7) == ".weight";
    const std::string module = linear ? t.name.substr(0, t.name.size() - 7) : "";
    TestPackScheme ms = s;
    if (linear && per_module) per_module(module, ms);
    if (!linear || ms.bits >= 16) {
      out.push_back(tensorfile::make_tensor(t.name, tensorfile::DType::kF32, t.shape, v));
      continue;
    }
    TestPacked p = test_pack(module, v, t.shape[0], t.shape[1], ms, seed++);
    for (auto& x : p.tensors) out.push_back(std::move(x));
    p.tensors.clear();
    truth.emplace(module, std::move(p));
  }
  EXPECT_TRUE(tensorfile::write_safetensors(dir / "model.safetensors", out).ok());
  nlohmann::json cfg = nlohmann::json::parse(read_file(dir / "config.json"));
  cfg["quantization_config"] = qconfig;
  write_file(dir / "config.json", cfg.dump(2));
  return truth;
}

}  // namespace qbc::testing
