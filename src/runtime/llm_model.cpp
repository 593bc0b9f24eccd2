// The runtime's model API (see qbc/runtime/llm_model.h).
#include "qbc/runtime/llm_model.h"

#include <filesystem>
#include <set>

#include "qbc/support/file_util.h"

namespace qbc::runtime {

StatusOr<std::unique_ptr<LlmModel>> LlmModel::create(const std::string& path,
                                                     const LoadOptions& options) {
  QBC_ASSIGN_OR_RETURN(Model m, load_model(path, options));
  std::unique_ptr<LlmModel> out(new LlmModel(std::move(m)));
  const int instances = out->model_.device->mode().instances;
  for (int slot = 0; slot < instances; ++slot) {
    QBC_ASSIGN_OR_RETURN(std::unique_ptr<NpuSession> s,
                         NpuSession::create(out->model_.device, slot));
    out->sessions_.push_back(std::move(s));
  }
  return out;
}

int64_t LlmModel::hidden() const { return model_.file.bundle->hidden; }
int64_t LlmModel::vocab() const { return model_.file.bundle->vocab; }
int64_t LlmModel::max_cache() const { return model_.file.bundle->max_cache; }

Status LlmModel::check_id(int cache_id) const {
  if (cache_id < 0 || cache_id >= batch())
    return invalid_argument("cache_id ", cache_id, ": the model serves ", batch(), " caches (",
                            "llm.attributes.runtime.batchSize at compile time)");
  return ok_status();
}

StatusOr<std::vector<float>> LlmModel::infer(const std::vector<float>& embeddings,
                                             int64_t cache_size) {
  const int64_t h = hidden();
  if (embeddings.empty() || static_cast<int64_t>(embeddings.size()) % h != 0)
    return invalid_argument("infer: ", embeddings.size(), " values are not rows of ", h);
  return infer(embeddings,
               {BatchParam{static_cast<int64_t>(embeddings.size()) / h, cache_size, 0}});
}

StatusOr<std::vector<float>> LlmModel::infer(const std::vector<float>& embeddings,
                                             const std::vector<BatchParam>& params) {
  const int64_t h = hidden();
  int64_t rows = 0;
  std::set<int> ids;
  for (const BatchParam& p : params) {
    QBC_RETURN_IF_ERROR(check_id(p.cache_id));
    if (!ids.insert(p.cache_id).second)
      return invalid_argument("infer: cache_id ", p.cache_id, " appears twice in one call");
    if (p.sequence_length < 1)
      return invalid_argument("infer: sequence_length ", p.sequence_length, " of cache_id ",
                              p.cache_id);
    if (p.cache_size < 0 || p.cache_size > sessions_[p.cache_id]->position())
      return invalid_argument("infer: cache_size ", p.cache_size, " of cache_id ", p.cache_id,
                              ": the cache holds ", sessions_[p.cache_id]->position(), " tokens");
    if (p.cache_size + p.sequence_length > max_cache())
      return resource_exhausted("infer: cache_id ", p.cache_id, ": ", p.cache_size, " cached + ",
                                p.sequence_length, " tokens exceed the cache of ", max_cache());
    rows += p.sequence_length;
  }
  if (static_cast<int64_t>(embeddings.size()) != rows * h)
    return invalid_argument("infer: ", embeddings.size(), " values for ", rows, " rows of ", h);
  std::vector<float> out;
  out.reserve(static_cast<size_t>(rows * vocab()));
  int64_t at = 0;
  for (const BatchParam& p : params) {
    NpuSession& s = *sessions_[p.cache_id];
    QBC_RETURN_IF_ERROR(s.rewind(p.cache_size));
    std::vector<float> rows_in(embeddings.begin() + at * h,
                               embeddings.begin() + (at + p.sequence_length) * h);
    std::vector<float> logits;
    QBC_RETURN_IF_ERROR(s.forward_embeds(rows_in, p.sequence_length, &logits)
                            .with_context("cache_id ", p.cache_id));
    out.insert(out.end(), logits.begin(), logits.end());
    at += p.sequence_length;
  }
  return out;
}

StatusOr<std::vector<float>> LlmModel::embed(const std::vector<int32_t>& tokens) const {
  std::vector<float> out;
  QBC_RETURN_IF_ERROR(sessions_.front()->embed(tokens, &out));
  return out;
}

StatusOr<std::string> LlmModel::dump_cache(int cache_id) const {
  QBC_RETURN_IF_ERROR(check_id(cache_id));
  return sessions_[cache_id]->dump_kv();
}

Status LlmModel::load_cache(std::string_view blob, int cache_id) {
  QBC_RETURN_IF_ERROR(check_id(cache_id));
  return sessions_[cache_id]->load_kv(blob);
}

Status LlmModel::dump_cache_to(const std::string& folder, int cache_id) const {
  QBC_ASSIGN_OR_RETURN(std::string blob, dump_cache(cache_id));
  std::error_code ec;
  std::filesystem::create_directories(folder, ec);
  if (ec) return invalid_argument(folder, ": cannot create the folder: ", ec.message());
  return write_file_atomic(
      (std::filesystem::path(folder) / ("cache-" + std::to_string(cache_id) + ".kv")).string(),
      blob);
}

Status LlmModel::load_cache_from(const std::string& folder, int cache_id) {
  const std::string p =
      (std::filesystem::path(folder) / ("cache-" + std::to_string(cache_id) + ".kv")).string();
  QBC_ASSIGN_OR_RETURN(std::string blob, read_text_file(p));
  return load_cache(blob, cache_id).with_context(p);
}

void LlmModel::reset(int cache_id) {
  for (int i = 0; i < batch(); ++i)
    if (cache_id < 0 || cache_id == i) sessions_[i]->reset();
}

int64_t LlmModel::cache_size(int cache_id) const {
  return cache_id >= 0 && cache_id < batch() ? sessions_[cache_id]->position() : 0;
}

}  // namespace qbc::runtime
