// Content hashes for provenance: XXH3-128 (xxHash) of byte ranges and whole files.
//
// XXH3-128 is not cryptographic; it identifies model files in build manifests and caches, where
// speed matters (a 16 GB checkpoint hashes in a few seconds from the page cache). Digests are
// written as 32 lower-case hex digits in xxHash's canonical (big-endian) order, the same text
// `xxhsum -H2` and Python's `xxhash.xxh3_128_hexdigest()` print.
#pragma once

#include <cstddef>
#include <filesystem>
#include <string>

#include "qbc/support/status.h"

namespace qbc {

/// The XXH3-128 digest (seed 0) of `size` bytes at `data`, as 32 lower-case hex digits.
/// `data` may be null when `size` is 0.
std::string xxh3_128_bytes(const void* data, size_t size);

/// The XXH3-128 digest of the whole file at `path`, as xxh3_128_bytes() would give for its
/// contents. Streams the file in 4 MiB chunks, so memory stays small for any file size.
/// Errors name the path: kNotFound when it does not exist, kInvalidArgument when it is not a
/// regular file or cannot be read.
StatusOr<std::string> xxh3_128_file(const std::filesystem::path& path);

}  // namespace qbc
