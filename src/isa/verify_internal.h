// Shared between the verifier's files: the program being checked, how a location is named in
// a message, and the replay checks (V5, V6) that live in verify_replay.cpp.
#pragma once

#include <string>
#include <vector>

#include "qbc/isa/domain.h"
#include "qbc/isa/program.h"
#include "qbc/support/status.h"

namespace qbc::isa {

/// One program under check.
struct ProgramRef {
  const Bundle& b;
  const Program& p;
  int mode = -1;  ///< index in Bundle::modes; -1 for verify_program
  int instances = 1;
};

/// The invariant's error: "V<n> (<name>): <message>", with the code of that invariant.
Status violation(int invariant, const std::string& message);

/// "mode 0 (single) prefill" or "program prefill".
std::string where(const ProgramRef& pr);
/// "core 1 #12 cmp matmul (node 'blk.0.attn.q_proj', pass 'npu-lower')".
std::string instr_where(const ProgramRef& pr, int stream, int instr);
/// where(pr) + " " + instr_where(pr, stream, instr).
std::string where(const ProgramRef& pr, int stream, int instr);
/// "%name" (or "#id" when the id is out of range).
std::string buffer_name(const Bundle& b, int32_t id);

/// V6 and V5: replays the program at each vertex of the runtime domain. `shapes` are the
/// streams' loop structures, `accs` every instruction's accesses ([stream][instr]). Runs
/// after V1..V4, V7 and V8 hold for the program.
Status check_replay(const ProgramRef& pr, const std::vector<StreamShape>& shapes,
                    const std::vector<std::vector<std::vector<Access>>>& accs);

/// V1 and V8 on one program's streams (and the tables they reference, which must have passed
/// check_tables): what the dependency pass needs before it can analyse a program.
Status check_program_structure(const ProgramRef& pr, std::vector<StreamShape>* shapes);
/// V1 on the typed fields of `op` (enum values, attention and rope indices): "" or the fault.
std::string check_fields_v1(const Bundle& b, const Op& op);
/// V8 on the typed fields of `op` (ranges, accepted enum values, finite reals, KV heads) and
/// its row's rules; V1 holds for `op`. "" or the fault.
std::string check_fields_v8(const Bundle& b, const Op& op);

/// V8 on the bundle header and V1 on the tables (buffers, attentions, ropes, I/O, modes).
Status check_tables(const Bundle& b);

}  // namespace qbc::isa
