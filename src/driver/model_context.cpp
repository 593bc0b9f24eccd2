// The trained context of a model and the lengths a configuration takes from it (see
// qbc/driver/model_context.h).
#include "qbc/driver/model_context.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <limits>
#include <sstream>

#include "qbc/driver/generate.h"
#include "qbc/driver/model_loader.h"
#include "qbc/frontend/model_source.h"
#include "qbc/ir/serialize.h"

namespace qbc::driver {
namespace fs = std::filesystem;

namespace {

constexpr const char* kSeq = "llm.attributes.maxSequenceLength";
constexpr const char* kCache = "llm.attributes.maxCacheLength";

std::string origin_text(const config::ResolvedConfig& c, const std::string& key) {
  auto it = c.origins.find(key);
  return it == c.origins.end() ? std::string("default") : it->second.to_string();
}

}  // namespace

TrainedContext trained_context(const frontend::HParams& hp) {
  TrainedContext t{hp.max_position_embeddings, "max_position_embeddings"};
  const frontend::RopeScaling& rs = hp.rope_scaling;
  const bool extends =
      rs.type == frontend::RopeScalingType::kLinear || rs.type == frontend::RopeScalingType::kYarn;
  if (!extends || rs.original_max_position_embeddings <= 0) return t;
  const double scaled =
      std::floor(rs.factor * static_cast<double>(rs.original_max_position_embeddings));
  if (scaled <= static_cast<double>(t.positions) ||
      scaled > static_cast<double>(frontend::kMaxPositions))
    return t;
  std::ostringstream os;
  os << "rope_scaling " << frontend::rope_scaling_name(rs.type) << ": factor " << rs.factor
     << " x original_max_position_embeddings " << rs.original_max_position_embeddings;
  return TrainedContext{static_cast<int64_t>(scaled), os.str()};
}

StatusOr<TrainedContext> model_trained_context(const std::string& path) {
  std::error_code ec;
  if (is_mblt_path(path)) {
    QBC_ASSIGN_OR_RETURN(ir::Graph g, ir::load(path));
    TrainedContext t;
    auto it = g.metadata.find("config.json");
    // A vision tower's graph (no attention over a cache) has no context length: its recorded
    // config.json is the whole VLM's, read by the compile's own checks instead.
    const bool feature_graph = std::none_of(g.nodes().begin(), g.nodes().end(), [](const auto& n) {
      return n.op == ir::Op::kAttention;
    });
    if (it != g.metadata.end() && !it->second.empty() && !feature_graph) {
      QBC_ASSIGN_OR_RETURN(frontend::HParams hp,
                           frontend::parse_hparams(it->second, path + " (config.json at import)"));
      t = trained_context(hp);
    }
    // The graph cannot be lowered for a longer cache than it was built with.
    const int64_t capacity = cache_capacity(g);
    const bool has_cache = capacity > 0 && capacity < std::numeric_limits<int64_t>::max();
    if (has_cache && (t.positions <= 0 || capacity < t.positions))
      t = TrainedContext{capacity, "the KV-cache capacity of " + path};
    return t;
  }
  const fs::path p = fs::absolute(path, ec);
  if (fs::is_directory(p, ec) && fs::is_regular_file(p / "config.json", ec)) {
    QBC_ASSIGN_OR_RETURN(frontend::HParams hp, frontend::load_hparams(p / "config.json"));
    return trained_context(hp);
  }
  if (fs::is_regular_file(p, ec) && p.extension() == ".json") {
    QBC_ASSIGN_OR_RETURN(frontend::HParams hp, frontend::load_hparams(p));
    return trained_context(hp);
  }
  // A .gguf (its metadata only), or whatever the model reader says is wrong with `path`.
  QBC_ASSIGN_OR_RETURN(frontend::ModelSource src, frontend::ModelSource::open(p));
  return trained_context(src.hparams());
}

std::string fit_lengths_to_model(const TrainedContext& trained, config::ResolvedConfig* cfg) {
  if (trained.positions <= 0) return {};
  config::LlmAttributes* a = cfg->options.mutable_llm()->mutable_attributes();
  const int64_t seq = a->max_sequence_length(), cache = a->max_cache_length();
  int64_t new_seq = seq, new_cache = cache;
  if (!config::set_by_user(*cfg, kSeq)) new_seq = std::min<int64_t>(seq, trained.positions);
  if (!config::set_by_user(*cfg, kCache)) {
    // The cache still holds one full call, and a batch LLM's per-core chunk.
    int64_t floor = new_seq;
    if (a->runtime().batch_size() > 1) floor = std::max<int64_t>(floor, a->max_core_data_length());
    new_cache = std::max(std::min<int64_t>(cache, trained.positions), floor);
  }
  if (new_seq == seq && new_cache == cache) return {};
  const std::string why = "model: " + trained.source + " " + std::to_string(trained.positions);
  std::ostringstream note;
  note << "the model was trained for " << trained.positions << " positions (" << trained.source
       << "):";
  if (new_seq != seq) {
    note << " " << kSeq << " " << seq << " (from " << origin_text(*cfg, kSeq) << ") -> " << new_seq
         << ";";
    a->set_max_sequence_length(static_cast<int32_t>(new_seq));
    cfg->origins[kSeq] = config::Origin{why + " (was " + std::to_string(seq) + ")", 0, 0};
  }
  if (new_cache != cache) {
    note << " " << kCache << " " << cache << " (from " << origin_text(*cfg, kCache) << ") -> "
         << new_cache << ";";
    a->set_max_cache_length(static_cast<int32_t>(new_cache));
    cfg->origins[kCache] = config::Origin{why + " (was " + std::to_string(cache) + ")", 0, 0};
  }
  note << " a config file, --set or --context sets a longer one";
  return note.str();
}

}  // namespace qbc::driver
