// Quoting values from input files in error messages: a bad value is shown by a short prefix, never
// echoed whole (a 20 MB string in a config must not become a 20 MB error message).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace qbc {

/// The longest prefix of a value an error message quotes by default.
inline constexpr size_t kQuotePrefixBytes = 64;

/// `value` in single quotes, for an error message. A value longer than `max` bytes is cut after at
/// most `max` bytes (at a UTF-8 character boundary) and shown as 'prefix…' (N bytes). Control
/// characters and non-UTF-8 bytes are written as \xNN: a message stays one line of UTF-8.
std::string quote_prefix(std::string_view value, size_t max = kQuotePrefixBytes);

/// The same without the quotes: for text that is already framed (a list, a dump).
std::string clip_prefix(std::string_view value, size_t max = kQuotePrefixBytes);

}  // namespace qbc
