// The NPU program verifier: the numbered invariants V1..V8 of docs/npu.md ("Verifier"). The
// backend runs it after every pass that changes a Bundle, and the runtime on every file it
// loads, so it is written for hostile input: it never divides by zero, overflows or reads
// out of range, whatever the Bundle holds.
//
// Expressions are evaluated at sample points of the runtime domain (docs/npu.md
// "Evaluation"): start, seq and slot at the vertices of their domain, loop variables at both
// ends of their range (a whole `mod` period at each end where they appear under `mod`).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "qbc/isa/domain.h"
#include "qbc/isa/program.h"
#include "qbc/support/status.h"

namespace qbc::isa {

/// V8: the most instructions one stream may hold.
inline constexpr int64_t kMaxStreamInstrs = int64_t{1} << 20;
/// V8: the largest magnitude of an integer field of an op (row bytes, strides, n, kt, ...),
/// so that sizes computed from them cannot overflow.
inline constexpr int64_t kMaxField = int64_t{1} << 40;
/// V5/V6: a replay runs every loop iteration when the program executes at most this many
/// instruction instances at the vertex being replayed; beyond, loops are sampled (docs/npu.md).
inline constexpr int64_t kFullReplayInstances = int64_t{1} << 22;
/// V5/V6: the most instruction instances one replay of a program may execute.
inline constexpr int64_t kMaxReplayInstances = int64_t{1} << 25;

/// Checks every invariant of `b`: the tables and every program of every mode. The first
/// violation is returned (kInvalidArgument for V1, V2, V3 and V8, kFailedPrecondition for
/// V4..V7); its message starts with the invariant, e.g. "V3 (alignment): ", and names the
/// mode, phase, core, instruction index, op, MBLT node and buffers at fault, with the values.
Status verify(const Bundle& b);

/// Checks the tables of `b` and the one program `p` (which need not be one of b's modes),
/// run by `instances` instances: what verify checks for one program, plus the DRAM layout.
Status verify_program(const Bundle& b, const Program& p, int instances);

/// The checks of one instruction's own fields that its row in the instruction table states
/// (qbc/isa/ops.h): V1 (enum values defined, attention and rope indices in b's tables) and V8
/// (integers in their range, accepted values, finite reals, KV heads of the attention, the
/// row's rules between fields). "" when they hold, else the fault ("kt 0 outside [1, 2^40]").
/// verify() runs them on every instruction, with the checks that need the program around it.
std::string check_op_fields(const Bundle& b, const Op& op);

/// V8's size estimate of a program: instructions and encoded bytes, sizeof(Instr) per
/// instruction plus sizeof(Expr::Node) per expression node (reference offsets included).
struct ProgramSize {
  int64_t instructions = 0;
  int64_t bytes = 0;
};
ProgramSize program_size(const Program& p);

/// V8 on the bundle header and V1 on its tables (buffers, attentions, ropes, I/O, modes):
/// what a program analysis needs of `b` before it reads any program.
Status verify_tables(const Bundle& b);

/// V1 and V8 on the streams of `p` (a program over `b`, whose tables passed verify_tables),
/// run by `instances` instances, with each stream's loop structure in `shapes`: what a
/// program analysis (the backend's dependency tokens) needs before it walks `p`.
Status verify_structure(const Bundle& b, const Program& p, int instances,
                        std::vector<StreamShape>* shapes);

}  // namespace qbc::isa
