// A compiled model on disk (docs/mxq.md "Model files"): one MXQ file, or with a split build
// a manifest plus one MXQ per part beside it. write_model() turns an isa::Bundle, its
// metadata and host assets into those files, atomically and deterministically; load_model()
// reads either form back into an isa::Bundle, checking every rule of the format and the
// consistency of the parts (count, order, build), with errors naming the file and section.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "mxq_meta.pb.h"
#include "qbc/isa/program.h"
#include "qbc/mxq/container.h"
#include "qbc/support/status.h"

namespace qbc::mxq {

/// The asset of a VLM's vision part holding the tower's constant input `input` (every feature
/// input but `patches`), fp32 little-endian [rows, width]: "vision_<input>.f32". CLIP's
/// `embed_base` (the class embedding on row 0 plus the learned positions), Qwen2.5-VL's
/// `rope_cos` and `rope_sin` (the 2-D rotary tables of the compiled grid, in window order). The
/// compiler writes them and the runtime feeds them (docs/mxq.md "Vision part").
inline std::string vision_input_asset(const std::string& input) {
  return "vision_" + input + ".f32";
}
/// Patches merged per side into one image token (`VisionPart.merge_size`; 0 in files without
/// a merger reads as 1).
inline int64_t vision_merge(const pb::VisionPart& v) {
  return v.merge_size() > 1 ? v.merge_size() : 1;
}
/// The largest image side a vision part resizes to (vision.imageSize's bound; tiles included).
inline constexpr int64_t kMaxVisionImageSide = 16384;
/// Calls of the vision program per image: tiles_per_side² tiles and a global view (Idefics3), or
/// one.
inline int64_t vision_views(const pb::VisionPart& v) {
  const int64_t n = v.tiles_per_side();
  return n > 1 ? n * n + 1 : 1;
}
/// The side of an image's token grid as the language model sees it (M-RoPE positions):
/// image_size / patch_size / merge (0 for a malformed part; the pair check refuses those).
inline int64_t vision_grid_side(const pb::VisionPart& v) {
  return v.patch_size() > 0 ? v.image_size() / v.patch_size() / vision_merge(v) : 0;
}
/// The vision part's asset holding the window order of a tower that works in window order
/// (Qwen2.5-VL), int64 little-endian: the tower's merge group k is the image's group order[k]
/// (row-major over the merged grid). The runtime permutes the patch rows into that order and
/// the feature rows back.
inline constexpr const char* kVisionWindowOrderAsset = "vision_window_order.i64";

/// A host file the runtime needs, stored as an asset section.
struct HostAsset {
  std::string name;
  std::string bytes;
};

struct WriteRequest {
  const isa::Bundle* bundle = nullptr;  ///< with its weights image and embedding
  /// Filled by the caller: producer, sources, configuration, provenance, io, KV layout,
  /// token ids. The writer sets schemes, target, part fields and the model hash.
  pb::Meta meta;
  std::vector<HostAsset> assets;
  int blocks = 0;  ///< decoder blocks of the model
  /// Block boundaries of a split build (splitBlocks; splitParts is turned into them by the
  /// caller): strictly increasing, each in 1..blocks-1. Empty: a single file.
  std::vector<int> split_blocks;
  /// A VLM's vision part: the bytes of a complete single-file MXQ of its feature bundle
  /// (write_model_bytes), stored as the vision section of the first part; meta.vision must
  /// describe it (its model hash). Empty: a text model.
  std::string vision;
};

struct WrittenFile {
  std::string path;
  int64_t bytes = 0;
  std::string xxh3_128;
};

/// Writes the model to `path`: a single MXQ, or with split_blocks the manifest at `path`
/// and its parts beside it ("<stem>-00001-of-0000N.mxq"). Every file is written to a
/// temporary name first; the parts are renamed into place, then the manifest, so `path`
/// never names a partial build. Returns the files, the loadable one (`path`) last.
StatusOr<std::vector<WrittenFile>> write_model(const std::string& path, const WriteRequest& req);

/// A single-file model (no split_blocks) as bytes instead of a file: what a VLM's vision
/// part is before it goes into the language model's file. `model_hash`, when given, receives
/// the file's model hash (32 hex digits, as its metadata and header hold it).
StatusOr<std::string> write_model_bytes(const WriteRequest& req, std::string* model_hash = nullptr);

/// The parts' block ranges for `split_blocks` over `blocks` blocks, checked: kInvalidArgument
/// naming `key` when a boundary is out of 1..blocks-1 or not increasing.
StatusOr<std::vector<std::pair<int, int>>> part_ranges(const std::vector<int>& split_blocks,
                                                       int blocks, const std::string& key);

/// The part a weight buffer of decoder block `block` goes to (ranges from part_ranges):
/// the part holding its block; buffers outside the blocks (-1) go to the first part before
/// the first block was seen and to the last part after (`after_blocks`).
int part_of_block(int block, bool after_blocks, const std::vector<std::pair<int, int>>& ranges);

/// A loaded model.
struct LoadedModel {
  pb::Meta meta;  ///< part 0's
  std::shared_ptr<isa::Bundle> bundle;
  std::vector<HostAsset> assets;
  bool split = false;                 ///< loaded through a manifest
  std::vector<std::string> files;     ///< the MXQ files read, in part order
  std::vector<Container> containers;  ///< the open parts (header and section table)
  /// A VLM's vision part (the vision section, loaded and checked against meta.vision), or null.
  std::shared_ptr<LoadedModel> vision;
  /// The asset called `name`, or nullptr.
  const HostAsset* asset(const std::string& name) const;
};

/// True when `path` starts with the MXQ or the manifest magic.
bool is_mxq_file(const std::string& path);

/// Loads a single MXQ or a manifest and its parts. Refuses (exit 2, naming the file and the
/// section or part) anything the format rules or the consistency checks reject: a missing,
/// extra, reordered or mixed-build part, a section in the wrong part, a weight image with
/// holes, an instruction naming a node or pass the debug map does not have.
StatusOr<LoadedModel> load_model(const std::string& path, const ReadOptions& options = {});

/// load_model of a single MXQ held in memory (tests and fuzzing); `name` stands for the path.
StatusOr<LoadedModel> load_model_bytes(std::string bytes, const std::string& name,
                                       const ReadOptions& options = {});

/// The bytes of a manifest (for tests); parse_manifest reads them back with its rules.
std::string write_manifest(const pb::Manifest& m);
StatusOr<pb::Manifest> parse_manifest(std::string_view bytes, const std::string& name);

}  // namespace qbc::mxq
