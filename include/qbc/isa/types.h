// The basic types of the NPU program (docs/npu.md): element types, memory spaces, buffer
// purposes, the core's queues and token channels, placed buffers and references into them.
// qbc/isa/ops.h builds the instructions from them and qbc/isa/program.h the bundle.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "qbc/isa/expr.h"

namespace qbc::isa {

/// Element types of buffers. kI4 is packed two per byte, low nibble first.
enum class DType : uint8_t { kI4, kI8, kU8, kI16, kI32, kI64, kF16, kF32 };
const char* dtype_name(DType t);
int dtype_bits(DType t);
/// Bytes of `n` elements (kI4: ceil(n / 2)).
int64_t dtype_bytes(DType t, int64_t n);
/// The storage type of `bits`-bit integer codes (KV cache, activations): packed kI4 for 4,
/// kI16 for 16, kI8 otherwise.
DType code_type(int bits);

enum class Space : uint8_t { kDram, kSram };
/// What a DRAM region holds; DMA counters are kept per purpose.
enum class Purpose : uint8_t { kWeights, kKv, kActivations, kScratch, kIo, kSram };
const char* purpose_name(Purpose p);

/// A core's three instruction queues.
enum class Queue : uint8_t { kLoad = 0, kCompute = 1, kStore = 2 };
inline constexpr int kNumQueues = 3;
const char* queue_name(Queue q);

/// Dependency-token channels between the queues of one core (bit i of Instr::wait /
/// Instr::signal). A signal on channel X->Y is consumed by the next wait on X->Y of queue Y,
/// in order (counted semaphores, as in VTA).
enum class Channel : uint8_t {
  kLoadToCompute,
  kComputeToLoad,
  kComputeToStore,
  kStoreToCompute,
  kLoadToStore,
  kStoreToLoad
};
inline constexpr int kNumChannels = 6;
Queue channel_from(Channel c);
Queue channel_to(Channel c);
const char* channel_name(Channel c);

/// An explicitly placed buffer. DRAM buffers live at `offset` in device memory, plus
/// `slot * slot_stride` for per-instance regions (KV cache, activations, scratch); SRAM
/// buffers live at `offset` in the SRAM of `core`. `shape` is informational (elements, for
/// the text form and the memory map); `bytes` is what is reserved.
struct Buffer {
  std::string name;
  Space space = Space::kDram;
  int32_t core = -1;  ///< SRAM: the owning core; DRAM: -1
  Purpose purpose = Purpose::kScratch;
  DType dtype = DType::kI8;
  int64_t offset = 0, bytes = 0;
  int64_t slot_stride = 0;  ///< DRAM: bytes between instance slots (0: shared, e.g. weights)
  std::vector<int64_t> shape;
  /// Weights: the decoder block of the node they belong to (-1 outside blocks); an MXQ
  /// split by blocks puts them in that block's part.
  int32_t block = -1;
};

/// A byte position inside a buffer: buffers[buffer] + offset (an expression of loop
/// variables and runtime values).
struct Ref {
  int32_t buffer = -1;
  Expr offset;
  bool valid() const { return buffer >= 0; }
};

}  // namespace qbc::isa
