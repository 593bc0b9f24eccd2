#include "qbc/quant/weight_store.h"

namespace qbc::quant {

WeightStore::WeightStore(ir::WeightReader source) : source_(std::move(source)) {}

WeightStore::~WeightStore() {
  if (scratch_ != nullptr) std::fclose(scratch_);
}

Status WeightStore::read_slot(const std::string& name, const Slot& slot,
                              std::vector<float>* out) const {
  out->resize(slot.count);
  if (slot.count == 0) return ok_status();
  if (std::fseek(scratch_, static_cast<long>(slot.offset * sizeof(float)), SEEK_SET) != 0 ||
      std::fread(out->data(), sizeof(float), slot.count, scratch_) != slot.count) {
    return data_loss("rewritten weight '", name, "': cannot read it back from the scratch file");
  }
  return ok_status();
}

Status WeightStore::read(const ir::Weight& w, std::vector<float>* out) const {
  if (!error_.ok()) return error_;
  auto it = slots_.find(w.name);
  if (it != slots_.end()) return read_slot(w.name, it->second, out);
  if (!source_) return not_found("weight '", w.name, "' has no data");
  return source_(w, out);
}

Status WeightStore::write(const std::string& name, const std::vector<float>& values) {
  if (!error_.ok()) return error_;
  if (scratch_ == nullptr) {
    scratch_ = std::tmpfile();  // anonymous: removed by the OS however the process ends
    if (scratch_ == nullptr)
      return error_ = resource_exhausted("cannot create a scratch file for rewritten weights");
  }
  Slot slot;
  auto it = slots_.find(name);
  if (it != slots_.end() && it->second.count == values.size()) {
    slot = it->second;  // same size: rewrite in place
  } else {
    slot.offset = end_;
    slot.count = values.size();
    end_ += values.size();
  }
  if (std::fseek(scratch_, static_cast<long>(slot.offset * sizeof(float)), SEEK_SET) != 0 ||
      std::fwrite(values.data(), sizeof(float), values.size(), scratch_) != values.size() ||
      std::fflush(scratch_) != 0) {
    return error_ = resource_exhausted("cannot store rewritten weight '", name,
                                       "' in the scratch file (", values.size() * sizeof(float),
                                       " bytes; disk full?)");
  }
  slots_[name] = slot;
  return ok_status();
}

bool WeightStore::rewritten(const std::string& name) const { return slots_.count(name) > 0; }

std::vector<std::string> WeightStore::rewritten_names() const {
  std::vector<std::string> out;
  for (const auto& [name, slot] : slots_) out.push_back(name);
  return out;
}

int64_t WeightStore::rewritten_size(const std::string& name) const {
  auto it = slots_.find(name);
  return it == slots_.end() ? 0 : static_cast<int64_t>(it->second.count);
}

std::map<std::string, std::vector<float>> WeightStore::rewritten_weights() const {
  std::map<std::string, std::vector<float>> out;
  for (const auto& [name, slot] : slots_) {
    if (!read_slot(name, slot, &out[name]).ok()) out[name].clear();
  }
  return out;
}

ir::WeightReader WeightStore::reader() const {
  return [this](const ir::Weight& w, std::vector<float>* out) { return read(w, out); };
}

Status check_rewritten_sizes(const ir::Graph& g, const WeightStore& store) {
  QBC_RETURN_IF_ERROR(store.status());
  for (const std::string& name : store.rewritten_names()) {
    const ir::Weight* w = g.find_weight(name);
    if (w == nullptr) continue;  // dropped by a later pass
    const int64_t want = w->type.num_elements();
    const int64_t have = store.rewritten_size(name);
    if (want >= 0 && have != want) {
      return internal_error("weight '", name, "' was rewritten with ", have,
                            " values but its type ", w->type.to_string(), " holds ", want);
    }
  }
  return ok_status();
}

}  // namespace qbc::quant
