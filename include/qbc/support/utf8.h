// UTF-8 validation shared by every reader whose text can reach a JSON writer (nlohmann refuses
// to dump a string that is not UTF-8, so such text is refused where it is read, with its
// location, instead of failing later as an internal error).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "qbc/support/status.h"

namespace qbc {

/// The byte offset of the first byte of `s` that does not start (or continue) a well-formed
/// UTF-8 sequence, or std::string_view::npos when all of `s` is valid. Well-formed means
/// RFC 3629: no overlong forms, no surrogates (U+D800..U+DFFF), nothing past U+10FFFF; the
/// rules nlohmann's writer and protobuf's proto3 strings apply.
size_t utf8_invalid_at(std::string_view s);

/// True when utf8_invalid_at(s) is npos.
inline bool is_valid_utf8(std::string_view s) {
  return utf8_invalid_at(s) == std::string_view::npos;
}

/// The length of the well-formed UTF-8 sequence at `pos` of `s`, or 0 when none starts there.
size_t utf8_valid_length(std::string_view s, size_t pos);

/// kInvalidArgument when `text`, the contents of a text file `source`, is not UTF-8:
/// "<source>:<line>:<column>: <what> is not valid UTF-8 (byte 0xNN)", line and column 1-based,
/// the column counted in bytes. OK otherwise.
Status check_utf8_text(std::string_view text, std::string_view source, std::string_view what);

/// kInvalidArgument when `value`, a string read from a binary file or a command line, is not
/// UTF-8: "<what> is not valid UTF-8 (byte 0xNN at offset N of M)"; the caller adds where.
Status check_utf8_value(std::string_view value, std::string_view what);

}  // namespace qbc
