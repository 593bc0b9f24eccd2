// SafetensorsCheckpoint: one tensor table over a single file or a sharded
// checkpoint described by model.safetensors.index.json:
//   {"metadata": {...}, "weight_map": {"<tensor>": "<shard file name>", ...}}
#include <algorithm>
#include <fstream>
#include <map>
#include <sstream>
#include <system_error>

#include "qbc/frontend/safetensors.h"
#include "qbc/support/quote.h"
#include "safetensors_json.h"

namespace qbc::frontend {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;

constexpr uint64_t kMaxIndexBytes = 256ull << 20;

StatusOr<std::string> read_small_file(const fs::path& path) {
  std::error_code ec;
  const uintmax_t size = fs::file_size(path, ec);
  if (ec) return not_found(path.string(), ": cannot read: ", ec.message());
  if (size > kMaxIndexBytes) {
    return invalid_argument(path.string(), ": ", size, " bytes is too large for an index file");
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) return invalid_argument(path.string(), ": cannot open");
  std::ostringstream contents;
  contents << in.rdbuf();
  if (in.bad()) return data_loss(path.string(), ": read error");
  return contents.str();
}

bool ends_with(const std::string& s, std::string_view suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Shard names must be plain relative paths that stay inside the index folder.
bool is_safe_shard_name(const std::string& name) {
  if (name.empty() || name.find('\0') != std::string::npos) return false;
  const fs::path p(name);
  if (p.is_absolute() || p.has_root_name()) return false;
  for (const fs::path& part : p) {
    if (part == "..") return false;
  }
  return true;
}

// Picks the file(s) to load for a folder.
StatusOr<fs::path> resolve_folder(const fs::path& dir) {
  std::error_code ec;
  if (fs::exists(dir / "model.safetensors.index.json", ec)) {
    return dir / "model.safetensors.index.json";
  }
  if (fs::exists(dir / "model.safetensors", ec)) return dir / "model.safetensors";
  std::vector<fs::path> candidates;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (ends_with(name, ".safetensors.index.json")) {
      candidates.push_back(it->path());
    } else if (it->path().extension() == ".safetensors") {
      candidates.push_back(it->path());
    }
  }
  if (ec) return invalid_argument(dir.string(), ": cannot list folder: ", ec.message());
  if (candidates.size() == 1) return candidates[0];
  if (candidates.empty()) return not_found(dir.string(), ": no safetensors file in folder");
  return invalid_argument(dir.string(), ": ", candidates.size(),
                          " safetensors files and no model.safetensors.index.json");
}

}  // namespace

const SafetensorsTensor* SafetensorsCheckpoint::find(std::string_view name) const {
  auto it =
      std::lower_bound(tensors_.begin(), tensors_.end(), name,
                       [](const SafetensorsTensor& t, std::string_view n) { return t.name < n; });
  return it != tensors_.end() && it->name == name ? &*it : nullptr;
}

StatusOr<const SafetensorsTensor*> SafetensorsCheckpoint::get(std::string_view name) const {
  if (const SafetensorsTensor* t = find(name)) return t;
  return not_found(path_.string(), ": no tensor '", name, "'");
}

Status SafetensorsCheckpoint::read_f32(std::string_view name, std::vector<float>* out) const {
  QBC_ASSIGN_OR_RETURN(const SafetensorsTensor* t, get(name));
  return frontend::read_f32(*t, out);
}

StatusOr<SafetensorsCheckpoint> SafetensorsCheckpoint::open(const fs::path& path) {
  SafetensorsCheckpoint ckpt;
  ckpt.path_ = path;
  std::error_code ec;
  fs::path target = path;
  if (fs::is_directory(path, ec)) {
    QBC_ASSIGN_OR_RETURN(target, resolve_folder(path));
  }
  if (!ends_with(target.filename().string(), ".index.json")) {
    QBC_ASSIGN_OR_RETURN(SafetensorsFile file, SafetensorsFile::open(target));
    ckpt.tensors_ = file.tensors();
    ckpt.shards_.push_back(std::move(file));
    return ckpt;
  }

  const std::string where = target.string();
  QBC_ASSIGN_OR_RETURN(std::string text, read_small_file(target));
  StatusOr<Json> parsed = parse_json_strict(text);
  if (!parsed.ok()) return parsed.status().with_context(where);
  const Json& index = *parsed;
  if (!index.is_object()) {
    return invalid_argument(where, ": index is a JSON ", index.type_name(), ", expected an object");
  }
  const auto map_it = index.find("weight_map");
  if (map_it == index.end() || !map_it->is_object()) {
    return invalid_argument(where, ": missing or non-object 'weight_map'");
  }
  // Shard file name -> the tensors the index places there.
  std::map<std::string, std::vector<std::string>> wanted;
  for (const auto& [tensor, shard] : map_it->items()) {
    if (!shard.is_string()) {
      return invalid_argument(where, ": tensor ", quote_prefix(tensor), ": shard is a JSON ",
                              shard.type_name(),
                              ", expected a file name");
    }
    const std::string& shard_name = shard.get_ref<const std::string&>();
    if (!is_safe_shard_name(shard_name)) {
      return invalid_argument(where, ": tensor ", quote_prefix(tensor), ": shard name ",
                              quote_prefix(shard_name), " is not a relative path inside the checkpoint folder");
    }
    wanted[shard_name].push_back(tensor);
  }

  const fs::path dir = target.parent_path();
  for (const auto& [shard_name, names] : wanted) {
    const fs::path shard_path = dir / shard_name;
    StatusOr<SafetensorsFile> shard = SafetensorsFile::open(shard_path);
    if (!shard.ok()) {
      if (shard.status().code() == Code::kNotFound) {
        return data_loss(where, ": tensor ", quote_prefix(names.front()), ": shard ",
                         quote_prefix(shard_name), " does not exist (", shard_path.string(), ")");
      }
      return shard.status().with_context(where);
    }
    for (const std::string& name : names) {
      const SafetensorsTensor* t = shard->find(name);
      if (t == nullptr) {
        return data_loss(where, ": tensor ", quote_prefix(name), " is listed in shard ",
                         quote_prefix(shard_name), " but ",
                         shard_path.string(), " does not contain it");
      }
      ckpt.tensors_.push_back(*t);
    }
    ckpt.shards_.push_back(std::move(*shard));
  }
  // Tensors in a shard but not in the weight map are not part of the model; the
  // index is the source of truth. Names are unique: the index has no duplicate keys.
  std::sort(ckpt.tensors_.begin(), ckpt.tensors_.end(),
            [](const SafetensorsTensor& a, const SafetensorsTensor& b) { return a.name < b.name; });
  return ckpt;
}

}  // namespace qbc::frontend
