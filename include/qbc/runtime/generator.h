// The runtime's host side: everything between text and the compiled programs, read from the
// MXQ file alone. A Generator holds a loaded model (runtime::load_model), the tokenizer of the
// file's assets, the embedding lookup of its host table, the chat template when the assets
// carry one, and generation with the sampler of qbc_runner: greedy, or seeded temperature /
// top-k / top-p, the same algorithm `qbc run` uses on every model kind, so the same seed gives
// the same text as `qbc run` on the MBLT the MXQ was compiled from. `qbc run model.mxq` is this
// class.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "qbc/mxq/model_file.h"
#include "qbc/runner/generate.h"
#include "qbc/runtime/model.h"
#include "qbc/runtime/npu_session.h"
#include "qbc/runtime/sequence_cache.h"
#include "qbc/support/status.h"
#include "qbc/tokenizer/chat_template.h"
#include "qbc/tokenizer/tokenizer.h"

namespace qbc::runtime {

/// The tokenizer stored in a loaded MXQ's host assets: `tokenizer.json` (with
/// `tokenizer_config.json` and `config.json` when present), else the vocabulary asset
/// `qbc_vocab.json` (GGUF-sourced models, docs/mxq.md). kNotFound when the file carries none;
/// errors name the file and the asset.
StatusOr<tokenizer::Tokenizer> load_tokenizer(const mxq::LoadedModel& file);

/// The chat template of a loaded MXQ: the asset `chat_template.jinja`, else the
/// `chat_template` string of `tokenizer_config.json`; nullopt when neither is there.
/// Errors (a template outside the supported subset, docs/runtime.md) name the asset.
StatusOr<std::optional<tokenizer::ChatTemplate>> load_chat_template(const mxq::LoadedModel& file);

/// The host side of a loaded MXQ against its layout and metadata: every id the tokenizer can
/// produce has a row in the host embedding and a logit (vocab_size() <= both), and the
/// tokenizer's BOS, EOS and add-BOS setting are the metadata's. kDataLoss naming the file and
/// the first value that differs. Generator::create and `qbc verify` both run it.
Status check_host_side(const mxq::LoadedModel& file, const tokenizer::Tokenizer& tok);

class Generator {
 public:
  /// Loads `path` (an .mxq or a manifest; every rule of docs/mxq.md and the program verifier)
  /// for `options.core_mode`, its tokenizer and chat template, and a session on slot 0. A chat
  /// template that does not parse is not an error here (see apply_chat_template()).
  static StatusOr<std::unique_ptr<Generator>> create(const std::string& path,
                                                     const LoadOptions& options = {});
  /// The same over an already loaded model.
  static StatusOr<std::unique_ptr<Generator>> create(Model model);

  const tokenizer::Tokenizer& tokenizer() const { return tokenizer_; }
  /// `text` as token ids with the model's own BOS setting (add_bos_default()), as `qbc run`.
  std::vector<int32_t> encode(std::string_view text) const;
  /// Token ids to text (control tokens skipped), as a text of their own (a SentencePiece
  /// vocabulary drops the first word's leading space).
  std::string decode(const std::vector<int32_t>& ids) const;
  /// The text generated `ids` add after `prompt` (its ids): the leading space of their first
  /// word kept, so prompt text + this is the whole text (tokenizer::decode_continuation).
  std::string decode_continuation(const std::vector<int32_t>& prompt,
                                  const std::vector<int32_t>& ids) const;
  /// The fp32 embedding rows of `tokens` [tokens, hidden] (the host table of the file).
  StatusOr<std::vector<float>> embed(const std::vector<int32_t>& tokens) const;

  /// Whether the assets carry a chat template that parses.
  bool has_chat_template() const { return chat_template_.has_value(); }
  /// Renders `messages` with the chat template (bos_token / eos_token from the tokenizer).
  /// kNotFound when the file has no template; the parse error naming the asset, line and
  /// column when it has one outside the supported subset (docs/runtime.md). Such a template
  /// does not stop create(): generation does not need it.
  StatusOr<std::string> apply_chat_template(const std::vector<tokenizer::ChatMessage>& messages,
                                            bool add_generation_prompt = true) const;

  /// Starts a new sequence: prefills `prompt` and decodes up to `max_new` tokens (stopping
  /// after the tokenizer's EOS unless `ignore_eos`), calling `on_token` for each new token.
  /// kResourceExhausted (exit 4) before any work when the cache cannot hold them.
  StatusOr<runner::GenerateResult> generate(const std::vector<int32_t>& prompt, int max_new,
                                            const runner::SamplingOptions& sampling = {},
                                            const std::function<void(int32_t)>& on_token = nullptr,
                                            bool ignore_eos = false);
  /// generate() that first reuses what the cache holds: the longest run of cached tokens
  /// (after load_cache() or an earlier call) that starts `prompt` is not run again (at least
  /// the prompt's last token is, for its logits), the rest of the cache is dropped. The same
  /// tokens as generate() on a fresh sequence for the same prompt and sampling.
  StatusOr<runner::GenerateResult> generate_reusing_cache(
      const std::vector<int32_t>& prompt, int max_new, const runner::SamplingOptions& sampling = {},
      const std::function<void(int32_t)>& on_token = nullptr, bool ignore_eos = false);
  /// generate_reusing_cache() of a prompt with images (a VLM's MXQ, runtime::VisionEncoder):
  /// `rows` are the images' feature rows in order, [n, NpuSession::image_row_width()] (hidden,
  /// with the DeepStack rows after each on Qwen3-VL), one for each `image_token` of
  /// `prompt`; they replace those tokens' embedding rows. kInvalidArgument before any work when
  /// the counts differ. The cache is reused only up to the first image span whose rows differ
  /// from those the cache saw (each run of image tokens is recorded with its rows' digest, and
  /// save_cache() writes them), so a cached image is never taken for another one.
  StatusOr<runner::GenerateResult> generate_with_rows(
      const std::vector<int32_t>& prompt, int32_t image_token, std::vector<float> rows, int max_new,
      const runner::SamplingOptions& sampling = {},
      const std::function<void(int32_t)>& on_token = nullptr, bool ignore_eos = false);
  /// The logits [prompt.size(), vocab] of a fresh sequence of `prompt` with `rows` spliced at
  /// its `image_token`s as generate_with_rows() splices them (an image-text pair scored as the
  /// runtime runs it: `qbc eval --images`). The cache is empty afterwards. kInvalidArgument
  /// before any work when the counts differ.
  Status score_with_rows(const std::vector<int32_t>& prompt, int32_t image_token,
                         std::vector<float> rows, std::vector<float>* logits);
  /// Tokens of the last generate_reusing_cache() prompt taken from the cache.
  int64_t reused_tokens() const { return reused_; }
  /// The ids the KV cache holds, position 0 first (the prompt and every new token fed back).
  const std::vector<int32_t>& cached_tokens() const { return cached_; }
  /// The sequence as a cache file (runtime/sequence_cache.h): cached_tokens() and the KV blob.
  StatusOr<std::string> save_cache() const;
  /// Loads a file of save_cache() (`source` names it in errors): kInvalidArgument naming what
  /// differs (a file that is not one, cut short, corrupt, of another model's KV layout, or
  /// whose tokens are not the cache's positions or the tokenizer's ids); nothing changes then.
  Status load_cache(std::string_view bytes, std::string_view source);

  /// encode(prompt), generate, and the new tokens decoded: the continuation only.
  StatusOr<std::string> generate_text(std::string_view prompt, int max_new,
                                      const runner::SamplingOptions& sampling = {});

  /// The session generation runs on (slot 0): a runner::Runner, for perplexity and the like.
  NpuSession& session() { return *session_; }
  const Model& model() const { return model_; }
  /// Tokens the KV cache holds (prompt + new tokens at most).
  int64_t capacity() const { return model_.file.bundle->max_cache; }

 private:
  Generator(Model model, tokenizer::Tokenizer tok) : model_(std::move(model)), tokenizer_(tok) {}
  /// How many cached ids begin `prompt`.
  size_t common_prefix(const std::vector<int32_t>& prompt) const;
  /// Rewinds the session to `keep` cached tokens (one fewer when that is the whole prompt: its
  /// last token runs for its logits; none when the cache cannot go back that far) and returns
  /// how many are kept.
  size_t rewind_to(size_t keep, size_t prompt_size);
  /// M-RoPE models: the positions of prompt[keep..] pending in the session (HF's
  /// get_rope_index over the whole prompt; each run of `image_token` (-1: none) one image on
  /// the vision part's merged grid). Nothing on other models.
  Status set_prompt_positions(const std::vector<int32_t>& prompt, size_t keep, int32_t image_token);
  /// Generation with the first `cached` tokens of `prompt` already in the cache.
  StatusOr<runner::GenerateResult> generate_from(const std::vector<int32_t>& prompt, size_t cached,
                                                 int max_new,
                                                 const runner::SamplingOptions& sampling,
                                                 const std::function<void(int32_t)>& on_token,
                                                 bool ignore_eos);
  Model model_;
  tokenizer::Tokenizer tokenizer_;
  std::optional<tokenizer::ChatTemplate> chat_template_;
  Status chat_template_error_;  // why the file's template did not parse, when it did not
  std::unique_ptr<NpuSession> session_;
  std::vector<int32_t> cached_;  // the ids at the session's positions
  int64_t reused_ = 0;
  std::vector<ImageSpan> images_;  // the cached positions that hold image rows, with digests
};

}  // namespace qbc::runtime
