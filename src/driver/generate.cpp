#include "qbc/driver/generate.h"

#include <algorithm>
#include <limits>

#include "qbc/frontend/gguf_tokenizer.h"
#include "qbc/quant/fakequant.h"

namespace qbc::driver {
StatusOr<std::unique_ptr<ref::Session>> make_session(const LoadedModel& model,
                                                     const ref::SessionOptions& options) {
  const LoadedModel* m = &model;
  return ref::Session::create(
      model.graph,
      [m](const ir::Weight& w, std::vector<float>* out) { return read_weight(*m, w, out); },
      options);
}

bool is_quantized(const ir::Graph& g) {
  for (const ir::Node& n : g.nodes()) {
    if (ir::is_quantized(n)) return true;
  }
  return false;
}

StatusOr<std::unique_ptr<runner::Runner>> make_runner(const LoadedModel& model,
                                                      const ref::SessionOptions& options) {
  if (is_quantized(model.graph)) {
    const LoadedModel* m = &model;
    QBC_ASSIGN_OR_RETURN(std::unique_ptr<quant::FakeQuantSession> s,
                         quant::FakeQuantSession::create(
                             model.graph, [m](const ir::Weight& w, std::vector<float>* out) {
                               return read_weight(*m, w, out);
                             }));
    return std::unique_ptr<runner::Runner>(std::move(s));
  }
  QBC_ASSIGN_OR_RETURN(std::unique_ptr<ref::Session> s, make_session(model, options));
  return std::unique_ptr<runner::Runner>(std::move(s));
}

StatusOr<tokenizer::Tokenizer> load_tokenizer(const LoadedModel& model) {
  const std::filesystem::path& p = model.source->tokenizer_path();
  if (p.empty()) {
    return not_found(model.source->path().string(),
                     ": no tokenizer found (expected tokenizer.json next to "
                     "config.json, or a GGUF vocabulary)");
  }
  if (model.source->format() == "gguf") return frontend::tokenizer_from_gguf(p);
  return tokenizer::Tokenizer::from_hf_dir(p.parent_path());
}

int64_t cache_capacity(const ir::Graph& g) {
  int64_t cap = std::numeric_limits<int64_t>::max();
  for (const ir::Node& n : g.nodes()) {
    if (n.op == ir::Op::kAttention) cap = std::min(cap, n.attrs.get_int("max_cache"));
  }
  return cap;
}

}  // namespace qbc::driver
