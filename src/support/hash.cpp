#include "qbc/support/hash.h"

#include <fcntl.h>
#include <unistd.h>
#include <xxhash.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <system_error>

namespace qbc {
namespace {

constexpr size_t kChunkBytes = size_t{4} << 20;

std::string to_hex(XXH128_hash_t hash) {
  XXH128_canonical_t canonical;
  XXH128_canonicalFromHash(&canonical, hash);
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string hex(2 * sizeof(canonical.digest), '0');
  for (size_t i = 0; i < sizeof(canonical.digest); ++i) {
    hex[2 * i] = kDigits[canonical.digest[i] >> 4];
    hex[2 * i + 1] = kDigits[canonical.digest[i] & 0xF];
  }
  return hex;
}

// Closes a file descriptor on scope exit.
struct FdCloser {
  int fd;
  ~FdCloser() {
    if (fd >= 0) ::close(fd);
  }
};

struct StateDeleter {
  void operator()(XXH3_state_t* state) const { XXH3_freeState(state); }
};

}  // namespace

std::string xxh3_128_bytes(const void* data, size_t size) {
  return to_hex(XXH3_128bits(size == 0 ? "" : data, size));
}

StatusOr<std::string> xxh3_128_file(const std::filesystem::path& path) {
  std::error_code ec;
  const auto status = std::filesystem::status(path, ec);
  if (!std::filesystem::exists(status)) return not_found(path.string(), ": no such file");
  if (!std::filesystem::is_regular_file(status)) {
    return invalid_argument(path.string(), ": not a regular file");
  }
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return invalid_argument(path.string(), ": cannot open: ", std::strerror(errno));
  FdCloser closer{fd};
  // Tell the kernel we read front to back, so it reads ahead aggressively from disk.
  (void)::posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);

  std::unique_ptr<XXH3_state_t, StateDeleter> state(XXH3_createState());
  if (state == nullptr || XXH3_128bits_reset(state.get()) != XXH_OK) {
    return internal_error(path.string(), ": cannot initialize the XXH3 state");
  }
  // The buffer sits in one allocation reused for every chunk; a 4 MiB chunk fits the L2/L3
  // caches of current CPUs, so hashing reads it while it is still hot after the copy.
  std::unique_ptr<char[]> buffer(new char[kChunkBytes]);
  while (true) {
    const ssize_t n = ::read(fd, buffer.get(), kChunkBytes);
    if (n < 0) {
      if (errno == EINTR) continue;
      return invalid_argument(path.string(), ": read failed: ", std::strerror(errno));
    }
    if (n == 0) break;
    if (XXH3_128bits_update(state.get(), buffer.get(), static_cast<size_t>(n)) != XXH_OK) {
      return internal_error(path.string(), ": XXH3 update failed");
    }
  }
  return to_hex(XXH3_128bits_digest(state.get()));
}

}  // namespace qbc
