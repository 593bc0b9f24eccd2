// Shared helpers of the libFuzzer targets (fuzz/README section in docs/testing.md).
#pragma once

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>

#include "qbc/support/status.h"

namespace qbc::fuzz {

/// A file of this process holding the current input, for the readers that take paths. Kept in
/// $TMPDIR (tmpfs on most systems) under a name with the pid, rewritten for each input.
inline std::filesystem::path write_input(const uint8_t* data, size_t size, std::string_view name) {
  static const std::filesystem::path dir = [] {
    const char* tmp = std::getenv("TMPDIR");
    std::filesystem::path d = std::filesystem::path(tmp != nullptr ? tmp : "/tmp") /
                              ("qbc-fuzz-" + std::to_string(::getpid()));
    std::filesystem::create_directories(d);
    return d;
  }();
  const std::filesystem::path p = dir / std::string(name);
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  return p;
}

/// A reader's result must be OK or a user-facing error: never kInternal (exit 70), and never an
/// error message that echoes a large part of the input.
inline void check(const Status& s) {
  if (s.ok()) return;
  if (s.code() == Code::kInternal) {
    std::fprintf(stderr, "internal error from a reader: %s\n", s.message().c_str());
    std::abort();
  }
  if (s.message().size() > 4096) {
    std::fprintf(stderr, "error message of %zu bytes: %.300s...\n", s.message().size(),
                 s.message().c_str());
    std::abort();
  }
}

}  // namespace qbc::fuzz
