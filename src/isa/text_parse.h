// Internal to the text parser: one instruction line (text_parse_instr.cpp), used by the
// bundle parser (text_parser.cpp).
#pragma once

#include <string>

#include "text_cursor.h"

namespace qbc::isa::text {

/// An instruction with its debug notes by name (the bundle parser numbers them).
struct ParsedInstr {
  Instr instr;
  std::string node;  ///< "" when the line names none
  std::string pass;  ///< "" when the line names none
};

/// Parses "IDX QUEUE MNEMONIC field=value... [; node  (pass)  wait=.. signal=..]" from `c`
/// (after the indentation). Loops print '-' as their queue.
Status parse_instr(Cursor& c, const BufferNames& names, ParsedInstr* out);

}  // namespace qbc::isa::text
