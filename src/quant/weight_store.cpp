#include "qbc/quant/weight_store.h"

namespace qbc::quant {

WeightStore::WeightStore(ref::WeightReader source) : source_(std::move(source)) {}

Status WeightStore::read(const ir::Weight& w, std::vector<float>* out) const {
  auto it = overlay_.find(w.name);
  if (it != overlay_.end()) {
    *out = it->second;
    return ok_status();
  }
  if (!source_) return not_found("weight '", w.name, "' has no data");
  return source_(w, out);
}

void WeightStore::write(const std::string& name, std::vector<float> values) { overlay_[name] = std::move(values); }

bool WeightStore::rewritten(const std::string& name) const { return overlay_.count(name) > 0; }

ref::WeightReader WeightStore::reader() const {
  return [this](const ir::Weight& w, std::vector<float>* out) { return read(w, out); };
}

Status check_rewritten_sizes(const ir::Graph& g, const WeightStore& store) {
  for (const auto& [name, data] : store.rewritten_weights()) {
    const ir::Weight* w = g.find_weight(name);
    if (w == nullptr) continue;  // dropped by a later pass
    const int64_t want = w->type.num_elements();
    if (want >= 0 && static_cast<int64_t>(data.size()) != want) {
      return internal_error("weight '", name, "' was rewritten with ", data.size(), " values but its type ",
                            w->type.to_string(), " holds ", want);
    }
  }
  return ok_status();
}

}  // namespace qbc::quant
