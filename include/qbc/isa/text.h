// The text form of an NPU program (docs/npu.md "Text form"): the bundle header, the buffer,
// attention and rope tables, then per mode, phase and core one line per instruction,
// indented by loop nesting. Deterministic and stable (golden tests compare it), and never
// fails: a malformed bundle prints with its bad references marked, so the verifier's
// messages can be read against it.
#pragma once

#include <string>

#include "qbc/isa/program.h"

namespace qbc::isa {

/// What the text form includes.
struct PrintOptions {
  bool tables = true;      ///< print_bundle: the header and the buffer, attention, rope tables
  bool debug_info = true;  ///< "; node  (pass)" after each instruction
  bool tokens = true;      ///< "wait=... signal=..." after each instruction
};

/// The whole bundle: header and tables (with `tables`), then every mode's programs.
std::string print_bundle(const Bundle& b, const PrintOptions& opts = {});

/// One program of `b` (or any program over b's buffers): its phase line, then each core's
/// stream. Buffers are named by b's table.
std::string print_program(const Bundle& b, const Program& p, const PrintOptions& opts = {});

/// One instruction's mnemonic and fields, e.g. "dma  dst=%w[+0] src=%W[+0] rows=4
/// row_bytes=64" (no index, queue, indentation or annotations).
std::string print_instr(const Bundle& b, const Instr& in);

}  // namespace qbc::isa
