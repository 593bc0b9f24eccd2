// dma: strided row copies between DRAM and a core's SRAM, with ring addressing on the DRAM
// side (isa::Dma). Device::create has checked that one side is DRAM, the other this core's
// SRAM, and that strides are non-negative.
#include <algorithm>
#include <cstring>

#include "core.h"

namespace qbc::runtime {
namespace {

/// Loads of at least this many bytes from read-only DRAM leave an alias instead of a copy.
constexpr int64_t kAliasBytes = 4096;

}  // namespace

Status exec(const isa::Dma& op, Core& c) {
  ++c.counters.dma;
  QBC_ASSIGN_OR_RETURN(const int64_t rows, c.count(op.rows, "rows"));
  if (rows == 0 || op.row_bytes == 0) return ok_status();
  const isa::Buffer& src = c.bundle.buffers[static_cast<size_t>(op.src.buffer)];
  const bool load = src.space == isa::Space::kDram;
  const isa::Ref& dram_ref = load ? op.src : op.dst;
  const isa::Ref& sram_ref = load ? op.dst : op.src;
  const int64_t sram_stride = load ? op.dst_stride : op.src_stride;
  const int64_t dram_stride = load ? op.src_stride : op.dst_stride;
  const bool ring = op.ring_rows > 0;
  const isa::Buffer& dram_buf = c.bundle.buffers[static_cast<size_t>(dram_ref.buffer)];
  const int purpose = static_cast<int>(dram_buf.purpose);
  (load ? c.counters.dram_read : c.counters.dram_written)[purpose] += span(rows, op.row_bytes);
  if (c.counters_only) return ok_status();
  // One contiguous block from read-only DRAM (a weight tile): no copy, an alias.
  if (load && !ring && c.decoded.read_only[static_cast<size_t>(dram_ref.buffer)] &&
      (rows == 1 || (sram_stride == op.row_bytes && dram_stride == op.row_bytes)) &&
      span(rows, op.row_bytes) >= kAliasBytes) {
    const int64_t bytes = span(rows, op.row_bytes);
    QBC_ASSIGN_OR_RETURN(const int64_t lo, c.sram_offset(sram_ref, bytes, "dst"));
    QBC_ASSIGN_OR_RETURN(const uint8_t* d, c.dram_at(dram_ref, 0, bytes, "src"));
    c.alias_sram(lo, bytes, d);
    return ok_status();
  }
  // A load into contiguous rows overwrites its whole SRAM range.
  const int64_t sram_span = rows_span(rows, sram_stride, op.row_bytes);
  uint8_t* s = nullptr;
  if (load && (rows == 1 || sram_stride == op.row_bytes)) {
    QBC_ASSIGN_OR_RETURN(s, c.sram_write(sram_ref, sram_span, "dst"));
  } else {
    QBC_ASSIGN_OR_RETURN(s, c.sram_at(sram_ref, sram_span, load ? "dst" : "src"));
  }
  const int64_t dram_span = ring ? rows_span(op.ring_rows, op.ring_stride, op.row_bytes)
                                 : rows_span(rows, dram_stride, op.row_bytes);
  QBC_ASSIGN_OR_RETURN(uint8_t * d, c.dram_at(dram_ref, 0, dram_span, load ? "src" : "dst"));
  const int64_t r0 = ring ? c.eval(op.ring_row0) : 0;
  // Contiguous rows on both sides (a ring of packed rows, e.g. a KV block): a few block copies.
  const int64_t dram_row_stride = ring ? op.ring_stride : dram_stride;
  if (sram_stride == op.row_bytes && dram_row_stride == op.row_bytes) {
    int64_t r = 0;
    while (r < rows) {
      int64_t dram_row = r, run = rows - r;
      if (ring) {
        dram_row = (r0 + r) % op.ring_rows;
        if (dram_row < 0) dram_row += op.ring_rows;
        run = std::min(run, op.ring_rows - dram_row);
      }
      uint8_t* sp = s + r * op.row_bytes;
      uint8_t* dp = d + dram_row * op.row_bytes;
      const size_t bytes = static_cast<size_t>(run * op.row_bytes);
      if (load) {
        std::memcpy(sp, dp, bytes);
      } else {
        std::memcpy(dp, sp, bytes);
      }
      r += run;
    }
    return ok_status();
  }
  for (int64_t r = 0; r < rows; ++r) {
    int64_t dram_row = r * dram_stride;
    if (ring) {
      int64_t ring_row = (r0 + r) % op.ring_rows;
      if (ring_row < 0) ring_row += op.ring_rows;
      dram_row = ring_row * op.ring_stride;
    }
    uint8_t* sp = s + r * sram_stride;
    uint8_t* dp = d + dram_row;
    if (load) {
      std::memcpy(sp, dp, static_cast<size_t>(op.row_bytes));
    } else {
      std::memcpy(dp, sp, static_cast<size_t>(op.row_bytes));
    }
  }
  return ok_status();
}

}  // namespace qbc::runtime
