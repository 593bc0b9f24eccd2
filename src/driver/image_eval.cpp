// eval_image_pairs (qbc/driver/image_eval.h): a compiled VLM against its float folder on
// image-text pairs, each prompt run as `qbc run --image` runs it.
#include "qbc/driver/image_eval.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>

#include "qbc/driver/accuracy.h"
#include "qbc/driver/generate.h"
#include "qbc/driver/model_loader.h"
#include "qbc/driver/runnable.h"
#include "qbc/driver/vision_part.h"
#include "qbc/frontend/importer.h"
#include "qbc/mxq/model_file.h"
#include "qbc/quant/output_basis.h"
#include "qbc/ref/session.h"
#include "qbc/runner/mrope.h"
#include "qbc/runtime/vision_encoder.h"
#include "qbc/support/file_util.h"
#include "qbc/support/json_parse.h"
#include "qbc/support/logging.h"

namespace qbc::driver {
namespace {

namespace fs = std::filesystem;

/// The float language model of the reference folder and how its prompts run.
struct FloatVlm {
  LoadedModel model;
  std::unique_ptr<ref::Session> session;
  bool mrope = false;  ///< 3-stream positions (Qwen2-VL, Qwen2.5-VL)
  bool span = false;   ///< bidirectional image spans (Gemma 3)
  int64_t capacity = 0;
};

StatusOr<FloatVlm> open_float_vlm(const std::string& reference, const config::ResolvedConfig& cfg,
                                  int threads) {
  FloatVlm f;
  QBC_ASSIGN_OR_RETURN(f.model, open_model(reference, cfg));
  ref::SessionOptions so;
  so.threads = threads;
  QBC_ASSIGN_OR_RETURN(f.session, make_session(f.model, so));
  for (const ir::Node& n : f.model.graph.nodes())
    f.mrope = f.mrope || (n.op == ir::Op::kInput && n.name == "rope_cos");
  const auto it = f.model.graph.metadata.find(frontend::kImageSpanMetadata);
  f.span = it != f.model.graph.metadata.end() && !it->second.empty() && it->second != "0";
  f.capacity = cache_capacity(f.model.graph);
  return f;
}

/// The float logits of `prompt` with `rows` at its `image_token`s: M-RoPE positions over the
/// whole prompt (`side` x `side` grids), or each run of image tokens as one span call. Each row
/// is the feature row, then `levels` DeepStack rows (Qwen3-VL), given to the session as its
/// deepstack inputs at the same tokens.
Status float_logits(FloatVlm& f, const std::vector<int32_t>& prompt, int32_t image_token,
                    const std::vector<float>& rows, int64_t side, int64_t levels,
                    std::vector<float>* logits) {
  ref::Session& s = *f.session;
  s.reset();
  std::vector<float> x;
  QBC_RETURN_IF_ERROR(s.embed(prompt, &x));
  const auto h = static_cast<size_t>(s.hidden_size());
  const size_t w = h * static_cast<size_t>(1 + levels);
  const auto n = static_cast<int64_t>(prompt.size());
  std::vector<std::vector<float>> deepstack(static_cast<size_t>(levels),
                                            std::vector<float>(prompt.size() * h, 0.0f));
  size_t used = 0;
  for (size_t i = 0; i < prompt.size(); ++i) {
    if (prompt[i] != image_token) continue;
    if ((used + 1) * w > rows.size()) return internal_error("fewer image rows than image tokens");
    const auto row = rows.begin() + static_cast<std::ptrdiff_t>(used * w);
    std::copy(row, row + static_cast<std::ptrdiff_t>(h),
              x.begin() + static_cast<std::ptrdiff_t>(i * h));
    for (size_t j = 0; j < deepstack.size(); ++j)
      std::copy(row + static_cast<std::ptrdiff_t>((j + 1) * h),
                row + static_cast<std::ptrdiff_t>((j + 2) * h),
                deepstack[j].begin() + static_cast<std::ptrdiff_t>(i * h));
    ++used;
  }
  if (levels > 0) QBC_RETURN_IF_ERROR(s.set_deepstack(std::move(deepstack)));
  if (f.mrope) {
    const int64_t per = side * side;
    if (per <= 0 || static_cast<int64_t>(used) % per != 0)
      return internal_error(used, " image tokens are not whole ", side, " x ", side, " grids");
    const std::vector<runner::LlmGrid> grids(used / static_cast<size_t>(per),
                                             runner::LlmGrid{1, side, side});
    QBC_ASSIGN_OR_RETURN(const runner::MRopePositions p,
                         runner::mrope_positions(prompt, image_token, grids));
    return s.forward_embeds_mrope(x, n, p.positions, logits);
  }
  if (!f.span) return s.forward_embeds(x, n, logits);
  logits->clear();
  for (int64_t i = 0; i < n;) {  // runs of text tokens, runs of image tokens
    const bool image = prompt[static_cast<size_t>(i)] == image_token;
    int64_t j = i;
    while (j < n && (prompt[static_cast<size_t>(j)] == image_token) == image) ++j;
    const std::vector<float> part(x.begin() + static_cast<std::ptrdiff_t>(i * h),
                                  x.begin() + static_cast<std::ptrdiff_t>(j * h));
    std::vector<float> out;
    QBC_RETURN_IF_ERROR(image ? s.forward_embeds_span(part, j - i, &out)
                              : s.forward_embeds(part, j - i, &out));
    logits->insert(logits->end(), out.begin(), out.end());
    i = j;
  }
  return ok_status();
}

/// The pair's text as the prompt's text (one trailing newline dropped).
StatusOr<std::string> pair_text(const ImageTextPair& p) {
  QBC_ASSIGN_OR_RETURN(std::string text, read_text_file(p.text_file));
  if (!text.empty() && text.back() == '\n') text.pop_back();
  if (!text.empty() && text.back() == '\r') text.pop_back();
  return text;
}

/// "  DeepStack SQNR: 35.10 dB, 34.20 dB\n" (Qwen3-VL's levels), or nothing.
std::string deepstack_text(const std::vector<double>& db) {
  if (db.empty()) return "";
  std::ostringstream os;
  os.setf(std::ios::fixed);
  os.precision(2);
  os << "  DeepStack SQNR:";
  for (size_t j = 0; j < db.size(); ++j) os << (j > 0 ? ", " : " ") << db[j] << " dB";
  os << "\n";
  return os.str();
}

/// JSON has no infinity: an exact match's SQNR is null.
nlohmann::json db_json(double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(); }

nlohmann::json db_list(const std::vector<double>& v) {
  nlohmann::json out = nlohmann::json::array();
  for (double d : v) out.push_back(db_json(d));
  return out;
}

/// The per-block tower SQNR of a file's calibration record (VisionPart.calibration, written by
/// the compile: {"block_sqnr_samples": N, "block_sqnr_db": [{"node", "sqnr_db"}]}). The record
/// is the file's, so it is checked as untrusted: at most kMaxTowerBlocks entries, each a tower
/// block's output name and a number (null: exact), a sample count in [1, kTowerErrorSamples];
/// anything else leaves the report without it, said once in the log.
void tower_blocks_of(const std::string& record, ImageEvalReport* r) {
  constexpr size_t kMaxTowerBlocks = 4096;
  StatusOr<nlohmann::json> parsed = parse_json_text(record, "the vision part's calibration record");
  if (!parsed.ok() || !parsed->is_object() || !parsed->contains("block_sqnr_db")) return;
  const nlohmann::json& j = *parsed;
  auto refuse = [](const std::string& why) {
    log("eval").warn("the file's per-block tower SQNR is not shown: {}", why);
  };
  const nlohmann::json& list = j["block_sqnr_db"];
  if (!list.is_array() || list.empty() || list.size() > kMaxTowerBlocks)
    return refuse("block_sqnr_db is not a list of 1 to 4096 blocks");
  const nlohmann::json* samples =
      j.contains("block_sqnr_samples") ? &j["block_sqnr_samples"] : nullptr;
  if (samples == nullptr || !samples->is_number_unsigned() || samples->get<uint64_t>() < 1 ||
      samples->get<uint64_t>() > kTowerErrorSamples)
    return refuse("block_sqnr_samples is not a count of 1 to 8");
  std::vector<TowerBlockError> blocks;
  for (const nlohmann::json& e : list) {
    if (!e.is_object() || !e.contains("node") || !e["node"].is_string() || !e.contains("sqnr_db") ||
        !is_tower_block_output(e["node"].get<std::string>()))
      return refuse("an entry is not {\"node\": \"vis.blk.N.ffn_residual\", \"sqnr_db\": dB}");
    const nlohmann::json& db = e["sqnr_db"];
    if ((!db.is_number() || !std::isfinite(db.get<double>())) && !db.is_null())
      return refuse("an entry's sqnr_db is not a number");
    blocks.push_back({e["node"].get<std::string>(),
                      db.is_null() ? std::numeric_limits<double>::infinity() : db.get<double>()});
  }
  r->tower_blocks = std::move(blocks);
  r->tower_block_samples = samples->get<int64_t>();
}

}  // namespace

StatusOr<std::vector<ImageTextPair>> list_image_text_pairs(const std::string& dir) {
  QBC_ASSIGN_OR_RETURN(const std::vector<std::string> images, list_images(dir));
  std::vector<ImageTextPair> out;
  std::error_code ec;
  for (const std::string& image : images) {
    const fs::path text = fs::path(image).replace_extension(".txt");
    if (!fs::is_regular_file(text, ec))
      return invalid_argument("--images ", dir, ": ", fs::path(image).filename().string(),
                              " has no text file ", text.filename().string(),
                              " (each image is scored with the text of the same name)");
    out.push_back({image, text.string()});
  }
  return out;
}

StatusOr<ImageEvalReport> eval_image_pairs(runtime::Generator& test, const std::string& model,
                                           const std::string& reference,
                                           const config::ResolvedConfig& cfg,
                                           const std::vector<ImageTextPair>& pairs, int threads) {
  const auto t0 = std::chrono::steady_clock::now();
  const mxq::LoadedModel& file = test.model().file;
  if (file.vision == nullptr)
    return invalid_argument(model, " has no vision part: --images scores a compiled VLM");
  QBC_ASSIGN_OR_RETURN(std::unique_ptr<runtime::VisionEncoder> enc,
                       runtime::VisionEncoder::create(file, test.session().device().mode().scheme));
  // The float tower at the compiled image size.
  config::ResolvedConfig float_cfg = cfg;
  float_cfg.options.mutable_vision()->set_image_size(
      file.meta.vision().image_size() * std::max(1, file.meta.vision().tiles_per_side()));
  QBC_ASSIGN_OR_RETURN(FloatVlm ref, open_float_vlm(reference, float_cfg, threads));
  const int64_t vocab = test.session().vocab_size();
  if (ref.session->vocab_size() != vocab || ref.session->hidden_size() != enc->width())
    return invalid_argument(reference, " is not the float model of ", model, ": vocabulary ",
                            ref.session->vocab_size(), " and width ", ref.session->hidden_size(),
                            " against ", vocab, " and ", enc->width());
  const tokenizer::Tokenizer& tok = test.tokenizer();
  const int64_t side = mxq::vision_grid_side(file.meta.vision());
  // The ids an image's span writes after its last image token (Gemma 3's <end_of_image> and
  // newlines, Idefics3's closing <fake_token_around_image>): not text to score.
  const std::vector<int32_t> span = enc->image_span();
  const auto span_last_image =
      std::find(span.rbegin(), span.rend(), enc->image_token_id()).base() - span.begin();
  const auto suffix =
      static_cast<size_t>(static_cast<std::ptrdiff_t>(span.size()) - span_last_image);
  // The float features of every image first: one float tower for all pairs.
  std::vector<std::string> images;
  for (const ImageTextPair& p : pairs) images.push_back(p.image);
  QBC_ASSIGN_OR_RETURN(const FloatImageFeatures floats,
                       float_image_features(reference, float_cfg, images));
  if (floats.rows.size() != pairs.size())
    return internal_error(reference, ": ", floats.rows.size(), " float features for ", pairs.size(),
                          " images");
  ImageEvalReport r;
  r.model = model;
  r.reference = reference;
  TokenComparison all;
  const auto parts = static_cast<size_t>(1 + enc->deepstack_levels());
  std::vector<double> signal(parts, 0.0), noise(parts, 0.0);
  for (size_t k = 0; k < pairs.size(); ++k) {
    const ImageTextPair& p = pairs[k];
    const std::vector<float>& want = floats.rows[k];
    const std::string name = fs::path(p.image).filename().string();
    ImagePairScore score;
    score.image = name;
    QBC_ASSIGN_OR_RETURN(const std::string text, pair_text(p));
    QBC_ASSIGN_OR_RETURN(
        const std::vector<int32_t> prompt,
        expand_image_tokens(tok.encode(text, tok.add_bos_default(), /*parse_special=*/true),
                            enc->prompt_token_id(), enc->image_span(), 1, tok.bos_id()));
    const auto n = static_cast<int64_t>(prompt.size());
    if (n > test.capacity() || n > ref.capacity) {
      return invalid_argument(p.text_file, ": the prompt with its image is ", n,
                              " tokens, more than the context (", test.capacity(), " of ", model,
                              ", ", ref.capacity, " of ", reference, ")");
    }
    for (int32_t t : prompt) {
      if (t < 0 || t >= vocab)
        return invalid_argument(p.text_file, ": token id ", t, " is outside the vocabulary of ",
                                vocab);
    }
    const auto last_image = static_cast<size_t>(
        std::find(prompt.rbegin(), prompt.rend(), enc->image_token_id()).base() - prompt.begin());
    const size_t first_text = last_image + suffix;
    if (first_text < 1 || first_text >= prompt.size())
      return invalid_argument(p.text_file, ": no text after the image to score");
    QBC_ASSIGN_OR_RETURN(std::vector<float> rows, enc->encode_file(p.image));
    if (want.size() != rows.size()) {
      return invalid_argument(reference, ": the float tower gives ", want.size(),
                              " feature values for ", name, ", the compiled one ", rows.size());
    }
    // Column part 0 is the feature row, part J + 1 DeepStack level J's row (Qwen3-VL).
    const auto h = static_cast<size_t>(enc->width());
    // Rows written in the language model's rotated basis (spinR1) are compared after undoing R.
    std::vector<float> compared;
    const std::vector<float>* got = &rows;
    if (file.meta.vision().has_language_rotation_seed()) {
      quant::OutputBasis basis;
      basis.spin_r1_seed = file.meta.vision().language_rotation_seed();
      basis.hidden = enc->width();
      compared = rows;
      QBC_RETURN_IF_ERROR(
          quant::undo_spin_r1(basis, compared.data(), static_cast<int64_t>(compared.size() / h))
              .with_context(name));
      got = &compared;
    }
    std::vector<double> sig(parts, 0.0), err(parts, 0.0);
    for (size_t i = 0; i < rows.size(); ++i) {
      const size_t part = i % (h * parts) / h;
      const double d = static_cast<double>((*got)[i]) - want[i];
      sig[part] += static_cast<double>(want[i]) * want[i];
      err[part] += d * d;
    }
    score.feature_sqnr_db = sqnr_db(sig[0], err[0]);
    for (size_t j = 1; j < parts; ++j) score.deepstack_sqnr_db.push_back(sqnr_db(sig[j], err[j]));
    for (size_t j = 0; j < parts; ++j) {
      signal[j] += sig[j];
      noise[j] += err[j];
    }
    score.image_tokens = static_cast<int64_t>(rows.size()) / enc->row_width();
    score.prompt_tokens = n;
    std::vector<float> lt, lr;
    QBC_RETURN_IF_ERROR(test.score_with_rows(prompt, enc->image_token_id(), std::move(rows), &lt)
                            .with_context(name));
    QBC_RETURN_IF_ERROR(
        float_logits(ref, prompt, enc->image_token_id(), want, side, enc->deepstack_levels(), &lr)
            .with_context(name));
    if (lt.size() != static_cast<size_t>(n * vocab) || lr.size() != lt.size()) {
      return internal_error(name, ": ", lt.size(), " and ", lr.size(), " logits for ", n,
                            " positions of ", vocab);
    }
    // Each text token after the image span, predicted by the row before it.
    TokenComparison pair;
    for (size_t t = first_text; t < prompt.size(); ++t) {
      const float* rt = lt.data() + (t - 1) * static_cast<size_t>(vocab);
      const float* rr = lr.data() + (t - 1) * static_cast<size_t>(vocab);
      pair.add(rt, rr, vocab, prompt[t]);
      all.add(rt, rr, vocab, prompt[t]);
    }
    score.scored = pair.count();
    score.kld_mean = pair.kld_mean();
    score.top1 = pair.top1();
    score.nll = pair.nll() / static_cast<double>(score.scored);
    score.nll_reference = pair.nll_reference() / static_cast<double>(score.scored);
    log("eval").info("{}: feature SQNR {:.2f} dB, KLD {:.5f}, top-1 {:.2f} % over {} tokens", name,
                     score.feature_sqnr_db, score.kld_mean, 100 * score.top1, score.scored);
    r.pairs.push_back(std::move(score));
  }
  r.scored = all.count();
  const auto count = static_cast<double>(std::max<int64_t>(r.scored, 1));
  r.kld_mean = all.kld_mean();
  r.kld_p99 = all.kld_p99();
  r.top1 = all.top1();
  r.ppl = std::exp(all.nll() / count);
  r.ppl_reference = std::exp(all.nll_reference() / count);
  r.feature_sqnr_db = sqnr_db(signal[0], noise[0]);
  for (size_t j = 1; j < parts; ++j) r.deepstack_sqnr_db.push_back(sqnr_db(signal[j], noise[j]));
  tower_blocks_of(file.meta.vision().calibration(), &r);
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

std::string format_image_eval(const ImageEvalReport& r) {
  std::ostringstream os;
  os.setf(std::ios::fixed);
  os << r.model << " against " << r.reference << " on " << r.pairs.size() << " image-text pairs\n";
  os << "image                          feature SQNR   tokens  scored   KLD mean   top-1\n";
  char line[256];
  for (const ImagePairScore& p : r.pairs) {
    std::snprintf(line, sizeof(line), "%-30s %9.2f dB %8lld %7lld %10.5f %6.2f %%\n",
                  p.image.c_str(), p.feature_sqnr_db, static_cast<long long>(p.prompt_tokens),
                  static_cast<long long>(p.scored), p.kld_mean, 100 * p.top1);
    os << line << deepstack_text(p.deepstack_sqnr_db);
  }
  std::snprintf(line, sizeof(line),
                "all: feature SQNR %.2f dB; text %lld tokens: KLD mean %.5f p99 %.5f, top-1 "
                "%.2f %%, perplexity %.4f (reference %.4f); %.1f s\n",
                r.feature_sqnr_db, static_cast<long long>(r.scored), r.kld_mean, r.kld_p99,
                100 * r.top1, r.ppl, r.ppl_reference, r.seconds);
  os << line << deepstack_text(r.deepstack_sqnr_db);
  if (!r.tower_blocks.empty())
    os << "  tower SQNR per block at compile (" << r.tower_block_samples
       << " calibration samples): " << tower_block_text(r.tower_blocks) << "\n";
  return os.str();
}

std::string image_eval_json(const ImageEvalReport& r) {
  nlohmann::ordered_json j = {{"model", r.model},
                              {"reference", r.reference},
                              {"pairs", nlohmann::json::array()},
                              {"tokens_scored", r.scored},
                              {"feature_sqnr_db", db_json(r.feature_sqnr_db)},
                              {"deepstack_sqnr_db", db_list(r.deepstack_sqnr_db)},
                              {"kld_mean", r.kld_mean},
                              {"kld_p99", r.kld_p99},
                              {"top1", r.top1},
                              {"perplexity", r.ppl},
                              {"perplexity_reference", r.ppl_reference},
                              {"seconds", r.seconds}};
  if (!r.tower_blocks.empty())
    j["compile_tower_block_sqnr_db"] = {{"samples", r.tower_block_samples},
                                        {"blocks", tower_block_json(r.tower_blocks)}};
  for (const ImagePairScore& p : r.pairs) {
    j["pairs"].push_back({{"image", p.image},
                          {"prompt_tokens", p.prompt_tokens},
                          {"image_tokens", p.image_tokens},
                          {"tokens_scored", p.scored},
                          {"feature_sqnr_db", db_json(p.feature_sqnr_db)},
                          {"deepstack_sqnr_db", db_list(p.deepstack_sqnr_db)},
                          {"kld_mean", p.kld_mean},
                          {"top1", p.top1},
                          {"nll", p.nll},
                          {"nll_reference", p.nll_reference}});
  }
  return j.dump();
}

}  // namespace qbc::driver
