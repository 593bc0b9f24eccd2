// A safetensors file built from tensors produced one at a time, in any order, with
// bounded memory: each tensor's bytes are appended to a spill file as it arrives, and
// finish() streams them into the final file in the layout SafetensorsStreamWriter
// requires. Used by quantize, which produces integer weights layer by layer.
#pragma once

#include <cstdio>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "qbc/support/status.h"
#include "qbc/tensorfile/safetensors_writer.h"

namespace qbc::tensorfile {

class SafetensorsSpillWriter {
 public:
  /// The final file will be `path`; the spill goes to `<path>.spill` (removed by finish()
  /// and by the destructor).
  explicit SafetensorsSpillWriter(std::filesystem::path path);
  ~SafetensorsSpillWriter();
  SafetensorsSpillWriter(const SafetensorsSpillWriter&) = delete;
  SafetensorsSpillWriter& operator=(const SafetensorsSpillWriter&) = delete;

  /// Spills `t` (its data is released). Names must be unique; errors name the tensor.
  Status add(TensorToWrite t);
  /// Writes `path` (atomically, through SafetensorsStreamWriter) and removes the spill.
  Status finish(const std::map<std::string, std::string>& metadata = {});
  /// Bytes held in the spill so far.
  uint64_t spilled_bytes() const { return offset_; }

 private:
  struct Entry {
    TensorSpec spec;
    uint64_t offset = 0, size = 0;
  };
  std::filesystem::path path_, spill_path_;
  std::FILE* spill_ = nullptr;
  std::map<std::string, Entry> entries_;
  uint64_t offset_ = 0;
  Status error_;
};

}  // namespace qbc::tensorfile
