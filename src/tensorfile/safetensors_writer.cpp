// safetensors writer (see qbc/tensorfile/safetensors_writer.h).
#include "qbc/tensorfile/safetensors_writer.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <set>
#include <utility>

#include "qbc/support/check.h"
#include "qbc/tensorfile/safetensors_format.h"

namespace qbc::tensorfile {
namespace {

namespace fs = std::filesystem;

/// Writes of at least this size bypass the buffer; smaller ones are batched.
constexpr size_t kBufferBytes = size_t{1} << 20;

StatusOr<uint64_t> checked_byte_size(const TensorSpec& t) {
  uint64_t count = 1;
  for (int64_t d : t.shape) {
    if (d < 0) return invalid_argument("tensor '", t.name, "': negative dim ", d);
    if (__builtin_mul_overflow(count, static_cast<uint64_t>(d), &count)) {
      return invalid_argument("tensor '", t.name, "': element count overflows");
    }
  }
  uint64_t bytes = 0;
  if (__builtin_mul_overflow(count, static_cast<uint64_t>(dtype_size(t.dtype)), &bytes)) {
    return invalid_argument("tensor '", t.name, "': byte size overflows");
  }
  return bytes;
}

// Checks names, sorts `tensors` into file order and fills `sizes`; returns the padded header.
StatusOr<std::string> build_header(std::vector<TensorSpec>& tensors,
                                   const std::map<std::string, std::string>& metadata,
                                   std::vector<uint64_t>* sizes) {
  std::set<std::string_view> seen;
  for (const TensorSpec& t : tensors) {
    if (t.name.empty()) return invalid_argument("tensor with an empty name");
    if (t.name == "__metadata__") return invalid_argument("tensor name '__metadata__' is reserved");
    if (!seen.insert(t.name).second) return invalid_argument("duplicate tensor '", t.name, "'");
  }
  // The reference writer's order: larger elements first, so every tensor stays aligned to its
  // element size (the data area starts 8-byte aligned), then by name.
  std::sort(tensors.begin(), tensors.end(), [](const TensorSpec& a, const TensorSpec& b) {
    const size_t sa = dtype_size(a.dtype), sb = dtype_size(b.dtype);
    return sa != sb ? sa > sb : a.name < b.name;
  });
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  sizes->clear();
  for (const TensorSpec& t : tensors) {
    QBC_ASSIGN_OR_RETURN(uint64_t bytes, checked_byte_size(t));
    uint64_t end = 0;
    if (__builtin_add_overflow(offset, bytes, &end)) {
      return invalid_argument("tensor '", t.name, "': total data size overflows");
    }
    header[t.name] = {{"dtype", std::string(dtype_name(t.dtype))},
                      {"shape", t.shape},
                      {"data_offsets", {offset, end}}};
    sizes->push_back(bytes);
    offset = end;
  }
  std::string text;
  try {
    text = header.dump();
  } catch (const nlohmann::json::exception& e) {  // e.g. a name that is not UTF-8
    return invalid_argument("cannot encode header: ", e.what());
  }
  // Pad with spaces so the data area starts 8-byte aligned, like the reference writer.
  text.append((8 - text.size() % 8) % 8, ' ');
  if (text.size() > kMaxSafetensorsHeaderBytes) {
    return invalid_argument("header of ", text.size(), " bytes exceeds the limit of ",
                            kMaxSafetensorsHeaderBytes);
  }
  return text;
}

}  // namespace

// --- SafetensorsStreamWriter -----------------------------------------------------------------

StatusOr<SafetensorsStreamWriter> SafetensorsStreamWriter::create(
    const fs::path& path, std::vector<TensorSpec> tensors,
    const std::map<std::string, std::string>& metadata) {
  SafetensorsStreamWriter w;
  w.path_ = path;
  w.tmp_path_ = path.string() + ".tmp";
  StatusOr<std::string> header = build_header(tensors, metadata, &w.sizes_);
  if (!header.ok()) return header.status().with_context(path.string());
  w.tensors_ = std::move(tensors);
  w.header_bytes_ = 8 + header->size();

  w.fd_ = ::open(w.tmp_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
  if (w.fd_ < 0) {
    return invalid_argument(path.string(), ": cannot create ", w.tmp_path_.string(), ": ",
                            std::strerror(errno));
  }
  w.buffer_.reserve(kBufferBytes);
  uint8_t len[8];
  const uint64_t header_size = header->size();
  for (int b = 0; b < 8; ++b) len[b] = static_cast<uint8_t>(header_size >> (8 * b));
  QBC_RETURN_IF_ERROR(w.raw_write(len, sizeof(len)));
  QBC_RETURN_IF_ERROR(w.raw_write(header->data(), header->size()));
  return w;
}

SafetensorsStreamWriter::SafetensorsStreamWriter(SafetensorsStreamWriter&& other) noexcept
    : path_(std::move(other.path_)),
      tmp_path_(std::move(other.tmp_path_)),
      tensors_(std::move(other.tensors_)),
      sizes_(std::move(other.sizes_)),
      header_bytes_(other.header_bytes_),
      fd_(std::exchange(other.fd_, -1)),
      buffer_(std::move(other.buffer_)),
      next_(other.next_),
      written_(other.written_),
      started_(other.started_),
      finished_(other.finished_),
      error_(std::move(other.error_)) {}

SafetensorsStreamWriter& SafetensorsStreamWriter::operator=(
    SafetensorsStreamWriter&& other) noexcept {
  if (this == &other) return *this;
  discard();
  path_ = std::move(other.path_);
  tmp_path_ = std::move(other.tmp_path_);
  tensors_ = std::move(other.tensors_);
  sizes_ = std::move(other.sizes_);
  header_bytes_ = other.header_bytes_;
  fd_ = std::exchange(other.fd_, -1);
  buffer_ = std::move(other.buffer_);
  next_ = other.next_;
  written_ = other.written_;
  started_ = other.started_;
  finished_ = other.finished_;
  error_ = std::move(other.error_);
  return *this;
}

SafetensorsStreamWriter::~SafetensorsStreamWriter() { discard(); }

uint64_t SafetensorsStreamWriter::file_size() const {
  uint64_t total = header_bytes_;
  for (uint64_t s : sizes_) total += s;
  return total;
}

void SafetensorsStreamWriter::discard() {
  if (fd_ < 0) return;
  ::close(fd_);
  fd_ = -1;
  ::unlink(tmp_path_.c_str());
}

Status SafetensorsStreamWriter::fail(Status status) {
  error_ = std::move(status);
  discard();  // A failed file is never useful: remove it now, not only at destruction.
  return error_;
}

Status SafetensorsStreamWriter::flush_buffer() {
  const uint8_t* p = buffer_.data();
  size_t left = buffer_.size();
  while (left > 0) {
    const ssize_t n = ::write(fd_, p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      return fail(invalid_argument(path_.string(), ": write to ", tmp_path_.string(),
                                   " failed: ", std::strerror(n < 0 ? errno : EIO)));
    }
    p += n;
    left -= static_cast<size_t>(n);
  }
  buffer_.clear();
  return ok_status();
}

Status SafetensorsStreamWriter::raw_write(const void* data, size_t size) {
  const auto* bytes = static_cast<const uint8_t*>(data);
  if (buffer_.size() + size <= kBufferBytes) {
    buffer_.insert(buffer_.end(), bytes, bytes + size);
    return ok_status();
  }
  QBC_RETURN_IF_ERROR(flush_buffer());
  if (size < kBufferBytes) {
    buffer_.insert(buffer_.end(), bytes, bytes + size);
    return ok_status();
  }
  while (size > 0) {
    const ssize_t n = ::write(fd_, bytes, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      return fail(invalid_argument(path_.string(), ": write to ", tmp_path_.string(),
                                   " failed: ", std::strerror(n < 0 ? errno : EIO)));
    }
    bytes += n;
    size -= static_cast<size_t>(n);
  }
  return ok_status();
}

Status SafetensorsStreamWriter::usable() const {
  if (!error_.ok()) return error_;
  if (finished_) return failed_precondition(path_.string(), ": writer already finished");
  if (fd_ < 0) return failed_precondition("safetensors writer was moved from");
  return ok_status();
}

Status SafetensorsStreamWriter::begin(std::string_view name) {
  if (started_) {
    const std::string& cur = tensors_[next_].name;
    if (cur == name) {
      return fail(invalid_argument(path_.string(), ": tensor '", name, "' is written twice"));
    }
    if (written_ != sizes_[next_]) {
      return fail(invalid_argument(path_.string(), ": tensor '", cur, "' got ", written_, " of ",
                                   sizes_[next_], " bytes before tensor '", name, "' was started"));
    }
    ++next_;
    started_ = false;
    written_ = 0;
  }
  // Tensors without bytes may be skipped: their position does not matter.
  size_t i = next_;
  while (i < tensors_.size() && tensors_[i].name != name && sizes_[i] == 0) ++i;
  if (i == tensors_.size() || tensors_[i].name != name) {
    const bool known = std::any_of(tensors_.begin(), tensors_.end(),
                                   [&](const TensorSpec& t) { return t.name == name; });
    if (!known) {
      return fail(invalid_argument(path_.string(), ": tensor '", name, "' is not in the header"));
    }
    if (next_ == tensors_.size()) {
      return fail(invalid_argument(path_.string(), ": tensor '", name,
                                   "' written after all tensors were complete"));
    }
    return fail(invalid_argument(path_.string(), ": tensor '", name,
                                 "' written out of order: expected tensor '", tensors_[next_].name,
                                 "' next (file order: descending element size, then name)"));
  }
  next_ = i;
  started_ = true;
  return ok_status();
}

Status SafetensorsStreamWriter::append(std::string_view name, const void* data, size_t size) {
  QBC_RETURN_IF_ERROR(usable());
  QBC_RETURN_IF_ERROR(begin(name));
  if (size != sizes_[next_]) {
    const TensorSpec& t = tensors_[next_];
    return fail(invalid_argument(path_.string(), ": tensor '", name, "': shape and ",
                                 dtype_name(t.dtype), " need ", sizes_[next_], " bytes, got ",
                                 size));
  }
  QBC_RETURN_IF_ERROR(raw_write(data, size));
  written_ = size;
  return ok_status();
}

Status SafetensorsStreamWriter::write(std::string_view name, const void* data, size_t size) {
  QBC_RETURN_IF_ERROR(usable());
  if (!started_ || tensors_[next_].name != name) QBC_RETURN_IF_ERROR(begin(name));
  if (size > sizes_[next_] - written_) {
    return fail(invalid_argument(path_.string(), ": tensor '", name, "': ", written_ + size,
                                 " bytes written exceed its size of ", sizes_[next_], " bytes"));
  }
  QBC_RETURN_IF_ERROR(raw_write(data, size));
  written_ += size;
  return ok_status();
}

Status SafetensorsStreamWriter::finish() {
  QBC_RETURN_IF_ERROR(usable());
  // Every tensor from next_ on must be complete (the current one) or have no bytes.
  for (size_t i = next_; i < tensors_.size(); ++i) {
    const uint64_t have = (i == next_ && started_) ? written_ : 0;
    if (have != sizes_[i]) {
      return fail(invalid_argument(path_.string(), ": tensor '", tensors_[i].name, "' got ", have,
                                   " of ", sizes_[i], " bytes at finish()"));
    }
  }
  QBC_RETURN_IF_ERROR(flush_buffer());
  if (::fsync(fd_) != 0) {
    return fail(invalid_argument(path_.string(), ": fsync of ", tmp_path_.string(),
                                 " failed: ", std::strerror(errno)));
  }
  const int fd = std::exchange(fd_, -1);
  if (::close(fd) != 0) {
    const int err = errno;
    ::unlink(tmp_path_.c_str());
    return fail(invalid_argument(path_.string(), ": close of ", tmp_path_.string(),
                                 " failed: ", std::strerror(err)));
  }
  if (::rename(tmp_path_.c_str(), path_.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp_path_.c_str());
    return fail(invalid_argument(path_.string(), ": cannot rename ", tmp_path_.string(),
                                 " into place: ", std::strerror(err)));
  }
  finished_ = true;
  return ok_status();
}

// --- In-memory helpers ---------------------------------------------------------------------

TensorToWrite make_tensor(std::string name, DType dtype, std::vector<int64_t> shape,
                          const std::vector<float>& values) {
  TensorToWrite t{std::move(name), dtype, std::move(shape), {}};
  switch (dtype) {
    case DType::kF32:
      t.data.resize(values.size() * 4);
      if (!values.empty()) std::memcpy(t.data.data(), values.data(), t.data.size());
      break;
    case DType::kF16:
    case DType::kBF16:
      t.data.resize(values.size() * 2);
      for (size_t i = 0; i < values.size(); ++i) {
        const uint16_t bits =
            dtype == DType::kF16 ? f32_to_fp16(values[i]) : f32_to_bf16(values[i]);
        std::memcpy(t.data.data() + 2 * i, &bits, 2);
      }
      break;
    default:
      QBC_CHECK(false) << "make_tensor supports F32, F16 and BF16, not " << dtype_name(dtype);
  }
  return t;
}

Status write_safetensors(const fs::path& path, const std::vector<TensorToWrite>& tensors,
                         const std::map<std::string, std::string>& metadata) {
  std::vector<TensorSpec> specs;
  specs.reserve(tensors.size());
  for (const TensorToWrite& t : tensors) specs.push_back(TensorSpec{t.name, t.dtype, t.shape});
  QBC_ASSIGN_OR_RETURN(SafetensorsStreamWriter writer,
                       SafetensorsStreamWriter::create(path, std::move(specs), metadata));
  // Names are unique now. Check every size before writing anything.
  std::map<std::string_view, const TensorToWrite*> by_name;
  for (const TensorToWrite& t : tensors) by_name[t.name] = &t;
  std::vector<const TensorToWrite*> in_order;
  for (const TensorSpec& spec : writer.tensors()) {
    const auto it = by_name.find(spec.name);
    QBC_CHECK(it != by_name.end()) << "writer lost tensor '" << spec.name << "'";
    in_order.push_back(it->second);
  }
  for (size_t i = 0; i < in_order.size(); ++i) {
    const TensorToWrite& t = *in_order[i];
    if (t.data.size() != writer.byte_size(i)) {
      return invalid_argument(path.string(), ": tensor '", t.name, "': shape and ",
                              dtype_name(t.dtype), " need ", writer.byte_size(i),
                              " bytes, data has ", t.data.size());
    }
  }
  for (const TensorToWrite* t : in_order) {
    QBC_RETURN_IF_ERROR(writer.append(t->name, t->data.data(), t->data.size()));
  }
  return writer.finish();
}

}  // namespace qbc::tensorfile
