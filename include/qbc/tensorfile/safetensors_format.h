// Limits of the safetensors file format shared by its reader (frontend/safetensors.h) and its
// writers (tensorfile/safetensors_writer.h).
#pragma once

#include <cstdint>

namespace qbc::tensorfile {

/// Header length limit (100 MiB), as in the reference safetensors implementation.
inline constexpr uint64_t kMaxSafetensorsHeaderBytes = 100ull << 20;

}  // namespace qbc::tensorfile
