#include "qbc/quant/checkpoint.h"

#include <cstdio>

#include "qbc/support/file_util.h"
#include "qbc/support/hash.h"
#include "qbc/support/logging.h"

namespace qbc::quant {
namespace {

namespace fs = std::filesystem;

constexpr std::string_view kMagic = "QBCCKPT1\n";
constexpr const char* kFingerprintFile = "fingerprint";

/// "QBCCKPT1\n" KEY "\n" DIGEST "\n" SIZE(16 hex) "\n": the header before the payload.
std::string header(const std::string& key, std::string_view payload) {
  char size[17];
  std::snprintf(size, sizeof(size), "%016zx", payload.size());
  return std::string(kMagic) + key + "\n" + xxh3_128_bytes(payload.data(), payload.size()) + "\n" +
         size + "\n";
}

/// The fingerprint a folder's `fingerprint` file names (its first line), or "".
std::string stored_fingerprint(const fs::path& dir) {
  StatusOr<std::string> text = read_text_file((dir / kFingerprintFile).string());
  if (!text.ok()) return "";
  return text->substr(0, text->find('\n'));
}

bool is_temporary(const fs::path& p) {
  const std::string name = p.filename().string();
  return !name.empty() && name[0] == '.' && name.find(".tmp.") != std::string::npos;
}

bool is_checkpoint(const fs::path& p) {
  const std::string n = p.filename().string();
  const std::string suffix = kCheckpointSuffix;
  return n.size() > suffix.size() &&
         n.compare(n.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

bool holds_checkpoints(const fs::path& dir) {
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (is_checkpoint(e.path())) return true;
  return false;
}

StatusOr<CheckpointDir> CheckpointDir::open(const fs::path& dir, const std::string& fingerprint,
                                            const std::string& inputs) {
  std::error_code ec;
  if (fs::exists(dir, ec) && !fs::is_directory(dir, ec))
    return invalid_argument(dir.string(), ": exists and is not a checkpoint folder");
  if (fs::is_directory(dir, ec)) {
    const std::string old = stored_fingerprint(dir);
    const bool stale = old != fingerprint;
    if (stale && holds_checkpoints(dir)) {
      log("resume").warn("removed stale checkpoints in {} (made for other inputs: {})",
                         dir.string(), old.empty() ? std::string("unknown") : old);
    }
    // Only what this class writes: the folder may hold a run's work files too.
    for (const auto& e : fs::directory_iterator(dir, ec)) {
      if (is_temporary(e.path()) || (stale && is_checkpoint(e.path()))) fs::remove(e.path(), ec);
    }
  }
  fs::create_directories(dir, ec);
  if (ec)
    return invalid_argument(dir.string(), ": cannot create the checkpoint folder: ", ec.message());
  if (stored_fingerprint(dir) != fingerprint) {
    QBC_RETURN_IF_ERROR(
        write_file_atomic((dir / kFingerprintFile).string(), fingerprint + "\n" + inputs + "\n"));
  }
  return CheckpointDir(dir, fingerprint);
}

Status CheckpointDir::save(const std::string& name, const std::string& key,
                           std::string_view payload) const {
  std::string bytes = header(key, payload);
  bytes.append(payload.data(), payload.size());
  return write_file_atomic((dir_ / name).string(), bytes)
      .with_context("checkpoint ", (dir_ / name).string());
}

std::optional<std::string> CheckpointDir::load(const std::string& name,
                                               const std::string& key) const {
  const fs::path p = dir_ / name;
  std::error_code ec;
  if (!fs::is_regular_file(p, ec)) return std::nullopt;
  StatusOr<std::string> bytes = read_text_file(p.string());
  if (!bytes.ok()) return std::nullopt;
  // Header: magic, key, digest, size, each on its own line.
  const size_t head = kMagic.size() + 33 + 33 + 17;
  if (bytes->size() < head || bytes->compare(0, kMagic.size(), kMagic) != 0) {
    log("resume").warn("ignored checkpoint {}: not a qbc checkpoint", p.string());
    return std::nullopt;
  }
  if (bytes->compare(kMagic.size(), key.size(), key) != 0) return std::nullopt;  // other inputs
  std::string_view payload(*bytes);
  payload.remove_prefix(head);
  if (bytes->compare(0, head, header(key, payload)) != 0) {
    log("resume").warn("ignored checkpoint {}: its digest or size does not match its contents",
                       p.string());
    return std::nullopt;
  }
  return std::string(payload);
}

void CheckpointDir::remove(const std::string& name) const {
  std::error_code ec;
  fs::remove(dir_ / name, ec);
}

bool CheckpointDir::has_checkpoints() const { return holds_checkpoints(dir_); }

}  // namespace qbc::quant
