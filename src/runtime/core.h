// The execution context of one core while it runs an instruction: its memory, the values of
// the expressions (runtime values and loop variables), its counters and caches. Operand
// refs are resolved here, once per instruction, into bounds-checked host pointers.
#pragma once

#include <climits>
#include <cstdint>
#include <memory>
#include <variant>
#include <vector>

#include "qbc/isa/program.h"
#include "qbc/numerics/attention.h"
#include "qbc/numerics/rope.h"
#include "qbc/runtime/device.h"
#include "qbc/support/saturating.h"
#include "qbc/support/status.h"

namespace qbc::runtime {

class ThreadPool;

/// The device's DRAM: one zeroed block, and, when the device took the weight image
/// (DeviceOptions::take_image), the image's own memory for DRAM bytes [weights_base,
/// weights_base + weights_bytes).
struct DramMemory {
  uint8_t* block = nullptr;  ///< nullptr when the device only counts
  uint8_t* weights = nullptr;
  int64_t weights_base = 0, weights_bytes = 0;
  /// Where DRAM bytes [address, address + bytes) live (the caller checked the range).
  uint8_t* at(int64_t address, int64_t bytes) const {
    if (weights != nullptr && address >= weights_base &&
        address + bytes <= weights_base + weights_bytes)
      return weights + (address - weights_base);
    return block == nullptr ? nullptr : block + address;
  }
};

/// rope(m) of an attention's rotating key offsets by cache position [KV*d], direct-mapped
/// on position mod slots: every score of a key needs it, and numerics computes it with a
/// one-position rope call, so a cached row is the same bits as a new one.
struct KrotCache {
  int64_t slots = 0;
  std::vector<int64_t> pos;  ///< position held by each slot (-1: none)
  std::vector<float> rows;   ///< [slots, KV*d]
};

/// A decoded attention parameter block, kept while the block's bytes stay the same.
struct AttnEntry {
  std::vector<uint8_t> raw;  ///< the fp32 block as read
  numerics::Attention attn;
  KrotCache krot;
  bool valid = false;
};

/// Instructions executed and host seconds spent per instruction type (isa::Op index), kept
/// only when profiling (QBC_EXEC_PROFILE set: Device prints them when destroyed).
struct OpProfile {
  static constexpr size_t kOps = std::variant_size_v<isa::Op>;
  int64_t count[kOps] = {};
  double seconds[kOps] = {};
};

/// SRAM bytes [lo, hi) of a core that hold, by a DMA load, the bytes at `src` in read-only
/// DRAM (the weights): the load copied nothing. Readers that accept an alias
/// (Core::sram_read) read `src` directly; any other access first copies the bytes it touches
/// into SRAM (an output that overwrites them just ends the alias there), so every
/// instruction sees the bytes a copy would have left, and the counters are those of the copy.
struct SramAlias {
  int64_t lo = 0, hi = 0;
  const uint8_t* src = nullptr;
};

/// numerics::rope's fp16 cos/sin tables of one rope by position, for the frequencies `f`
/// they were computed with (a call with other frequencies starts them again): every layer
/// rotates the same positions.
struct RopeTable {
  std::vector<double> f;
  std::vector<float> cs, sn;  ///< [positions, rotary_dim / 2]
  std::vector<uint8_t> have;  ///< by position
};

/// What a core keeps between instructions and calls.
struct CoreData {
  std::vector<AttnEntry> attentions;  ///< by Bundle::attentions index
  std::vector<RopeTable> ropes;       ///< by Bundle::ropes index
  std::vector<SramAlias> aliases;     ///< disjoint, in no particular order
  OpProfile profile;
};

/// The bundle-wide decoded data every core reads (built once by Device::create).
struct Decoded {
  std::vector<numerics::Rope> ropes;  ///< Bundle::ropes as numerics::Rope
  /// By buffer: a weights buffer in DRAM that no DMA of the mode writes (by address, over
  /// every slot), so a load from it may leave an SramAlias instead of copying.
  std::vector<bool> read_only;
};

struct Core {
  const isa::Bundle& bundle;
  const Decoded& decoded;
  const isa::Env& env;
  uint8_t* sram;    ///< this physical core's SRAM (Bundle::sram_bytes)
  DramMemory dram;  ///< device DRAM
  int64_t dram_size;
  int slot;       ///< the instance
  int32_t index;  ///< the core within the instance (Buffer::core of its SRAM buffers)
  CoreCounters& counters;
  CoreData& data;
  ThreadPool& pool;
  bool profile = false;      ///< time every instruction into data.profile
  bool profile_cpu = false;  ///< ... in thread CPU time (QBC_EXEC_PROFILE=cpu)
  /// DeviceOptions::counters_only: each exec_* counts its instruction and returns before it
  /// touches memory (there is none).
  bool counters_only = false;
  /// Device::set_trace: every instruction's span is appended here (steady-clock seconds from
  /// `trace_t0`); nullptr when the call is not recorded.
  std::vector<ExecSpan>* trace = nullptr;
  double trace_t0 = 0;

  /// The SRAM bytes [offset, offset + bytes) of ref `r` (`what` names the operand in
  /// errors): the buffer must be an SRAM buffer of this core and the range inside it. The
  /// bytes are real (aliases over them are materialised first), to read or write.
  StatusOr<uint8_t*> sram_at(const isa::Ref& r, int64_t bytes, const char* what) const;
  /// The same range for reading only: through the DRAM bytes of an alias that holds all of
  /// it, else as sram_at.
  StatusOr<const uint8_t*> sram_read(const isa::Ref& r, int64_t bytes, const char* what) const;
  /// sram_read for an optional operand: nullptr when `r` is not valid.
  StatusOr<const uint8_t*> sram_read_opt(const isa::Ref& r, int64_t bytes, const char* what) const;
  /// The offset in this core's SRAM of ref `r`'s bytes [offset, offset + bytes), checked as
  /// sram_at; aliases are left alone.
  StatusOr<int64_t> sram_offset(const isa::Ref& r, int64_t bytes, const char* what) const;
  /// Records that SRAM bytes [lo, lo + bytes) now hold src[0, bytes) (a DMA load from
  /// read-only DRAM): older aliases end inside the range (their bytes are overwritten).
  void alias_sram(int64_t lo, int64_t bytes, const uint8_t* src) const;
  /// The range of ref `r` for an instruction that writes every byte of it before reading
  /// any (an output, resolved after the instruction's inputs): aliases over it end without
  /// copying.
  StatusOr<uint8_t*> sram_write(const isa::Ref& r, int64_t bytes, const char* what) const;
  /// Copies the aliased bytes inside SRAM [lo, hi) into SRAM; the parts of those aliases
  /// outside the range stay aliases.
  void materialize(int64_t lo, int64_t hi) const;
  /// Ends the aliases inside SRAM [lo, hi), copying their bytes in first when `copy`; the
  /// parts outside the range stay aliases.
  void cut(int64_t lo, int64_t hi, bool copy) const;
  /// The same for an optional operand: nullptr when `r` is not valid.
  StatusOr<uint8_t*> sram_opt(const isa::Ref& r, int64_t bytes, const char* what) const;
  /// The DRAM base of ref `r` for this slot, checking that bytes [lo, hi) relative to it lie
  /// inside the DRAM buffer.
  StatusOr<uint8_t*> dram_at(const isa::Ref& r, int64_t lo, int64_t hi, const char* what) const;
  int64_t eval(const isa::Expr& e) const { return e.eval(env); }
  /// rows-like counts: the value of `e`, which must be >= 0.
  StatusOr<int64_t> count(const isa::Expr& e, const char* what) const;
  /// The attention `attn` with its parameters read from `params` (SRAM), decoded once and
  /// again only when the block's bytes change.
  StatusOr<const numerics::Attention*> attention(int32_t attn, const isa::Ref& params);
  /// numerics::rotated_key_offset of attention `attn` (decoded by attention()) at `pos`:
  /// [KV*d] floats, valid until the next call.
  const float* rotated_key_offset(int32_t attn, int64_t pos);
};

// One kernel per op of the instruction table (exec_*.cpp; declared for every row, defined for
// all but Loop and Barrier, which the interpreter runs itself). Each first bumps the
// counters (with counters_only it stops there), then resolves its operands and computes with
// the numerics kernels; the interpreter prefixes errors with the instruction.
#define QBC_RUNTIME_EXEC(T) Status exec(const isa::T& op, Core& c);
QBC_ISA_OPS(QBC_RUNTIME_EXEC)
#undef QBC_RUNTIME_EXEC

}  // namespace qbc::runtime
