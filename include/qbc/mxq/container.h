// The MXQ container (docs/mxq.md "Container"): a 128-byte little-endian header, a section
// table of 64-byte entries {kind, bundle, core, block, offset, size, digest, flags}, and the
// sections, each starting on a 4096-byte boundary so weights can be mapped rather than
// copied. The reader trusts nothing: every offset and size is checked against the file size
// before use, the table must be sorted with no overlaps and no gaps beyond alignment
// padding, counts are bounded before anything is allocated, and (unless told not to) every
// section's XXH3-128 digest is verified. Errors name the file and the section.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "qbc/support/status.h"

namespace qbc::mxq {

/// Bytes 0..7 of every MXQ file: 0x89 "QBCMXQ" 0x0a. The high first byte keeps it from
/// reading as text, and it shares nothing with the vendor's MXQv1..v7 files.
inline constexpr std::array<uint8_t, 8> kMagic = {0x89, 'Q', 'B', 'C', 'M', 'X', 'Q', 0x0a};
/// The manifest of a split build starts with 0x89 "QBCMXM" 0x0a instead.
inline constexpr std::array<uint8_t, 8> kManifestMagic = {0x89, 'Q', 'B', 'C', 'M', 'X', 'M', 0x0a};
/// Format version: a reader refuses another major version; minor versions only add.
inline constexpr uint16_t kMajorVersion = 1;
inline constexpr uint16_t kMinorVersion = 0;
/// Written as a little-endian u32; a big-endian writer would produce 01 02 03 04.
inline constexpr uint32_t kEndianMark = 0x01020304u;
inline constexpr uint32_t kHeaderBytes = 128;
inline constexpr uint32_t kEntryBytes = 64;
inline constexpr uint32_t kAlignment = 4096;
/// The most sections one file may declare (bounded before the table is read).
inline constexpr uint32_t kMaxSections = 1u << 16;

/// Required feature bits: a reader that does not know a set bit refuses the file. Optional
/// bits (unknown ones are ignored): none defined.
/// Bit 0: the embedding section holds bf16 values (2 bytes each) instead of fp32; set in the
/// file that holds the embedding when every value of the table is exactly a bf16.
inline constexpr uint64_t kFeatureEmbeddingBf16 = uint64_t{1} << 0;
/// Bit 1: the compact weight image: matmul and requant instructions may read packed 4-bit
/// zero points (i4 SRAM buffers) and fp16 weight scales (f16 SRAM buffers, of 4- or 8-bit
/// linears); set in every part of a model whose code has one.
inline constexpr uint64_t kFeatureCompactWeights = uint64_t{1} << 1;
/// Bit 2: the compact 8-bit group image: matmul instructions may read zero points from SRAM
/// buffers of dtype i8 (one int8 code a value); its fp16 scales are bit 1's. Set in every
/// part of a model whose code has one.
inline constexpr uint64_t kFeatureZeroPointsI8 = uint64_t{1} << 2;
/// Bit 3: the programs read host-computed rope tables (Layout.rope_inputs, M-RoPE models): a
/// reader must fill them before every call. Set in every part of such a model.
inline constexpr uint64_t kFeatureRopeInputs = uint64_t{1} << 3;
/// Bit 4: the embedding section holds the 8-bit table (bit.embedding 8): embed_rows fp32 row
/// scales, then embed_rows × hidden int8 codes (docs/mxq.md, docs/numerics.md "8-bit
/// embedding"). Set in the file that holds the embedding; never together with bit 0.
inline constexpr uint64_t kFeatureEmbeddingI8 = uint64_t{1} << 4;
/// Bit 5: a vision part (docs/mxq.md "Vision part"): set in a feature bundle's file (a vision
/// tower: Layout.kind 1) and in a language model's file that holds a vision section.
inline constexpr uint64_t kFeatureVision = uint64_t{1} << 5;
/// Bit 6: span programs (ModeDesc.span, CoreCode.span; docs/npu.md "Span programs"): the
/// runtime must run each bidirectional span (a Gemma 3 image) as one call of them. Set in every
/// part of such a model.
inline constexpr uint64_t kFeatureSpanPrograms = uint64_t{1} << 6;
/// Bit 7: interleaved M-RoPE (RopeInputs.interleaved, Qwen3-VL): the host's rope tables take
/// the position streams in turn per frequency, not in sections; a reader that computes only
/// sectioned tables must refuse rather than rotate by the wrong positions. Set, with bit 3, in
/// every part of such a model.
inline constexpr uint64_t kFeatureInterleavedMRope = uint64_t{1} << 7;
/// Bit 8: KV records (AttnDesc.k_token_scale, qk_hadamard, k_asym, v_token_scale, k_group;
/// docs/numerics.md "The KV4 rules"): an attention's stored keys / values carry per-token
/// fields after their codes; a reader that knows only rows of codes must refuse rather than
/// read the fields as codes. Set in every part of such a model.
inline constexpr uint64_t kFeatureKvRecords = uint64_t{1} << 8;
/// Bit 9: float weight offsets (MatMul.xsum, Requant.xsum / wmin; docs/numerics.md "Float
/// offsets"; GGUF Q4_1 / Q5_1 codes kept): a requant adds each group's code sum times its
/// offset; a reader without the term must refuse rather than drop it. Set in every part of
/// such a model.
inline constexpr uint64_t kFeatureWeightOffsets = uint64_t{1} << 9;
/// Bit 10: DeepStack inputs (Layout.deepstack, Qwen3-VL; docs/multimodal.md "DeepStack"): the
/// host fills per-level io rows before every call (the image's DeepStack rows at its tokens,
/// zeros elsewhere); a reader that leaves them unfilled adds whatever they hold. Set in the
/// language model's file.
inline constexpr uint64_t kFeatureDeepStack = uint64_t{1} << 10;
inline constexpr uint64_t kKnownRequiredFeatures =
    kFeatureEmbeddingBf16 | kFeatureCompactWeights | kFeatureZeroPointsI8 | kFeatureRopeInputs |
    kFeatureEmbeddingI8 | kFeatureVision | kFeatureSpanPrograms | kFeatureInterleavedMRope |
    kFeatureKvRecords | kFeatureWeightOffsets | kFeatureDeepStack;

/// What a section holds (docs/mxq.md "Sections").
enum class SectionKind : uint32_t {
  kMeta = 1,       ///< pb::Meta: producer, config, provenance, io, KV layout, part
  kLayout = 2,     ///< pb::Layout: target, model interface, buffers, tables, modes
  kCode = 3,       ///< pb::CoreCode: one core's prefill and decode streams of one mode
  kWeights = 4,    ///< a range of the DRAM weight image, pre-tiled as the programs read it
  kEmbedding = 5,  ///< the host token embedding [embed_rows, hidden], fp32 or bf16 (feature
                   ///< bit kFeatureEmbeddingBf16) little-endian, or int8 codes with fp32 row
                   ///< scales (kFeatureEmbeddingI8)
  kDebug = 6,      ///< pb::DebugMap: MBLT node and pass names of the instructions
  kAsset = 7,      ///< a host file the runtime needs (tokenizer, generation config, ...)
  kVision = 8,     ///< a VLM's vision part: a complete single-file MXQ of a feature bundle
};
/// "meta", "layout", ... or "unknown(N)".
std::string section_kind_name(uint32_t kind);
/// True for the kinds above.
bool known_section_kind(uint32_t kind);

/// A 128-bit digest, XXH3-128 in canonical (big-endian) byte order.
using Digest = std::array<uint8_t, 16>;
Digest digest_of(const void* data, size_t size);

/// XXH3-128 of bytes given piece by piece: the digest_of of their concatenation (the AVX2
/// build where the host has it).
class DigestStream {
 public:
  DigestStream();
  ~DigestStream();
  DigestStream(const DigestStream&) = delete;
  DigestStream& operator=(const DigestStream&) = delete;
  void update(const void* data, size_t size);
  Digest finish();  ///< once

 private:
  void* avx2_ = nullptr;  ///< the AVX2 build's state, or
  void* lib_ = nullptr;   ///< libxxhash's
};
std::string digest_hex(const Digest& d);

/// One entry of the section table.
struct SectionEntry {
  uint32_t kind = 0;
  int32_t bundle = -1;  ///< the mode (Layout.modes index) of a code section; -1 otherwise
  int32_t core = -1;    ///< the stream within the mode's instance of a code section
  int32_t block = -1;   ///< first decoder block of a weights section; -1 otherwise
  uint64_t offset = 0, size = 0;
  Digest digest{};
  uint32_t flags = 0;
};

/// The header fields a writer chooses (the rest is derived).
struct HeaderInfo {
  uint64_t required_features = 0, optional_features = 0;
  uint64_t target_word = 0;
  uint32_t part_index = 0, part_count = 1;
  Digest model_hash{};
};

/// The target compatibility word: the first 8 bytes of XXH3-128 over the profile name and
/// the numbers the programs were planned with (cores, SRAM and DRAM bytes, DMA alignment).
uint64_t target_word(std::string_view target, int64_t cores, int64_t sram_bytes, int64_t dram_bytes,
                     int64_t dma_align);

/// The header's own check (bytes 120..127): XXH3-64 of bytes 0..119 of `header`.
uint64_t header_checksum(const uint8_t* header);

/// A section to write: its entry (offset, size and digest are filled in) and its bytes.
struct SectionData {
  SectionEntry entry;
  std::string_view bytes;
  /// The digest of `bytes` when the caller has it already (write_model hashes the sections
  /// for the model hash first); computed otherwise.
  std::optional<Digest> digest;
};

/// A container laid out for writing without holding it whole: `head` (header, section
/// table, zero padding up to the first section), then every section's bytes (views of the
/// caller's data) each followed by `pad` zero bytes.
struct ContainerLayout {
  struct Piece {
    std::string_view bytes;
    uint64_t pad = 0;
  };
  std::string head;
  std::vector<Piece> body;
  uint64_t size = 0;  ///< of the whole file
};
ContainerLayout layout_container(const HeaderInfo& header,
                                 const std::vector<SectionData>& sections);

/// The bytes of a container holding `sections` in the given order (layout_container,
/// concatenated). Deterministic: the same arguments give the same bytes (padding is zero,
/// nothing depends on time or host).
std::string write_container(const HeaderInfo& header, const std::vector<SectionData>& sections);

struct ReadOptions {
  /// Verify every section's digest on open (`--no-verify` clears it).
  bool verify_digests = true;
  /// Hash sections of `large_section_bytes` or more on a background thread; the caller must
  /// call Container::finish_digests before it trusts their bytes (mxq::load_model does, once
  /// it has decoded the rest, so the two overlap).
  bool defer_large_digests = false;
  uint64_t large_section_bytes = uint64_t{16} << 20;
};

/// An opened MXQ file: read-only mapped, checked by the rules of docs/mxq.md.
class Container {
 public:
  /// Opens and checks `path`. kNotFound when it does not exist; kDataLoss (exit 2) for a
  /// truncated or corrupt file, naming the file and the section; kInvalidArgument for a file
  /// that is not an MXQ or of another major version; kUnimplemented for unknown required
  /// features.
  static StatusOr<Container> open(const std::string& path, const ReadOptions& options = {});
  /// Same over bytes in memory (tests and fuzzing); `name` stands for the path in errors.
  static StatusOr<Container> from_bytes(std::string bytes, const std::string& name,
                                        const ReadOptions& options = {});

  const std::string& path() const { return path_; }
  uint16_t minor_version() const { return minor_; }
  const HeaderInfo& header() const { return header_; }
  uint64_t file_size() const { return size_; }
  const std::vector<SectionEntry>& sections() const { return sections_; }
  /// The bytes of section `i` (valid while the container lives).
  std::string_view bytes(size_t i) const;
  /// "file.mxq: section 3 (code, mode 0, core 1)": the location prefix of errors.
  std::string where(size_t i) const;
  /// Lets the kernel drop the file's pages from this process's resident set (a mapped file:
  /// madvise MADV_DONTNEED; the bytes stay readable and come back from the page cache). The
  /// reader calls it once every section has been decoded, so a loaded model does not hold
  /// the file resident beside what it decoded.
  void drop_resident_pages() const;
  /// The same for the pages of bytes [lo, hi) of section `i` (whole pages around them).
  void drop_section_pages(size_t i, uint64_t lo = 0, uint64_t hi = UINT64_MAX) const;
  /// Copies section `i` to `dst` (bytes(i).size() bytes), letting its pages go as it goes,
  /// so a large section is never resident twice.
  void copy_section(size_t i, uint8_t* dst) const;
  /// Section i's bytes in place, writable (the mapping is private: writes never reach the
  /// file), kept alive by the pointer however long the container lives. Sections are 4096
  /// aligned in the file, so the pointer is too. drop_resident_pages leaves shared sections
  /// alone.
  std::shared_ptr<uint8_t> share_section(size_t i);
  /// Verifies section i's digest (done on open unless verify_digests is off).
  Status verify_section(size_t i) const;
  /// Waits for the background digest check of ReadOptions::defer_large_digests and returns
  /// its result (ok when there is none).
  Status finish_digests() const;

 private:
  struct Storage;
  static StatusOr<Container> parse(std::shared_ptr<Storage> storage, const std::string& name,
                                   const ReadOptions& options);
  std::shared_ptr<Storage> storage_;
  std::string path_;
  uint16_t minor_ = 0;
  HeaderInfo header_;
  uint64_t size_ = 0;
  std::vector<SectionEntry> sections_;
  std::vector<size_t> shared_;  ///< sections handed out by share_section
  struct Pending;
  std::shared_ptr<Pending> pending_;  ///< the deferred digests, if any
};

}  // namespace qbc::mxq
