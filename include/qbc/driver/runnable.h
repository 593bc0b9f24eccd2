// A model opened to run (`qbc run`, `qbc eval`): a graph (HF folder, .gguf, .mblt) on the
// runner --backend picks, or a compiled .mxq on the runtime; and text generation on it.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "qbc/config/config.h"
#include "qbc/driver/generate.h"
#include "qbc/driver/model_loader.h"
#include "qbc/runner/generate.h"
#include "qbc/runner/runner.h"
#include "qbc/runtime/generator.h"
#include "qbc/support/status.h"
#include "qbc/tokenizer/tokenizer.h"

namespace qbc::driver {

/// How to open a model to run.
struct RunnableOptions {
  /// auto (quantized .mblt: the fake-quant evaluator; float models: LibTorch), npu (the ARIES
  /// backend's programs on the executor), fakequant, float. A compiled .mxq takes auto or npu.
  std::string backend = "auto";
  int threads = 0;  ///< compute threads (0 = all)
  // A compiled .mxq only (runtime::LoadOptions); refused for a graph unless left as is.
  std::string core_mode = "auto";
  std::vector<std::string> cores;
  bool verify_digests = true;
};

/// A model opened to run.
struct Runnable {
  std::optional<LoadedModel> graph;  ///< a graph model
  /// A compiled .mxq: the runtime's host side (tokenizer from the assets, its session).
  std::unique_ptr<runtime::Generator> generator;
  std::optional<tokenizer::Tokenizer> tok;
  std::unique_ptr<runner::Runner> owned;  ///< the runner of a graph
  runner::Runner* session = nullptr;
  int64_t capacity = 0;  ///< the KV-cache capacity
};

/// True when `path` is a compiled MXQ (or manifest) rather than a graph model.
bool is_compiled_model(const std::string& path);

/// Opens `path` with `cfg` (the configuration of a graph; a compiled file carries its own).
/// kInvalidArgument naming the flag for a --backend the model cannot run on, and for MXQ
/// options given with a graph.
StatusOr<Runnable> open_runnable(const std::string& path, const config::ResolvedConfig& cfg,
                                 const RunnableOptions& options);

/// A float reference model (HF folder, .gguf or .mblt) with its runner, for accuracy reports.
struct ReferenceModel {
  LoadedModel model;
  std::unique_ptr<runner::Runner> runner;
};
StatusOr<ReferenceModel> open_reference(const std::string& path, const config::ResolvedConfig& cfg,
                                        int threads);

/// Each image mark `mark` of `ids` replaced by `span` (runtime::VisionEncoder::image_span: its
/// prefix, the image tokens, its suffix, or Idefics3's tile markers around them); with no mark,
/// `images` of them placed after the BOS (or first), as `qbc run --image` does. kInvalidArgument
/// when the prompt has another number.
StatusOr<std::vector<int32_t>> expand_image_tokens(const std::vector<int32_t>& ids, int32_t mark,
                                                   const std::vector<int32_t>& span, size_t images,
                                                   int32_t bos);

/// One text generation.
struct TextRequest {
  std::string prompt;
  int n = 32;  ///< tokens to generate
  SamplingOptions sampling;
  bool ignore_eos = false;
  /// Images (PNG or JPEG paths) for a VLM's MXQ: each is one image token of the prompt (or,
  /// when the prompt has none, one placed after the BOS), expanded to the vision part's image
  /// span and its image tokens replaced by the feature rows.
  std::vector<std::string> images;
  /// The prompt is a chat template's output (render_chat_prompt): its special tokens are
  /// parsed, and the BOS is added only when the tokenizer adds one and the text does not
  /// already begin with it (HF's processors; a tokenizer's own apply_chat_template never adds
  /// one, and its templates write it when the model wants it).
  bool templated = false;
};

/// What a text generation produced.
struct TextResult {
  std::vector<int32_t> prompt;  ///< the prompt's ids (with BOS when the tokenizer adds one)
  GenerateResult generated;
};

/// Generates on `m` (an .mxq through runtime::Generator, reusing its sequence cache; a graph
/// on its runner; the same sampler): `on_text` receives the new text as it is decoded, in
/// the prompt's context (a SentencePiece word keeps its leading space) and whole UTF-8
/// characters at a time, last the text held back at the end (it may be empty).
StatusOr<TextResult> generate_text(Runnable& m, const TextRequest& request,
                                   const std::function<void(const std::string&)>& on_text);

}  // namespace qbc::driver
