// safetensors writer (see qbc/frontend/safetensors_writer.h).
#include "qbc/frontend/safetensors_writer.h"

#include <unistd.h>

#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <system_error>

#include "qbc/support/check.h"

namespace qbc::frontend {
namespace {

namespace fs = std::filesystem;

StatusOr<uint64_t> checked_byte_size(const TensorToWrite& t) {
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

StatusOr<std::string> build_header(const std::vector<TensorToWrite>& tensors,
                                   const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::set<std::string> seen;
  uint64_t offset = 0;
  for (const TensorToWrite& t : tensors) {
    if (t.name.empty()) return invalid_argument("tensor with an empty name");
    if (t.name == "__metadata__") return invalid_argument("tensor name '__metadata__' is reserved");
    if (!seen.insert(t.name).second) return invalid_argument("duplicate tensor '", t.name, "'");
    QBC_ASSIGN_OR_RETURN(uint64_t bytes, checked_byte_size(t));
    if (bytes != t.data.size()) {
      return invalid_argument("tensor '", t.name, "': shape and ", dtype_name(t.dtype), " need ",
                              bytes, " bytes, data has ", t.data.size());
    }
    header[t.name] = {{"dtype", std::string(dtype_name(t.dtype))},
                      {"shape", t.shape},
                      {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string text;
  try {
    text = header.dump();
  } catch (const nlohmann::json::exception& e) {  // e.g. a name that is not UTF-8
    return invalid_argument("cannot encode header: ", e.what());
  }
  // Pad with spaces so the data area starts 8-byte aligned, like the reference writer.
  text.append((8 - text.size() % 8) % 8, ' ');
  return text;
}

}  // namespace

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
  StatusOr<std::string> header = build_header(tensors, metadata);
  if (!header.ok()) return header.status().with_context(path.string());

  const fs::path tmp = path.string() + ".tmp." + std::to_string(::getpid());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) return invalid_argument(path.string(), ": cannot create ", tmp.string());
    const uint64_t header_size = header->size();
    out.write(reinterpret_cast<const char*>(&header_size), sizeof(header_size));
    out.write(header->data(), static_cast<std::streamsize>(header->size()));
    for (const TensorToWrite& t : tensors) {
      out.write(reinterpret_cast<const char*>(t.data.data()),
                static_cast<std::streamsize>(t.data.size()));
    }
    out.flush();
    if (!out) {
      std::error_code ignored;
      fs::remove(tmp, ignored);
      return invalid_argument(path.string(), ": write to ", tmp.string(), " failed");
    }
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) {
    std::error_code ignored;
    fs::remove(tmp, ignored);
    return invalid_argument(path.string(), ": cannot rename ", tmp.string(), ": ", ec.message());
  }
  return ok_status();
}

}  // namespace qbc::frontend
