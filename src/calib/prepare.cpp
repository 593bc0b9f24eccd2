// `qbc calib prepare` (include/qbc/calib/prepare.h): text -> seeded token windows -> embedded
// .npy samples, written atomically as a folder.
#include "qbc/calib/prepare.h"

#include <unistd.h>

#include <cstdio>
#include <nlohmann/json.hpp>

#include "qbc/calib/npy.h"
#include "qbc/support/cancel.h"
#include "qbc/support/file_util.h"
#include "qbc/support/hash.h"
#include "qbc/support/logging.h"

namespace qbc::calib {
namespace {

namespace fs = std::filesystem;

/// Removes a temporary folder unless committed.
class TempDirGuard {
 public:
  explicit TempDirGuard(fs::path dir) : dir_(std::move(dir)) {}
  ~TempDirGuard() {
    if (dir_.empty()) return;
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  void release() { dir_.clear(); }

 private:
  fs::path dir_;
};

std::string sample_name(int64_t i) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "sample_%04lld.npy", static_cast<long long>(i));
  return buf;
}

fs::path sibling(const fs::path& dir, const std::string& tag) {
  const fs::path parent = dir.has_parent_path() ? dir.parent_path() : fs::path(".");
  return parent / ("." + dir.filename().string() + "." + tag + "." + std::to_string(::getpid()));
}

/// Moves `tmp` into place as `dir`, replacing an existing (empty, or forced) folder.
Status commit_dir(const fs::path& tmp, const fs::path& dir) {
  std::error_code ec;
  fs::path old;
  if (fs::exists(dir, ec)) {
    old = sibling(dir, "old");
    fs::rename(dir, old, ec);
    if (ec) {
      return invalid_argument(dir.string(), ": cannot replace existing folder: ", ec.message());
    }
  }
  fs::rename(tmp, dir, ec);
  if (ec) {
    std::error_code ec2;
    if (!old.empty()) fs::rename(old, dir, ec2);  // put the old output back
    return invalid_argument(dir.string(), ": cannot move output into place: ", ec.message());
  }
  if (!old.empty()) fs::remove_all(old, ec);
  return ok_status();
}

std::string provenance_json(const PrepareOptions& o, const PrepareProvenance& p,
                            const PrepareResult& r, const std::string& text_hash,
                            uint64_t text_size, const tokenizer::Tokenizer& tok, int64_t hidden) {
  nlohmann::ordered_json j;
  j["format"] = "qbc-calib-npy/1";
  j["producer"] = p.producer;
  nlohmann::ordered_json files = nlohmann::ordered_json::array();
  for (const ir::SourceFile& f : p.files) {
    files.push_back({{"path", f.path}, {"size", f.size}, {"xxh3_128", f.xxh3_128}});
  }
  j["model"] = {
      {"path", p.model}, {"source", p.source_path}, {"format", p.source_format}, {"files", files}};
  j["tokenizer"] = {
      {"path", p.tokenizer_path}, {"add_bos", tok.add_bos_default()}, {"bos_id", tok.bos_id()}};
  j["text"] = {{"path", o.text_path.string()},
               {"size", text_size},
               {"xxh3_128", text_hash},
               {"tokens", r.num_tokens}};
  j["input"] = o.input_name;
  j["shape"] = {1, o.seq_len, hidden};
  j["dtype"] = "<f4";
  j["seed"] = o.seed;
  j["seq_len"] = o.seq_len;
  j["num_samples"] = o.num_samples;
  j["bos_replaced"] = r.bos_replaced;
  j["offsets"] = r.offsets;
  if (!o.image_spans.empty()) {
    nlohmann::ordered_json images = nlohmann::ordered_json::array();
    for (size_t k = 0; k < o.image_spans.size(); ++k)
      images.push_back({{"file", o.image_names[k]},
                        {"rows", static_cast<int64_t>(o.image_spans[k].size()) / hidden}});
    j["images"] = images;
    j["image_of_sample"] = r.image_of_sample;
    j["image_position"] = 1;  // the span follows each sample's first token
    if (!o.span_input_names.empty()) j["span_inputs"] = o.span_input_names;
  }
  return j.dump(2) + "\n";
}

}  // namespace

std::vector<int64_t> pick_window_offsets(int64_t num_tokens, int64_t seq_len, int64_t num_samples,
                                         uint64_t seed) {
  std::vector<int64_t> out;
  if (num_tokens < seq_len || seq_len < 1 || num_samples < 1) return out;
  const uint64_t choices = static_cast<uint64_t>(num_tokens - seq_len) + 1;
  uint64_t state = seed;
  out.reserve(static_cast<size_t>(num_samples));
  for (int64_t i = 0; i < num_samples; ++i) {
    out.push_back(static_cast<int64_t>(splitmix64(state) % choices));
  }
  return out;
}

Status check_output_dir(const fs::path& dir, bool force) {
  std::error_code ec;
  if (dir.empty()) return invalid_argument("no output folder given (-o DIR)");
  if (!fs::exists(dir, ec)) return ok_status();
  if (!fs::is_directory(dir, ec)) {
    return invalid_argument(dir.string(), ": exists and is not a folder");
  }
  if (force) return ok_status();
  if (!fs::is_empty(dir, ec)) {
    return invalid_argument(dir.string(),
                            ": output folder exists and is not empty; use --force to replace it");
  }
  return ok_status();
}

StatusOr<PrepareResult> prepare_calib_dir(const PrepareOptions& o, const tokenizer::Tokenizer& tok,
                                          const EmbeddingTable& table,
                                          const PrepareProvenance& prov) {
  if (o.num_samples < 1) return invalid_argument("--num-samples must be >= 1, got ", o.num_samples);
  if (o.seq_len < 1) return invalid_argument("--seq-len must be >= 1, got ", o.seq_len);
  if (table.vocab <= 0 || table.hidden <= 0 ||
      static_cast<int64_t>(table.data.size()) != table.vocab * table.hidden) {
    return invalid_argument("calib prepare: the embedding table is empty or inconsistent");
  }
  QBC_RETURN_IF_ERROR(check_output_dir(o.out_dir, o.force));
  if (o.image_names.size() != o.image_spans.size())
    return invalid_argument("calib prepare: ", o.image_spans.size(), " image spans and ",
                            o.image_names.size(), " names");
  if (!o.span_input_names.empty() && o.span_inputs.size() != o.image_spans.size())
    return invalid_argument("calib prepare: ", o.span_inputs.size(), " span inputs for ",
                            o.image_spans.size(), " image spans");
  for (size_t k = 0; k < o.span_inputs.size(); ++k) {
    if (o.span_inputs[k].size() != o.span_input_names.size())
      return invalid_argument("calib prepare: ", o.image_names[k], " has ", o.span_inputs[k].size(),
                              " span inputs, not ", o.span_input_names.size());
    for (const std::vector<float>& rows : o.span_inputs[k])
      if (rows.size() != o.image_spans[k].size())
        return invalid_argument("calib prepare: ", o.image_names[k], ": a span input of ",
                                rows.size(), " values beside a span of ", o.image_spans[k].size());
  }
  for (size_t k = 0; k < o.image_spans.size(); ++k) {
    const auto values = static_cast<int64_t>(o.image_spans[k].size());
    if (values == 0 || values % table.hidden != 0)
      return invalid_argument(o.image_names[k], ": ", values, " feature values are not rows of ",
                              table.hidden);
    const int64_t rows = values / table.hidden;
    if (o.seq_len < rows + 2)
      return invalid_argument("--seq-len ", o.seq_len, " holds no image: the image span of ",
                              o.image_names[k], " is ", rows,
                              " rows, and a sample needs a token before and after it (--seq-len ",
                              rows + 2, " or more)");
  }
  const std::string text_name = o.text_path.string();
  QBC_ASSIGN_OR_RETURN(std::string text, read_text_file(text_name));
  const std::string text_hash = xxh3_128_bytes(text.data(), text.size());

  PrepareResult r;
  const std::vector<int32_t> tokens = tok.encode(text, tok.add_bos_default());
  r.num_tokens = static_cast<int64_t>(tokens.size());
  if (r.num_tokens < o.seq_len) {
    return invalid_argument(text_name, ": ", r.num_tokens,
                            " tokens, fewer than one window of --seq-len ", o.seq_len);
  }
  for (int32_t t : tokens) {
    if (t < 0 || t >= table.vocab) {
      return invalid_argument(text_name, ": token id ", t,
                              " is outside the model's embedding table of ", table.vocab,
                              " rows; the tokenizer does not match the model");
    }
  }
  r.bos_replaced = tok.add_bos_default() && tok.bos_id() >= 0;
  if (r.bos_replaced && tok.bos_id() >= table.vocab) {
    return invalid_argument("BOS id ", tok.bos_id(), " is outside the model's embedding table of ",
                            table.vocab, " rows");
  }
  r.offsets = pick_window_offsets(r.num_tokens, o.seq_len, o.num_samples, o.seed);

  std::error_code ec;
  const fs::path parent = o.out_dir.has_parent_path() ? o.out_dir.parent_path() : fs::path(".");
  fs::create_directories(parent, ec);
  if (ec) {
    return invalid_argument(o.out_dir.string(), ": cannot create parent folder: ", ec.message());
  }
  const fs::path tmp = sibling(o.out_dir, "tmp");
  fs::remove_all(tmp, ec);
  fs::create_directory(tmp, ec);
  if (ec) {
    return invalid_argument(o.out_dir.string(), ": cannot create temporary folder ", tmp.string(),
                            ": ", ec.message());
  }
  TempDirGuard guard(tmp);

  std::string list;
  std::vector<std::string> input_lists(o.span_input_names.size());
  for (const std::string& name : o.span_input_names) {
    fs::create_directory(tmp / name, ec);
    if (ec)
      return invalid_argument(o.out_dir.string(), ": cannot create ", (tmp / name).string(), ": ",
                              ec.message());
  }
  std::vector<int32_t> window(static_cast<size_t>(o.seq_len));
  std::vector<float> embeds;
  const std::vector<int64_t> shape = {1, o.seq_len, table.hidden};
  for (int64_t i = 0; i < o.num_samples; ++i) {
    QBC_RETURN_IF_ERROR(cancel::check("calibration sample " + std::to_string(i)));
    const auto begin = tokens.begin() + r.offsets[static_cast<size_t>(i)];
    std::copy(begin, begin + o.seq_len, window.begin());
    if (r.bos_replaced) window[0] = tok.bos_id();
    QBC_RETURN_IF_ERROR(table.embed(window, &embeds));
    if (!o.image_spans.empty()) {  // [first token][the image span][the window's text, cut]
      const size_t k = static_cast<size_t>(i) % o.image_spans.size();
      const std::vector<float>& span = o.image_spans[k];
      const auto h = static_cast<size_t>(table.hidden);
      std::vector<float> mixed(embeds.begin(), embeds.begin() + static_cast<std::ptrdiff_t>(h));
      mixed.insert(mixed.end(), span.begin(), span.end());
      mixed.insert(mixed.end(), embeds.begin() + static_cast<std::ptrdiff_t>(h),
                   embeds.begin() + static_cast<std::ptrdiff_t>(embeds.size() - span.size()));
      embeds = std::move(mixed);
      r.image_of_sample.push_back(static_cast<int64_t>(k));
      // The span's other inputs at the same rows, zero elsewhere.
      for (size_t e = 0; e < o.span_input_names.size(); ++e) {
        std::vector<float> rows(embeds.size(), 0.0f);
        std::copy(o.span_inputs[k][e].begin(), o.span_inputs[k][e].end(),
                  rows.begin() + static_cast<std::ptrdiff_t>(h));
        const std::string file = o.span_input_names[e] + "/" + sample_name(i);
        // fp16, the precision the NPU takes them in: half the disk of f32.
        QBC_RETURN_IF_ERROR(write_npy(tmp / file, shape, rows.data(), NpyDtype::kF16)
                                .with_context(o.out_dir.string()));
        input_lists[e] += sample_name(i) + "\n";
      }
    }
    const std::string name = sample_name(i);
    QBC_RETURN_IF_ERROR(
        write_npy(tmp / name, shape, embeds.data()).with_context(o.out_dir.string()));
    list += name + "\n";
    r.files.push_back(o.out_dir / name);
    events::progress("calib", i + 1, o.num_samples);
  }
  QBC_RETURN_IF_ERROR(write_file_atomic((tmp / "npy_files.txt").string(), list));
  if (!o.span_input_names.empty()) {
    nlohmann::ordered_json inputs;
    inputs[o.input_name] = "npy_files.txt";
    for (size_t e = 0; e < o.span_input_names.size(); ++e) {
      const std::string& name = o.span_input_names[e];
      QBC_RETURN_IF_ERROR(
          write_file_atomic((tmp / name / "npy_files.txt").string(), input_lists[e]));
      inputs[name] = name + "/npy_files.txt";
    }
    QBC_RETURN_IF_ERROR(write_file_atomic((tmp / "inputs.json").string(), inputs.dump(2) + "\n"));
  }
  QBC_RETURN_IF_ERROR(
      write_file_atomic((tmp / "provenance.json").string(),
                        provenance_json(o, prov, r, text_hash, text.size(), tok, table.hidden)));
  // Re-check just before replacing: another process may have filled the folder meanwhile.
  QBC_RETURN_IF_ERROR(check_output_dir(o.out_dir, o.force));
  QBC_RETURN_IF_ERROR(commit_dir(tmp, o.out_dir));
  guard.release();
  return r;
}

}  // namespace qbc::calib
