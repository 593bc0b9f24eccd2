#include "qbc/tensorfile/safetensors_spill.h"

#include <algorithm>

namespace qbc::tensorfile {

SafetensorsSpillWriter::SafetensorsSpillWriter(std::filesystem::path path)
    : path_(std::move(path)), spill_path_(path_.string() + ".spill") {}

SafetensorsSpillWriter::~SafetensorsSpillWriter() {
  if (spill_ != nullptr) std::fclose(spill_);
  std::error_code ec;
  std::filesystem::remove(spill_path_, ec);
}

Status SafetensorsSpillWriter::add(TensorToWrite t) {
  if (!error_.ok()) return error_;
  if (entries_.count(t.name))
    return invalid_argument(path_.string(), ": tensor '", t.name, "' added twice");
  if (spill_ == nullptr) {
    spill_ = std::fopen(spill_path_.c_str(), "w+b");
    if (spill_ == nullptr)
      return error_ = invalid_argument(spill_path_.string(), ": cannot create the spill file");
  }
  if (!t.data.empty() && std::fwrite(t.data.data(), 1, t.data.size(), spill_) != t.data.size()) {
    return error_ = resource_exhausted(spill_path_.string(), ": write failed for tensor '", t.name,
                                       "' (disk full?)");
  }
  Entry e;
  e.spec = TensorSpec{t.name, t.dtype, t.shape};
  e.offset = offset_;
  e.size = t.data.size();
  offset_ += e.size;
  entries_[t.name] = std::move(e);
  return ok_status();
}

Status SafetensorsSpillWriter::finish(const std::map<std::string, std::string>& metadata) {
  if (!error_.ok()) return error_;
  std::vector<TensorSpec> specs;
  for (const auto& [name, e] : entries_) specs.push_back(e.spec);
  QBC_ASSIGN_OR_RETURN(SafetensorsStreamWriter w,
                       SafetensorsStreamWriter::create(path_, specs, metadata));
  if (spill_ != nullptr && std::fflush(spill_) != 0)
    return resource_exhausted(spill_path_.string(), ": flush failed");
  std::vector<uint8_t> buf(size_t{1} << 24);
  for (const TensorSpec& spec : w.tensors()) {
    const Entry& e = entries_.at(spec.name);
    if (e.size == 0) {
      QBC_RETURN_IF_ERROR(w.append(spec.name, nullptr, 0));
      continue;
    }
    if (std::fseek(spill_, static_cast<long>(e.offset), SEEK_SET) != 0) {
      return data_loss(spill_path_.string(), ": cannot seek to tensor '", spec.name, "'");
    }
    for (uint64_t done = 0; done < e.size;) {
      const size_t chunk = static_cast<size_t>(std::min<uint64_t>(buf.size(), e.size - done));
      if (std::fread(buf.data(), 1, chunk, spill_) != chunk) {
        return data_loss(spill_path_.string(), ": short read of tensor '", spec.name, "'");
      }
      QBC_RETURN_IF_ERROR(w.write(spec.name, buf.data(), chunk));
      done += chunk;
    }
  }
  QBC_RETURN_IF_ERROR(w.finish());
  std::fclose(spill_);
  spill_ = nullptr;
  std::error_code ec;
  std::filesystem::remove(spill_path_, ec);
  return ok_status();
}

}  // namespace qbc::tensorfile
