// The MXQ container: header, section table and sections (docs/mxq.md "Container").
#include "qbc/mxq/container.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <thread>

#include "digest_avx2.h"
#include "qbc/support/parallel.h"

namespace qbc::mxq {
namespace {

// Header field offsets (docs/mxq.md "Header").
constexpr size_t kOffMajor = 8, kOffMinor = 10, kOffEndian = 12, kOffHeaderSize = 16,
                 kOffAlignment = 20, kOffRequired = 24, kOffOptional = 32, kOffTarget = 40,
                 kOffFileSize = 48, kOffTable = 56, kOffCount = 64, kOffEntrySize = 68,
                 kOffPartIndex = 72, kOffPartCount = 76, kOffModelHash = 80, kOffTableDigest = 96,
                 kOffReserved = 112, kOffCheck = 120;
/// The largest header and entry a later minor version may declare.
constexpr uint32_t kMaxHeaderBytes = 4096, kMaxEntryBytes = 1024;

uint64_t align_up(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

template <typename T>
void put(std::string& s, size_t at, T v) {
  for (size_t i = 0; i < sizeof(T); ++i)
    s[at + i] = static_cast<char>(static_cast<uint64_t>(v) >> (8 * i) & 0xff);
}
template <typename T>
T get(const uint8_t* p) {
  uint64_t v = 0;
  for (size_t i = 0; i < sizeof(T); ++i) v |= static_cast<uint64_t>(p[i]) << (8 * i);
  return static_cast<T>(v);
}

bool all_zero(const uint8_t* p, size_t n) {
  for (size_t i = 0; i < n; ++i)
    if (p[i] != 0) return false;
  return true;
}

}  // namespace

uint64_t header_checksum(const uint8_t* header) { return XXH3_64bits(header, kOffCheck); }

std::string section_kind_name(uint32_t kind) {
  switch (static_cast<SectionKind>(kind)) {
    case SectionKind::kMeta:
      return "meta";
    case SectionKind::kLayout:
      return "layout";
    case SectionKind::kCode:
      return "code";
    case SectionKind::kWeights:
      return "weights";
    case SectionKind::kEmbedding:
      return "embedding";
    case SectionKind::kDebug:
      return "debug";
    case SectionKind::kAsset:
      return "asset";
    case SectionKind::kVision:
      return "vision";
  }
  return "unknown(" + std::to_string(kind) + ")";
}

bool known_section_kind(uint32_t kind) {
  return kind >= static_cast<uint32_t>(SectionKind::kMeta) &&
         kind <= static_cast<uint32_t>(SectionKind::kVision);
}

DigestStream::DigestStream() {
  static const bool avx2 = digest_avx2_usable();
  if (avx2) avx2_ = digest_avx2_begin();
  if (avx2_ == nullptr) {
    XXH3_state_t* st = XXH3_createState();
    if (st == nullptr) throw std::bad_alloc();
    XXH3_128bits_reset(st);
    lib_ = st;
  }
}

DigestStream::~DigestStream() {
  if (avx2_ != nullptr) {
    unsigned char unused[16];
    digest_avx2_end(avx2_, unused);
  }
  if (lib_ != nullptr) XXH3_freeState(static_cast<XXH3_state_t*>(lib_));
}

void DigestStream::update(const void* data, size_t size) {
  if (size == 0) return;
  if (avx2_ != nullptr) {
    digest_avx2_update(avx2_, static_cast<const unsigned char*>(data), size);
  } else {
    XXH3_128bits_update(static_cast<XXH3_state_t*>(lib_), data, size);
  }
}

Digest DigestStream::finish() {
  Digest d{};
  if (avx2_ != nullptr) {
    digest_avx2_end(avx2_, d.data());
    avx2_ = nullptr;
    return d;
  }
  XXH128_canonical_t c;
  XXH128_canonicalFromHash(&c, XXH3_128bits_digest(static_cast<XXH3_state_t*>(lib_)));
  std::memcpy(d.data(), c.digest, d.size());
  return d;
}

Digest digest_of(const void* data, size_t size) {
  DigestStream s;
  s.update(data, size);
  return s.finish();
}

std::string digest_hex(const Digest& d) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string s;
  for (uint8_t b : d) {
    s += kHex[b >> 4];
    s += kHex[b & 15];
  }
  return s;
}

uint64_t target_word(std::string_view target, int64_t cores, int64_t sram_bytes, int64_t dram_bytes,
                     int64_t dma_align) {
  std::string text(target);
  for (int64_t v : {cores, sram_bytes, dram_bytes, dma_align}) text += ":" + std::to_string(v);
  const Digest d = digest_of(text.data(), text.size());
  uint64_t w = 0;
  for (int i = 0; i < 8; ++i) w = w << 8 | d[static_cast<size_t>(i)];
  return w;
}

ContainerLayout layout_container(const HeaderInfo& h, const std::vector<SectionData>& sections) {
  const uint64_t table = kHeaderBytes, count = sections.size();
  uint64_t at = align_up(table + count * kEntryBytes, kAlignment);
  std::vector<SectionEntry> entries;
  for (const SectionData& s : sections) {
    SectionEntry e = s.entry;
    e.offset = at;
    e.size = s.bytes.size();
    e.digest = s.digest ? *s.digest : digest_of(s.bytes.data(), s.bytes.size());
    entries.push_back(e);
    at = align_up(at + e.size, kAlignment);
  }
  const uint64_t end =
      entries.empty() ? table + count * kEntryBytes : entries.back().offset + entries.back().size;
  ContainerLayout out;
  out.size = end;
  std::string& head = out.head;
  head.assign(entries.empty() ? end : entries.front().offset, '\0');
  for (size_t i = 0; i < entries.size(); ++i) {
    const SectionEntry& e = entries[i];
    const size_t p = table + i * kEntryBytes;
    put<uint32_t>(head, p + 0, e.kind);
    put<int32_t>(head, p + 4, e.bundle);
    put<int32_t>(head, p + 8, e.core);
    put<int32_t>(head, p + 12, e.block);
    put<uint64_t>(head, p + 16, e.offset);
    put<uint64_t>(head, p + 24, e.size);
    std::memcpy(head.data() + p + 32, e.digest.data(), 16);
    put<uint32_t>(head, p + 48, e.flags);
    const uint64_t next = i + 1 < entries.size() ? entries[i + 1].offset : end;
    out.body.push_back({sections[i].bytes, next - (e.offset + e.size)});
  }
  std::memcpy(head.data(), kMagic.data(), kMagic.size());
  put<uint16_t>(head, kOffMajor, kMajorVersion);
  put<uint16_t>(head, kOffMinor, kMinorVersion);
  put<uint32_t>(head, kOffEndian, kEndianMark);
  put<uint32_t>(head, kOffHeaderSize, kHeaderBytes);
  put<uint32_t>(head, kOffAlignment, kAlignment);
  put<uint64_t>(head, kOffRequired, h.required_features);
  put<uint64_t>(head, kOffOptional, h.optional_features);
  put<uint64_t>(head, kOffTarget, h.target_word);
  put<uint64_t>(head, kOffFileSize, end);
  put<uint64_t>(head, kOffTable, table);
  put<uint32_t>(head, kOffCount, static_cast<uint32_t>(count));
  put<uint32_t>(head, kOffEntrySize, kEntryBytes);
  put<uint32_t>(head, kOffPartIndex, h.part_index);
  put<uint32_t>(head, kOffPartCount, h.part_count);
  std::memcpy(head.data() + kOffModelHash, h.model_hash.data(), 16);
  const Digest td = digest_of(head.data() + table, count * kEntryBytes);
  std::memcpy(head.data() + kOffTableDigest, td.data(), 16);
  put<uint64_t>(head, kOffCheck, header_checksum(reinterpret_cast<const uint8_t*>(head.data())));
  return out;
}

std::string write_container(const HeaderInfo& h, const std::vector<SectionData>& sections) {
  const ContainerLayout l = layout_container(h, sections);
  std::string out = l.head;
  out.reserve(l.size);
  for (const ContainerLayout::Piece& p : l.body) {
    out.append(p.bytes.data(), p.bytes.size());
    out.append(p.pad, '\0');
  }
  return out;
}

/// A background digest check of the large sections (ReadOptions::defer_large_digests).
struct Container::Pending {
  std::thread thread;
  Status status;
  ~Pending() {
    if (thread.joinable()) thread.join();
  }
};

/// The bytes of an open container: a private mapping of the file (writable, so a section a
/// device uses in place may be written without reaching the file), or bytes in memory.
struct Container::Storage {
  const uint8_t* data = nullptr;
  uint64_t size = 0;
  void* map = nullptr;
  std::string owned;
  ~Storage() {
    if (map != nullptr) munmap(map, size);
  }
};

StatusOr<Container> Container::open(const std::string& path, const ReadOptions& options) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return not_found(path, ": no such file");
    return invalid_argument(path, ": cannot open: ", std::strerror(errno));
  }
  struct stat st {};
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return invalid_argument(path, ": not a regular file");
  }
  auto storage = std::make_shared<Storage>();
  storage->size = static_cast<uint64_t>(st.st_size);
  if (storage->size > 0) {
    void* m = mmap(nullptr, storage->size, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
    if (m == MAP_FAILED) {
      ::close(fd);
      return invalid_argument(path, ": cannot map: ", std::strerror(errno));
    }
    storage->map = m;
    storage->data = static_cast<const uint8_t*>(m);
  }
  ::close(fd);
  return parse(std::move(storage), path, options);
}

void Container::drop_section_pages(size_t i, uint64_t lo, uint64_t hi) const {
  if (storage_ == nullptr || storage_->map == nullptr || i >= sections_.size()) return;
  const uint64_t page = 4096;
  const uint64_t end = std::min<uint64_t>(
      storage_->size, sections_[i].offset + std::min<uint64_t>(hi, sections_[i].size));
  const uint64_t start = (sections_[i].offset + lo) / page * page;
  if (end > start)
    madvise(static_cast<uint8_t*>(storage_->map) + start, end - start, MADV_DONTNEED);
}

void Container::copy_section(size_t i, uint8_t* dst) const {
  const std::string_view b = bytes(i);
  const uint64_t step = 64u << 20;  // copy and let go 64 MiB at a time
  for (uint64_t at = 0; at < b.size(); at += step) {
    const uint64_t n = std::min<uint64_t>(step, b.size() - at);
    std::memcpy(dst + at, b.data() + at, n);
    drop_section_pages(i, at, at + n);
  }
}

void Container::drop_resident_pages() const {
  if (storage_ == nullptr || storage_->map == nullptr) return;
  if (shared_.empty()) {
    madvise(storage_->map, storage_->size, MADV_DONTNEED);
    return;
  }
  for (size_t i = 0; i < sections_.size(); ++i) {  // what is shared stays as it is
    if (std::find(shared_.begin(), shared_.end(), i) == shared_.end()) drop_section_pages(i);
  }
}

std::shared_ptr<uint8_t> Container::share_section(size_t i) {
  if (storage_ == nullptr || i >= sections_.size()) return nullptr;
  shared_.push_back(i);
  uint8_t* base = storage_->map != nullptr ? static_cast<uint8_t*>(storage_->map)
                                           : reinterpret_cast<uint8_t*>(storage_->owned.data());
  return std::shared_ptr<uint8_t>(storage_, base + sections_[i].offset);
}

StatusOr<Container> Container::from_bytes(std::string bytes, const std::string& name,
                                          const ReadOptions& options) {
  auto storage = std::make_shared<Storage>();
  storage->owned = std::move(bytes);
  storage->data = reinterpret_cast<const uint8_t*>(storage->owned.data());
  storage->size = storage->owned.size();
  return parse(std::move(storage), name, options);
}

StatusOr<Container> Container::parse(std::shared_ptr<Storage> s, const std::string& name,
                                     const ReadOptions& options) {
  const uint8_t* p = s->data;
  const uint64_t n = s->size;
  if (n >= kManifestMagic.size() && std::memcmp(p, kManifestMagic.data(), 8) == 0)
    return invalid_argument(name, ": a manifest of a split build, not an MXQ part");
  if (n < kMagic.size() || std::memcmp(p, kMagic.data(), 8) != 0)
    return invalid_argument(name, ": not a qbc MXQ file (bad magic)");
  if (n < kHeaderBytes)
    return data_loss(name, ": truncated header (", n, " of ", kHeaderBytes, " bytes)");
  const uint16_t major = get<uint16_t>(p + kOffMajor);
  if (major != kMajorVersion)
    return invalid_argument(name, ": MXQ format version ", major, ".", get<uint16_t>(p + kOffMinor),
                            "; this reader reads version ", kMajorVersion, ".x");
  if (get<uint32_t>(p + kOffEndian) != kEndianMark)
    return invalid_argument(name, ": endianness mark ", get<uint32_t>(p + kOffEndian),
                            " (expected little-endian 0x01020304)");
  if (get<uint64_t>(p + kOffCheck) != header_checksum(p))
    return data_loss(name, ": header checksum mismatch (the header is corrupt)");
  if (!all_zero(p + kOffReserved, kOffCheck - kOffReserved))
    return data_loss(name, ": reserved header bytes are not zero");
  Container c;
  c.path_ = name;
  c.minor_ = get<uint16_t>(p + kOffMinor);
  const uint32_t header_size = get<uint32_t>(p + kOffHeaderSize);
  const uint32_t alignment = get<uint32_t>(p + kOffAlignment);
  const uint64_t file_size = get<uint64_t>(p + kOffFileSize);
  const uint64_t table = get<uint64_t>(p + kOffTable);
  const uint32_t count = get<uint32_t>(p + kOffCount);
  const uint32_t entry_size = get<uint32_t>(p + kOffEntrySize);
  HeaderInfo& h = c.header_;
  h.required_features = get<uint64_t>(p + kOffRequired);
  h.optional_features = get<uint64_t>(p + kOffOptional);
  h.target_word = get<uint64_t>(p + kOffTarget);
  h.part_index = get<uint32_t>(p + kOffPartIndex);
  h.part_count = get<uint32_t>(p + kOffPartCount);
  std::memcpy(h.model_hash.data(), p + kOffModelHash, 16);
  if (header_size < kHeaderBytes || header_size > kMaxHeaderBytes)
    return data_loss(name, ": header size ", header_size, " (", kHeaderBytes, "..", kMaxHeaderBytes,
                     ")");
  if (alignment != kAlignment)
    return data_loss(name, ": section alignment ", alignment, " (expected ", kAlignment, ")");
  // A file shorter than its header says is reported at the first section it cuts (below).
  if (file_size < n)
    return data_loss(name, ": the file has ", n, " bytes but its header says ", file_size);
  if (const uint64_t unknown = h.required_features & ~kKnownRequiredFeatures; unknown != 0)
    return unimplemented(name, ": required feature bits 0x", std::hex, unknown,
                         " are unknown to this reader (a newer qbc wrote the file)");
  if (h.part_count == 0 || h.part_index >= h.part_count)
    return data_loss(name, ": part ", h.part_index, " of ", h.part_count);
  if (entry_size < kEntryBytes || entry_size > kMaxEntryBytes)
    return data_loss(name, ": section entry size ", entry_size);
  if (count > kMaxSections)
    return data_loss(name, ": ", count, " sections (at most ", kMaxSections, ")");
  if (table != header_size)
    return data_loss(name, ": section table at ", table, ", expected right after the header (",
                     header_size, ")");
  const uint64_t table_end = table + uint64_t{count} * entry_size;  // < 2^27: no overflow
  if (table_end > n)
    return data_loss(name, ": the section table (", count, " entries) ends at ", table_end,
                     ", past the end of the file (", n, " bytes",
                     file_size > n ? "; truncated" : "", ")");
  if (digest_of(p + table, table_end - table) !=
      Digest(*reinterpret_cast<const Digest*>(p + kOffTableDigest)))
    return data_loss(name, ": section table digest mismatch (the table is corrupt)");
  if (!all_zero(p + kHeaderBytes, header_size - kHeaderBytes) && c.minor_ == kMinorVersion)
    return data_loss(name, ": header bytes past ", kHeaderBytes, " are not zero");
  c.sections_.reserve(count);
  uint64_t expect = align_up(table_end, kAlignment);
  uint64_t prev_end = table_end;
  for (uint32_t i = 0; i < count; ++i) {
    const uint8_t* e = p + table + uint64_t{i} * entry_size;
    SectionEntry s;
    s.kind = get<uint32_t>(e + 0);
    s.bundle = get<int32_t>(e + 4);
    s.core = get<int32_t>(e + 8);
    s.block = get<int32_t>(e + 12);
    s.offset = get<uint64_t>(e + 16);
    s.size = get<uint64_t>(e + 24);
    std::memcpy(s.digest.data(), e + 32, 16);
    s.flags = get<uint32_t>(e + 48);
    c.sections_.push_back(s);
    const std::string at = c.where(i);
    if (!known_section_kind(s.kind)) return data_loss(at, ": unknown section kind ", s.kind);
    if (!all_zero(e + 52, entry_size - 52)) return data_loss(at, ": reserved bytes not zero");
    if (s.offset != expect) {
      return data_loss(at, ": starts at ", s.offset, "; sections follow each other in order, ",
                       "each at the next ", kAlignment, "-byte boundary (expected ", expect,
                       s.offset < prev_end ? ", it overlaps the previous one)" : ")");
    }
    if (s.size > n || s.offset > n - s.size)
      return data_loss(at, ": ", s.size, " bytes at ", s.offset, " run past the end of the file (",
                       n, " bytes",
                       file_size > n ? "; truncated: the header says " + std::to_string(file_size)
                                     : std::string(),
                       ")");
    if (!all_zero(p + prev_end, s.offset - prev_end))
      return data_loss(at, ": the padding before it is not zero");
    prev_end = s.offset + s.size;
    expect = align_up(prev_end, kAlignment);
  }
  if (prev_end != n) return data_loss(name, ": ", n - prev_end, " bytes after the last section");
  if (file_size != n)
    return data_loss(name, ": the file has ", n, " bytes but its header says ", file_size);
  c.storage_ = std::move(s);
  c.size_ = n;
  if (options.verify_digests) {
    // Large sections (weights, embedding) may be hashed in the background while the caller
    // decodes the rest (ReadOptions::defer_large_digests); the others now, on the host's
    // threads, the first mismatch in table order reported.
    std::vector<size_t> now, later;
    for (size_t i = 0; i < c.sections_.size(); ++i) {
      const bool large = c.sections_[i].size >= options.large_section_bytes;
      (options.defer_large_digests && large ? later : now).push_back(i);
    }
    QBC_RETURN_IF_ERROR(first_error_parallel(static_cast<int64_t>(now.size()), [&](int64_t k) {
      return c.verify_section(now[static_cast<size_t>(k)]);  // lets the pages go as it hashes
    }));
    if (!later.empty()) {
      c.pending_ = std::make_shared<Pending>();
      Pending* pending = c.pending_.get();
      pending->thread = std::thread([pending, copy = c, later] {
        // The large sections side by side too (a file's weights and its embedding).
        pending->status = first_error_parallel(static_cast<int64_t>(later.size()), [&](int64_t k) {
          return copy.verify_section(later[static_cast<size_t>(k)]);
        });
      });
    }
  }
  return c;
}

Status Container::finish_digests() const {
  if (pending_ == nullptr) return ok_status();
  if (pending_->thread.joinable()) pending_->thread.join();
  return pending_->status;
}

std::string_view Container::bytes(size_t i) const {
  const SectionEntry& e = sections_.at(i);
  return {reinterpret_cast<const char*>(storage_->data + e.offset), static_cast<size_t>(e.size)};
}

std::string Container::where(size_t i) const {
  const SectionEntry& e = sections_.at(i);
  std::string s = path_ + ": section " + std::to_string(i) + " (" + section_kind_name(e.kind);
  if (e.kind == static_cast<uint32_t>(SectionKind::kCode))
    s += ", mode " + std::to_string(e.bundle) + ", core " + std::to_string(e.core);
  if (e.kind == static_cast<uint32_t>(SectionKind::kWeights) && e.block >= 0)
    s += ", from block " + std::to_string(e.block);
  return s + ")";
}

Status Container::verify_section(size_t i) const {
  const std::string_view b = bytes(i);
  // Streamed 64 MiB at a time, each piece's pages let go once hashed: a large section is
  // never resident whole (the same digest as in one call).
  const uint64_t step = 64u << 20;
  DigestStream ds;
  for (uint64_t at = 0; at < b.size(); at += step) {
    const uint64_t n = std::min<uint64_t>(step, b.size() - at);
    ds.update(b.data() + at, n);
    drop_section_pages(i, at, at + n);
  }
  const Digest d = ds.finish();
  if (d != sections_[i].digest)
    return data_loss(where(i), ": digest mismatch (the section is corrupt; ", digest_hex(d),
                     " instead of ", digest_hex(sections_[i].digest), ")");
  return ok_status();
}

}  // namespace qbc::mxq
