// Helpers shared by qbc's tests.
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "qbc/support/status.h"

namespace qbc::testing {

/// The shared test assets folder: $QBC_SHARED, else ../shared next to the source tree.
std::filesystem::path shared_dir();

/// The repository root ($QBC_SOURCE_DIR, else the configured source tree).
std::filesystem::path source_dir();

/// A fresh empty temporary directory, unique per call, removed at process exit.
std::filesystem::path temp_dir();

/// Reads a whole file; fails the test when it cannot.
std::string read_file(const std::filesystem::path& path);
/// Writes a whole file, creating parent folders.
void write_file(const std::filesystem::path& path, const std::string& contents);

/// The result of running the qbc binary or another command.
struct RunResult {
  int exit_code = -1;
  std::string out;  ///< stdout
  std::string err;  ///< stderr
};
/// Runs `command` (any /bin/sh text) with stdin from /dev/null, capturing stdout and stderr.
RunResult run_command(const std::string& command);
/// The qbc binary: $QBC_BINARY, else the built one.
std::string qbc_binary();
/// Runs the qbc binary ($QBC_BINARY, else the built one) with `args` through /bin/sh
/// (args are passed verbatim, quote as needed: see shell_quote()).
RunResult run_qbc(const std::string& args);

/// `path` as one /bin/sh word: single-quoted, each embedded ' written as '\''.
std::string shell_quote(const std::filesystem::path& path);

/// Whether `haystack` contains `needle`.
inline bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

}  // namespace qbc::testing

/// Resolves `rel` under the shared assets folder into `var` (a std::filesystem::path).
/// When it is missing: fails the test if $CI is set, else skips it.
#define QBC_REQUIRE_SHARED(var, rel)                                             \
  const std::filesystem::path var = ::qbc::testing::shared_dir() / (rel);        \
  if (!std::filesystem::exists(var)) {                                           \
    if (std::getenv("CI") != nullptr) FAIL() << "shared asset missing: " << var; \
    GTEST_SKIP() << "shared asset missing: " << var;                             \
  }

namespace qbc::testing {
/// The status of a Status or StatusOr, for assertion messages.
inline const Status& status_of(const Status& s) { return s; }
template <typename T>
Status status_of(const StatusOr<T>& s) {
  return s.status();
}
}  // namespace qbc::testing

/// Asserts that a Status / StatusOr is OK, printing its message otherwise.
/// Binds by reference, so move-only values are fine.
#define QBC_ASSERT_OK(expr)                                                    \
  do {                                                                         \
    const auto& qbc_s_ = (expr);                                               \
    ASSERT_TRUE(qbc_s_.ok()) << ::qbc::testing::status_of(qbc_s_).to_string(); \
  } while (0)
