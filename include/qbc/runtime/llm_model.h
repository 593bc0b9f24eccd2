// The runtime's model API, shaped after the vendor's qb Runtime (mobilint.md §1.10–1.11) so
// code written for it ports directly: create a model from an MXQ file or manifest with a core
// mode, infer() on embeddings with the number of tokens already cached (chunked prefill and
// decode in one call), batch calls with a BatchParam per sequence, KV-cache dump and load as
// bytes or to a folder, reset. Everything comes from the file (runtime::load_model).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "qbc/runtime/model.h"
#include "qbc/runtime/npu_session.h"
#include "qbc/support/status.h"

namespace qbc::runtime {

/// One sequence of a batch call: `sequence_length` rows of the concatenated input, its cache
/// holding `cache_size` tokens before the call, in cache slot `cache_id` (< batch()).
struct BatchParam {
  int64_t sequence_length = 0;
  int64_t cache_size = 0;
  int cache_id = 0;
};

class LlmModel {
 public:
  /// Loads `path` (docs/mxq.md rules, the program verifier) for `options.core_mode`.
  static StatusOr<std::unique_ptr<LlmModel>> create(const std::string& path,
                                                    const LoadOptions& options = {});

  /// Runs `embeddings` (fp32 [seq, hidden], seq = size / hidden) on cache 0, whose cache holds
  /// `cache_size` tokens (the tokens before these; less than what it holds rewinds it).
  /// Returns the logits [seq, vocab].
  StatusOr<std::vector<float>> infer(const std::vector<float>& embeddings, int64_t cache_size);
  /// A batch call: the sequences' rows concatenated in `params` order. Returns their logits,
  /// concatenated the same way. Each cache_id at most once per call.
  StatusOr<std::vector<float>> infer(const std::vector<float>& embeddings,
                                     const std::vector<BatchParam>& params);

  /// The fp32 embedding rows of `tokens` (the host table of the file).
  StatusOr<std::vector<float>> embed(const std::vector<int32_t>& tokens) const;

  /// Cache `cache_id` as bytes (NpuSession::dump_kv), or into `folder`/cache-<id>.kv.
  StatusOr<std::string> dump_cache(int cache_id = 0) const;
  Status load_cache(std::string_view blob, int cache_id = 0);
  Status dump_cache_to(const std::string& folder, int cache_id = 0) const;
  Status load_cache_from(const std::string& folder, int cache_id = 0);
  /// Empties cache `cache_id` (all caches with -1).
  void reset(int cache_id = -1);
  /// Tokens cached in `cache_id`.
  int64_t cache_size(int cache_id = 0) const;

  int batch() const { return static_cast<int>(sessions_.size()); }
  int64_t hidden() const;
  int64_t vocab() const;
  int64_t max_cache() const;
  const mxq::pb::Meta& meta() const { return model_.file.meta; }
  const Model& model() const { return model_; }

 private:
  explicit LlmModel(Model m) : model_(std::move(m)) {}
  Status check_id(int cache_id) const;
  Model model_;
  std::vector<std::unique_ptr<NpuSession>> sessions_;
};

}  // namespace qbc::runtime
