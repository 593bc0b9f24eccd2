// The runtime's host side (see qbc/runtime/generator.h).
#include "qbc/runtime/generator.h"

#include <algorithm>
#include <cstddef>
#include <nlohmann/json.hpp>

#include "qbc/runner/mrope.h"
#include "qbc/runtime/sequence_cache.h"
#include "qbc/support/json_parse.h"
#include "qbc/tokenizer/template_json.h"
#include "qbc/tokenizer/text_stream.h"

namespace qbc::runtime {
namespace {

std::string file_name(const mxq::LoadedModel& file) {
  return file.files.empty() ? std::string("the model") : file.files.front();
}

std::string_view asset_text(const mxq::LoadedModel& file, const char* name) {
  const mxq::HostAsset* a = file.asset(name);
  return a == nullptr ? std::string_view() : std::string_view(a->bytes);
}

}  // namespace

StatusOr<tokenizer::Tokenizer> load_tokenizer(const mxq::LoadedModel& file) {
  const std::string name = file_name(file);
  if (file.asset("tokenizer.json") != nullptr) {
    return tokenizer::Tokenizer::from_hf_json_text(
        asset_text(file, "tokenizer.json"), asset_text(file, "tokenizer_config.json"),
        asset_text(file, "config.json"), name + ": asset tokenizer.json");
  }
  if (file.asset("qbc_vocab.json") != nullptr) {
    return tokenizer::Tokenizer::from_vocab_json(asset_text(file, "qbc_vocab.json"),
                                                 name + ": asset qbc_vocab.json");
  }
  return not_found(name,
                   ": carries no tokenizer (no tokenizer.json or qbc_vocab.json asset; "
                   "recompile it with a qbc that writes them)");
}

Status check_host_side(const mxq::LoadedModel& file, const tokenizer::Tokenizer& tok) {
  const std::string name = file_name(file);
  const isa::Bundle& b = *file.bundle;
  const int64_t ids = std::min(b.embed_rows, b.vocab);
  if (tok.vocab_size() > ids)
    return data_loss(name, ": the tokenizer has ", tok.vocab_size(), " ids, the embedding ",
                     b.embed_rows, " rows and the logits ", b.vocab, " entries");
  const mxq::pb::Meta& m = file.meta;
  if (tok.bos_id() != m.bos_id() || tok.eos_id() != m.eos_id() ||
      tok.add_bos_default() != m.add_bos())
    return data_loss(name, ": the tokenizer's bos_id ", tok.bos_id(), ", eos_id ", tok.eos_id(),
                     ", add_bos ", tok.add_bos_default(), " differ from the metadata's ",
                     m.bos_id(), ", ", m.eos_id(), ", ", m.add_bos());
  return ok_status();
}

StatusOr<std::optional<tokenizer::ChatTemplate>> load_chat_template(const mxq::LoadedModel& file) {
  const std::string name = file_name(file);
  if (file.asset("chat_template.jinja") != nullptr) {
    QBC_ASSIGN_OR_RETURN(tokenizer::ChatTemplate t,
                         tokenizer::ChatTemplate::parse(asset_text(file, "chat_template.jinja"),
                                                        name + ": asset chat_template.jinja"));
    return std::optional<tokenizer::ChatTemplate>(std::move(t));
  }
  const std::string_view config = asset_text(file, "tokenizer_config.json");
  if (config.empty()) return std::optional<tokenizer::ChatTemplate>();
  const std::string source = name + ": asset tokenizer_config.json";
  QBC_ASSIGN_OR_RETURN(const nlohmann::json j, parse_json_text(config, source));
  QBC_ASSIGN_OR_RETURN(const std::optional<std::string> text,
                       tokenizer::chat_template_text(j, source));
  if (!text) return std::optional<tokenizer::ChatTemplate>();
  QBC_ASSIGN_OR_RETURN(tokenizer::ChatTemplate c,
                       tokenizer::ChatTemplate::parse(*text, source + ": chat_template"));
  return std::optional<tokenizer::ChatTemplate>(std::move(c));
}

StatusOr<std::unique_ptr<Generator>> Generator::create(const std::string& path,
                                                       const LoadOptions& options) {
  QBC_ASSIGN_OR_RETURN(Model m, load_model(path, options));
  return create(std::move(m));
}

StatusOr<std::unique_ptr<Generator>> Generator::create(Model model) {
  QBC_ASSIGN_OR_RETURN(tokenizer::Tokenizer tok, load_tokenizer(model.file));
  QBC_RETURN_IF_ERROR(check_host_side(model.file, tok));
  StatusOr<std::optional<tokenizer::ChatTemplate>> chat = load_chat_template(model.file);
  QBC_ASSIGN_OR_RETURN(std::unique_ptr<NpuSession> s, NpuSession::create(model.device, 0));
  std::unique_ptr<Generator> g(new Generator(std::move(model), std::move(tok)));
  if (chat.ok()) {
    g->chat_template_ = std::move(chat).value();
  } else {
    g->chat_template_error_ = chat.status();
  }
  g->session_ = std::move(s);
  return g;
}

std::vector<int32_t> Generator::encode(std::string_view text) const {
  return tokenizer_.encode(text, tokenizer_.add_bos_default());
}

std::string Generator::decode(const std::vector<int32_t>& ids) const {
  return tokenizer_.decode(ids);
}

std::string Generator::decode_continuation(const std::vector<int32_t>& prompt,
                                           const std::vector<int32_t>& ids) const {
  return tokenizer::decode_continuation(tokenizer_, prompt, ids);
}

StatusOr<std::vector<float>> Generator::embed(const std::vector<int32_t>& tokens) const {
  std::vector<float> out;
  QBC_RETURN_IF_ERROR(session_->embed(tokens, &out));
  return out;
}

StatusOr<std::string> Generator::apply_chat_template(
    const std::vector<tokenizer::ChatMessage>& messages, bool add_generation_prompt) const {
  if (!chat_template_error_.ok()) return chat_template_error_;
  if (!chat_template_)
    return not_found(file_name(model_.file),
                     ": carries no chat template (no chat_template.jinja asset and no "
                     "chat_template in tokenizer_config.json)");
  tokenizer::ChatContext ctx;
  ctx.messages = messages;
  ctx.add_generation_prompt = add_generation_prompt;
  ctx.bos_token = tokenizer_.token_text(tokenizer_.bos_id());
  ctx.eos_token = tokenizer_.token_text(tokenizer_.eos_id());
  return chat_template_->render(ctx);
}

StatusOr<runner::GenerateResult> Generator::generate(const std::vector<int32_t>& prompt,
                                                     int max_new,
                                                     const runner::SamplingOptions& sampling,
                                                     const std::function<void(int32_t)>& on_token,
                                                     bool ignore_eos) {
  session_->reset();
  cached_.clear();
  reused_ = 0;
  images_.clear();
  return generate_from(prompt, 0, max_new, sampling, on_token, ignore_eos);
}

namespace {

/// One row of `width` values for each `image_token` of a non-empty `prompt`.
Status check_image_rows(const std::vector<int32_t>& prompt, int32_t image_token, size_t values,
                        int64_t width) {
  int64_t placeholders = 0;
  for (int32_t t : prompt) placeholders += t == image_token ? 1 : 0;
  if (width <= 0 || static_cast<int64_t>(values) != placeholders * width)
    return invalid_argument("the prompt has ", placeholders, " image tokens (id ", image_token,
                            "), the images give ",
                            values / static_cast<size_t>(std::max<int64_t>(width, 1)), " rows");
  if (prompt.empty()) return invalid_argument("the prompt encodes to no tokens");
  return ok_status();
}

}  // namespace

StatusOr<runner::GenerateResult> Generator::generate_with_rows(
    const std::vector<int32_t>& prompt, int32_t image_token, std::vector<float> rows, int max_new,
    const runner::SamplingOptions& sampling, const std::function<void(int32_t)>& on_token,
    bool ignore_eos) {
  const int64_t width = session_->image_row_width();  // hidden, and DeepStack's levels
  QBC_RETURN_IF_ERROR(check_image_rows(prompt, image_token, rows.size(), width));
  std::vector<ImageSpan> spans = image_spans(prompt, image_token, rows, width);
  // The cached ids that begin the prompt, cut at the first cached image span the prompt does
  // not repeat with the same rows.
  size_t keep = common_prefix(prompt);
  for (const ImageSpan& c : images_) {
    if (c.first >= static_cast<int64_t>(keep)) break;
    const bool same =
        std::any_of(spans.begin(), spans.end(), [&](const ImageSpan& s) { return s == c; });
    if (!same) keep = static_cast<size_t>(c.first);
  }
  keep = rewind_to(keep, prompt.size());
  // The rows of the image tokens from `keep` on.
  int64_t before = 0;
  for (size_t i = 0; i < keep; ++i) before += prompt[i] == image_token ? 1 : 0;
  rows.erase(rows.begin(), rows.begin() + static_cast<std::ptrdiff_t>(before * width));
  session_->clear_splice();
  if (!rows.empty()) QBC_RETURN_IF_ERROR(session_->splice(image_token, std::move(rows)));
  QBC_RETURN_IF_ERROR(set_prompt_positions(prompt, keep, image_token));
  images_ = std::move(spans);
  StatusOr<runner::GenerateResult> r =
      generate_from(prompt, keep, max_new, sampling, on_token, ignore_eos);
  const int64_t left = session_->rows_pending();
  session_->clear_splice();
  if (r.ok() && left != 0)
    return internal_error(left, " image rows were not used by the prompt's image tokens");
  return r;
}

Status Generator::score_with_rows(const std::vector<int32_t>& prompt, int32_t image_token,
                                  std::vector<float> rows, std::vector<float>* logits) {
  QBC_RETURN_IF_ERROR(
      check_image_rows(prompt, image_token, rows.size(), session_->image_row_width()));
  session_->reset();
  cached_.clear();
  images_.clear();
  reused_ = 0;
  if (!rows.empty()) QBC_RETURN_IF_ERROR(session_->splice(image_token, std::move(rows)));
  Status s = set_prompt_positions(prompt, 0, image_token);
  if (s.ok()) s = session_->forward(prompt, logits);
  const int64_t left = session_->rows_pending();
  session_->reset();  // clears the splice and the positions too
  if (s.ok() && left != 0)
    return internal_error(left, " image rows were not used by the prompt's image tokens");
  return s;
}

StatusOr<runner::GenerateResult> Generator::generate_reusing_cache(
    const std::vector<int32_t>& prompt, int max_new, const runner::SamplingOptions& sampling,
    const std::function<void(int32_t)>& on_token, bool ignore_eos) {
  size_t keep = common_prefix(prompt);
  // A text prompt has no image rows: the cache is reused up to its first image.
  if (!images_.empty()) keep = std::min(keep, static_cast<size_t>(images_.front().first));
  images_.clear();
  keep = rewind_to(keep, prompt.size());
  session_->clear_splice();
  QBC_RETURN_IF_ERROR(set_prompt_positions(prompt, keep, -1));
  StatusOr<runner::GenerateResult> r =
      generate_from(prompt, keep, max_new, sampling, on_token, ignore_eos);
  session_->clear_splice();
  return r;
}

Status Generator::set_prompt_positions(const std::vector<int32_t>& prompt, size_t keep,
                                       int32_t image_token) {
  if (!session_->mrope()) return ok_status();
  // Each image is a grid of merged patches (the vision part's), positions from 0 over the
  // whole prompt as HF's get_rope_index; the cached prefix already ran with the same ones.
  std::vector<runner::LlmGrid> grids;
  if (image_token >= 0) {
    const int64_t side = mxq::vision_grid_side(model_.file.meta.vision());
    int64_t placeholders = 0;
    for (int32_t t : prompt) placeholders += t == image_token ? 1 : 0;
    if (side < 1 || placeholders % (side * side) != 0)
      return invalid_argument("the prompt's ", placeholders, " image tokens are not whole ", side,
                              " x ", side, " image grids of the M-RoPE language model");
    grids.assign(static_cast<size_t>(placeholders / (side * side)), runner::LlmGrid{1, side, side});
  }
  QBC_ASSIGN_OR_RETURN(const runner::MRopePositions p,
                       runner::mrope_positions(prompt, image_token, grids));
  const auto n = static_cast<int64_t>(prompt.size());
  const auto k = static_cast<int64_t>(keep);
  std::vector<int64_t> rest;
  for (int64_t st = 0; st < 3; ++st)
    rest.insert(rest.end(), p.positions.begin() + st * n + k, p.positions.begin() + (st + 1) * n);
  return session_->set_positions(std::move(rest));
}

size_t Generator::common_prefix(const std::vector<int32_t>& prompt) const {
  size_t keep = 0;
  while (keep < cached_.size() && keep < prompt.size() && cached_[keep] == prompt[keep]) ++keep;
  return keep;
}

size_t Generator::rewind_to(size_t keep, size_t prompt_size) {
  if (keep > 0 && keep == prompt_size) --keep;  // the last prompt token runs for its logits
  // A sliding-window ring that has wrapped cannot go back far: then nothing is reused.
  if (!session_->rewind(static_cast<int64_t>(keep)).ok()) {
    session_->reset();
    keep = 0;
  }
  cached_.resize(keep);
  reused_ = static_cast<int64_t>(keep);
  return keep;
}

StatusOr<runner::GenerateResult> Generator::generate_from(
    const std::vector<int32_t>& prompt, size_t cached, int max_new,
    const runner::SamplingOptions& sampling, const std::function<void(int32_t)>& on_token,
    bool ignore_eos) {
  if (prompt.empty()) return invalid_argument("the prompt encodes to no tokens");
  const std::vector<int32_t> rest(prompt.begin() + static_cast<std::ptrdiff_t>(cached),
                                  prompt.end());
  StatusOr<runner::GenerateResult> r = runner::generate(
      *session_, rest, max_new, sampling, tokenizer_.eos_id(), ignore_eos, capacity(), on_token);
  // What the cache holds now: the prompt and the new tokens fed back (all but the last).
  cached_.resize(cached);
  cached_.insert(cached_.end(), rest.begin(), rest.end());
  if (r.ok()) cached_.insert(cached_.end(), r->tokens.begin(), r->tokens.end());
  cached_.resize(std::min(cached_.size(), static_cast<size_t>(session_->position())));
  return r;
}

StatusOr<std::string> Generator::save_cache() const {
  SequenceCache c;
  const auto held = static_cast<int64_t>(cached_.size());
  for (const ImageSpan& s : images_) {
    if (s.first >= held) break;
    // A span the cache holds only part of keeps its positions with a digest no rows have
    // (all zero), so that no prompt reuses them.
    if (s.first + s.count <= held)
      c.images.push_back(s);
    else
      c.images.push_back(ImageSpan{s.first, held - s.first, std::string(16, '\0')});
  }
  c.tokens = cached_;
  QBC_ASSIGN_OR_RETURN(c.kv, session_->dump_kv());
  return encode_sequence_cache(c);
}

Status Generator::load_cache(std::string_view bytes, std::string_view source) {
  QBC_ASSIGN_OR_RETURN(SequenceCache c, decode_sequence_cache(bytes, source));
  for (size_t i = 0; i < c.tokens.size(); ++i) {
    if (c.tokens[i] >= tokenizer_.vocab_size())
      return invalid_argument(source, ": token ", i, " has the id ", c.tokens[i],
                              ", outside the model's tokenizer (", tokenizer_.vocab_size(),
                              " ids)");
  }
  // The positions first: load_kv changes nothing when it fails, and neither does this.
  const int64_t held = NpuSession::kv_blob_position(c.kv);
  if (held >= 0 && held != static_cast<int64_t>(c.tokens.size()))
    return invalid_argument(source, ": lists ", c.tokens.size(), " tokens, its KV cache holds ",
                            held, " positions");
  QBC_RETURN_IF_ERROR(session_->load_kv(c.kv).with_context(source));
  cached_ = std::move(c.tokens);
  images_ = std::move(c.images);
  reused_ = 0;
  return ok_status();
}

StatusOr<std::string> Generator::generate_text(std::string_view prompt, int max_new,
                                               const runner::SamplingOptions& sampling) {
  const std::vector<int32_t> ids = encode(prompt);
  QBC_ASSIGN_OR_RETURN(runner::GenerateResult r, generate(ids, max_new, sampling));
  return decode_continuation(ids, r.tokens);
}

}  // namespace qbc::runtime
