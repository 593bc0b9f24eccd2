// `qbc calib prepare` over the driver's model loading (see qbc/driver/calib_prepare.h).
#include "qbc/driver/calib_prepare.h"

#include <filesystem>
#include <nlohmann/json.hpp>
#include <sstream>
#include <vector>

#include "qbc/calib/calib_data.h"
#include "qbc/calib/npy.h"
#include "qbc/calib/prepare.h"
#include "qbc/driver/generate.h"
#include "qbc/driver/model_loader.h"
#include "qbc/driver/vision_part.h"
#include "qbc/ir/host_inputs.h"
#include "qbc/support/logging.h"

namespace qbc::driver {
namespace {

// The model's host embedding table, checked against its one required float input (Qwen3-VL's
// optional DeepStack inputs are written beside it from the images).
StatusOr<calib::EmbeddingTable> embedding_table(const CalibPrepareRequest& r, const LoadedModel& m,
                                                std::string* input_name) {
  std::vector<calib::CalibInputSpec> inputs;
  for (const calib::CalibInputSpec& in : calib::calib_input_specs(m.graph))
    if (!in.optional) inputs.push_back(in);
  if (inputs.size() != 1) {
    return unimplemented(r.model,
                         ": calib prepare needs a model with one required float input, this one "
                         "has ",
                         inputs.size());
  }
  QBC_ASSIGN_OR_RETURN(const ir::Weight* emb, calib::find_host_embedding(m.graph));
  calib::EmbeddingTable table;
  table.vocab = emb->type.dims[0];
  table.hidden = emb->type.dims[1];
  if (table.hidden != inputs[0].hidden) {
    return invalid_argument(r.model, ": host embedding '@", emb->name, "' rows have ", table.hidden,
                            " values but the graph input ", inputs[0].name, " takes ",
                            inputs[0].hidden);
  }
  QBC_RETURN_IF_ERROR(read_weight(m, *emb, &table.data));
  *input_name = inputs[0].name;
  return table;
}

calib::PrepareProvenance provenance(const CalibPrepareRequest& r, const LoadedModel& m) {
  calib::PrepareProvenance prov;
  prov.model = r.model;
  prov.source_path = m.graph.source_path;
  prov.source_format = m.graph.source_format;
  prov.files = m.graph.files;
  prov.tokenizer_path = m.source ? m.source->tokenizer_path().string() : "";
  prov.producer = r.producer;
  return prov;
}

/// The ids of one image span as the runtime expands an image mark, -1 at each feature row:
/// Idefics3's span text (encoded with its special tokens), else the processor's text and ids
/// around tokens image tokens.
std::vector<int32_t> image_span_ids(const tokenizer::Tokenizer& tok, const FloatImageFeatures& f) {
  std::vector<int32_t> ids;
  if (!f.span_text.empty()) {
    ids = tok.encode(f.span_text, false, /*parse_special=*/true);
    for (int32_t& id : ids) id = id == f.image_token ? -1 : id;
    return ids;
  }
  ids = tok.encode(f.prefix_text, false);
  ids.insert(ids.end(), f.prefix.begin(), f.prefix.end());
  ids.insert(ids.end(), static_cast<size_t>(f.tokens), -1);
  ids.insert(ids.end(), f.suffix.begin(), f.suffix.end());
  const std::vector<int32_t> tail = tok.encode(f.suffix_text, false);
  ids.insert(ids.end(), tail.begin(), tail.end());
  return ids;
}

}  // namespace

Status check_calib_prepare(const CalibPrepareRequest& r) {
  QBC_RETURN_IF_ERROR(calib::check_output_dir(r.output, r.force));
  std::error_code ec;
  if (!std::filesystem::is_regular_file(r.text, ec))
    return not_found(r.text, ": no such text file (--text)");
  if (!r.images.empty()) return list_images(r.images).status();
  return ok_status();
}

StatusOr<CalibPrepareResult> prepare_calib(const CalibPrepareRequest& r,
                                           const config::ResolvedConfig& cfg) {
  calib::PrepareOptions po;
  po.text_path = r.text;
  po.out_dir = r.output;
  po.num_samples = r.num_samples > 0 ? r.num_samples : cfg.options.calibration().num_samples();
  po.seq_len = r.seq_len > 0 ? r.seq_len : cfg.options.calibration().seq_length();
  po.seed = static_cast<uint64_t>(cfg.options.seed());
  po.force = r.force;

  QBC_ASSIGN_OR_RETURN(LoadedModel m, open_model(r.model, cfg));
  QBC_ASSIGN_OR_RETURN(tokenizer::Tokenizer tok, load_tokenizer(m));
  QBC_ASSIGN_OR_RETURN(calib::EmbeddingTable table, embedding_table(r, m, &po.input_name));
  int64_t span_rows = 0;
  if (!r.images.empty()) {
    QBC_ASSIGN_OR_RETURN(const std::vector<std::string> files, list_images(r.images));
    // The span's length first: a sample too short for it is refused before the tower runs.
    QBC_ASSIGN_OR_RETURN(const FloatImageFeatures layout, float_image_features(r.model, cfg, {}));
    const std::vector<int32_t> layout_ids = image_span_ids(tok, layout);
    const auto rows = static_cast<int64_t>(layout_ids.size());
    if (po.seq_len < rows + 2)
      return invalid_argument("--seq-len ", po.seq_len, " holds no image: an image span of ",
                              r.model, " is ", rows,
                              " rows, and a sample needs a token before and after it (--seq-len ",
                              rows + 2, " or more)");
    events::status("calib", "encoding " + std::to_string(files.size()) +
                                " images with the float vision tower");
    QBC_ASSIGN_OR_RETURN(FloatImageFeatures f, float_image_features(r.model, cfg, files));
    if (f.width != table.hidden)
      return invalid_argument(r.model, ": the vision part writes features of ", f.width,
                              " columns, the language model's embedding rows have ", table.hidden);
    // The span as the runtime feeds it: each id's embedding row, the image's feature rows in
    // order where the span has a feature slot.
    const std::vector<int32_t> ids = image_span_ids(tok, f);
    std::vector<std::vector<float>> text_rows(ids.size());
    int64_t slots = 0;
    for (size_t i = 0; i < ids.size(); ++i) {
      if (ids[i] < 0) {
        ++slots;
        continue;
      }
      QBC_RETURN_IF_ERROR(table.embed({ids[i]}, &text_rows[i]));
    }
    if (slots != f.tokens)
      return invalid_argument(r.model, ": the tokenizer writes ", slots,
                              " image tokens in an image span, the tower gives ", f.tokens,
                              " rows (its vocabulary lacks the processor's image tokens)");
    // Qwen3-VL: each DeepStack level is a graph input of its own, its rows at the image's
    // rows of the span and zero at the text ids (as the runtime adds them).
    const auto levels = static_cast<size_t>(f.deepstack_levels);
    for (size_t j = 0; j < levels; ++j) {
      po.span_input_names.push_back(ir::deepstack_input_name(static_cast<int64_t>(j)));
      if (m.graph.find(po.span_input_names.back()) < 0)
        return invalid_argument(r.model, ": the vision part writes ", levels,
                                " DeepStack levels, but the language model has no input '",
                                po.span_input_names.back(), "' (text_config and vision_config ",
                                "disagree on deepstack_visual_indexes)");
    }
    const auto width = static_cast<size_t>(f.width);
    const size_t w = width * (1 + levels);
    for (size_t k = 0; k < files.size(); ++k) {
      std::vector<float> span;
      std::vector<std::vector<float>> level_rows(levels);
      size_t at = 0;  // the next feature row of the image
      for (size_t i = 0; i < ids.size(); ++i) {
        if (ids[i] >= 0) {
          span.insert(span.end(), text_rows[i].begin(), text_rows[i].end());
          for (std::vector<float>& l : level_rows) l.insert(l.end(), width, 0.0f);
          continue;
        }
        const auto row = f.rows[k].begin() + static_cast<std::ptrdiff_t>(at);
        span.insert(span.end(), row, row + static_cast<std::ptrdiff_t>(width));
        for (size_t j = 0; j < levels; ++j)
          level_rows[j].insert(level_rows[j].end(),
                               row + static_cast<std::ptrdiff_t>(width * (j + 1)),
                               row + static_cast<std::ptrdiff_t>(width * (j + 2)));
        at += w;
      }
      po.image_spans.push_back(std::move(span));
      if (levels > 0) po.span_inputs.push_back(std::move(level_rows));
      po.image_names.push_back(std::filesystem::path(files[k]).filename().string());
    }
    span_rows = static_cast<int64_t>(ids.size());
  }
  events::status("calib", "preparing " + std::to_string(po.num_samples) + " samples of " +
                              std::to_string(po.seq_len) + " tokens");
  QBC_ASSIGN_OR_RETURN(calib::PrepareResult pr,
                       calib::prepare_calib_dir(po, tok, table, provenance(r, m)));
  CalibPrepareResult out;
  out.output = r.output;
  out.samples = po.num_samples;
  out.seq_len = po.seq_len;
  out.hidden = table.hidden;
  out.text_tokens = pr.num_tokens;
  out.seed = po.seed;
  out.bos_replaced = pr.bos_replaced;
  out.images = static_cast<int64_t>(po.image_spans.size());
  out.image_span = span_rows;
  return out;
}

std::string calib_prepare_json(const CalibPrepareResult& r) {
  nlohmann::ordered_json j{
      {"output", r.output},           {"samples", r.samples}, {"shape", {1, r.seq_len, r.hidden}},
      {"text_tokens", r.text_tokens}, {"seed", r.seed},       {"bos_replaced", r.bos_replaced}};
  if (r.images > 0) {
    j["images"] = r.images;
    j["image_span"] = r.image_span;
  }
  return j.dump();
}

std::string calib_prepare_text(const CalibPrepareResult& r) {
  std::ostringstream os;
  os << "wrote " << r.samples << " samples " << calib::shape_string({1, r.seq_len, r.hidden})
     << " float32 to " << r.output << " (" << r.text_tokens << " text tokens, seed " << r.seed;
  if (r.images > 0)
    os << "; " << r.images << " images, each a span of " << r.image_span
       << " rows after a sample's first token";
  os << ")\n";
  return os.str();
}

}  // namespace qbc::driver
