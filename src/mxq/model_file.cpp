// Model files: a single MXQ or a manifest and its parts (see qbc/mxq/model_file.h).
#include "qbc/mxq/model_file.h"

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>
#include <google/protobuf/stubs/logging.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <variant>

#include "meta_check.h"
#include "qbc/mxq/bundle_codec.h"
#include "qbc/support/cancel.h"
#include "qbc/support/file_util.h"
#include "qbc/support/hash.h"

namespace qbc::mxq {

int part_of_block(int block, bool after_blocks, const std::vector<std::pair<int, int>>& ranges) {
  if (block < 0) return after_blocks ? static_cast<int>(ranges.size()) - 1 : 0;
  for (size_t p = 0; p < ranges.size(); ++p)
    if (block >= ranges[p].first && block < ranges[p].second) return static_cast<int>(p);
  return static_cast<int>(ranges.size()) - 1;
}

namespace {

namespace fs = std::filesystem;

/// Deterministic protobuf bytes.
std::string serialize(const google::protobuf::MessageLite& m) {
  std::string out;
  {
    google::protobuf::io::StringOutputStream zs(&out);
    google::protobuf::io::CodedOutputStream cs(&zs);
    cs.SetSerializationDeterministic(true);
    m.SerializeToCodedStream(&cs);
  }
  return out;
}

template <typename M>
Status parse(std::string_view bytes, const std::string& where, M* out) {
  google::protobuf::LogSilencer quiet;  // a damaged message is our error, not a protobuf log line
  google::protobuf::io::CodedInputStream in(reinterpret_cast<const uint8_t*>(bytes.data()),
                                            static_cast<int>(bytes.size()));
  in.SetRecursionLimit(32);
  if (bytes.size() > static_cast<size_t>(INT32_MAX) || !out->ParseFromCodedStream(&in) ||
      !in.ConsumedEntireMessage())
    return data_loss(where, ": not a valid ", out->GetTypeName(), " message");
  return ok_status();
}

std::string part_name(const fs::path& path, size_t i, size_t n) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "-%05zu-of-%05zu", i + 1, n);
  return path.stem().string() + buf + ".mxq";
}

constexpr uint32_t kCode = static_cast<uint32_t>(SectionKind::kCode);

struct PartSections {
  std::deque<std::string> owned;      ///< serialized messages (a deque: views into it stay valid)
  std::vector<SectionData> sections;  ///< views into `owned` or into the bundle and assets
};

}  // namespace

StatusOr<std::vector<std::pair<int, int>>> part_ranges(const std::vector<int>& split_blocks,
                                                       int blocks, const std::string& key) {
  std::vector<std::pair<int, int>> r;
  int begin = 0;
  for (size_t i = 0; i < split_blocks.size(); ++i) {
    const int b = split_blocks[i];
    if (b <= begin || b >= blocks)
      return invalid_argument(key, ": entry ", i, " is ", b,
                              "; boundaries must increase and lie in 1..", blocks - 1,
                              " (the model has ", blocks, " blocks)");
    r.emplace_back(begin, b);
    begin = b;
  }
  r.emplace_back(begin, blocks);
  return r;
}

std::string write_manifest(const pb::Manifest& m) {
  const std::string payload = serialize(m);
  std::string out(40, '\0');
  std::memcpy(out.data(), kManifestMagic.data(), 8);
  auto put = [&](size_t at, uint64_t v, int n) {
    for (int i = 0; i < n; ++i) out[at + static_cast<size_t>(i)] = static_cast<char>(v >> (8 * i));
  };
  put(8, kMajorVersion, 2);
  put(10, kMinorVersion, 2);
  put(12, kEndianMark, 4);
  put(16, payload.size(), 8);
  const Digest d = digest_of(payload.data(), payload.size());
  std::memcpy(out.data() + 24, d.data(), 16);
  return out + payload;
}

StatusOr<pb::Manifest> parse_manifest(std::string_view b, const std::string& name) {
  if (b.size() < 40 || std::memcmp(b.data(), kManifestMagic.data(), 8) != 0)
    return invalid_argument(name, ": not a qbc MXQ manifest");
  auto get = [&](size_t at, int n) {
    uint64_t v = 0;
    for (int i = 0; i < n; ++i)
      v |= static_cast<uint64_t>(static_cast<uint8_t>(b[at + static_cast<size_t>(i)])) << (8 * i);
    return v;
  };
  if (get(8, 2) != kMajorVersion)
    return invalid_argument(name, ": manifest format version ", get(8, 2), "; this reader reads ",
                            kMajorVersion, ".x");
  if (get(12, 4) != kEndianMark) return invalid_argument(name, ": bad endianness mark");
  const uint64_t size = get(16, 8);
  if (size != b.size() - 40)
    return data_loss(name, ": manifest payload of ", size, " bytes, the file holds ",
                     b.size() - 40);
  const std::string_view payload = b.substr(40);
  Digest d;
  std::memcpy(d.data(), b.data() + 24, 16);
  if (digest_of(payload.data(), payload.size()) != d)
    return data_loss(name, ": manifest digest mismatch (the file is corrupt)");
  pb::Manifest m;
  QBC_RETURN_IF_ERROR(parse(payload, name, &m));
  if (m.parts_size() < 1 || m.parts_size() > 4096)
    return data_loss(name, ": ", m.parts_size(), " parts (1..4096)");
  for (int i = 0; i < m.parts_size(); ++i) {
    const std::string& f = m.parts(i).file();
    if (f.empty() || f.size() > 255 || f.find('/') != std::string::npos || f == "." || f == "..")
      return data_loss(name, ": part ", i + 1, " has the file name '", f.substr(0, 64),
                       "' (a plain name beside the manifest)");
  }
  return m;
}

namespace {

/// The required feature bits the code of `b` needs for its weight images: bit 1 when a matmul
/// reads zero points from an i4 SRAM buffer or a requant weight scales from an f16 one, bit 2
/// when a matmul reads zero points from an i8 buffer, bit 9 when a requant adds float offsets
/// (or a matmul writes their code sums).
uint64_t compact_weight_features(const isa::Bundle& b) {
  auto type = [&b](const isa::Ref& r) {
    return r.valid() && static_cast<size_t>(r.buffer) < b.buffers.size()
               ? b.buffers[static_cast<size_t>(r.buffer)].dtype
               : isa::DType::kI32;
  };
  uint64_t bits = 0;
  for (const isa::Mode& m : b.modes) {
    for (const isa::Program* p : m.programs()) {
      for (const isa::CoreProgram& c : p->cores) {
        for (const isa::Instr& in : c.code) {
          const auto* mm = std::get_if<isa::MatMul>(&in.op);
          const auto* rq = std::get_if<isa::Requant>(&in.op);
          if (mm != nullptr && type(mm->wzero) == isa::DType::kI4) bits |= kFeatureCompactWeights;
          if (mm != nullptr && type(mm->wzero) == isa::DType::kI8) bits |= kFeatureZeroPointsI8;
          if (rq != nullptr && type(rq->wscale) == isa::DType::kF16) bits |= kFeatureCompactWeights;
          if (rq != nullptr && rq->wmin.valid()) bits |= kFeatureWeightOffsets;
          if (mm != nullptr && mm->xsum.valid()) bits |= kFeatureWeightOffsets;
        }
      }
    }
  }
  return bits;
}

/// Whether a mode of `b` has a span program (required feature bit 6).
bool has_span_programs(const isa::Bundle& b) {
  return std::any_of(b.modes.begin(), b.modes.end(),
                     [](const isa::Mode& m) { return m.has_span(); });
}

/// Whether an attention of `b` stores KV records with per-token fields or packs them (required
/// feature bit 8).
bool has_kv_records(const isa::Bundle& b) {
  return std::any_of(b.attentions.begin(), b.attentions.end(),
                     [](const isa::AttnDesc& a) { return a.kv_records(); });
}

/// True when every value of `v` is exactly a bf16 (its low 16 bits zero, so widening the
/// bf16 gives it back): then `*out` holds the bf16 values. One pass, stopping at the first
/// value that is not (an fp32 table fails at once).
bool bf16_exact(const float* v, int64_t n, std::vector<uint16_t>* out) {
  out->clear();
  out->reserve(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    uint32_t bits;
    std::memcpy(&bits, v + i, sizeof(bits));
    if ((bits & 0xFFFFu) != 0) {
      std::vector<uint16_t>().swap(*out);  // gives the reservation back
      return false;
    }
    out->push_back(static_cast<uint16_t>(bits >> 16));
  }
  return n > 0;
}

/// What write_model refuses before anything is laid out: an image that is not the plan's,
/// a shape-only bundle, a bundle without its host embedding.
Status check_writable(const std::string& path, const isa::Bundle& b) {
  if (b.image_size() != b.dram.weights && b.image_size() != 0)
    return internal_error("the weight image has ", b.image_size(), " bytes, the plan ",
                          b.dram.weights);
  if (b.image_size() == 0 && b.dram.weights > 0)
    return invalid_argument(path, ": the bundle has no weights (a shape-only plan)");
  if (b.embedding_size() != b.embed_rows * b.hidden)
    return invalid_argument(path, ": the bundle has no host embedding");
  return ok_status();
}

/// The weight image cut at part boundaries: buffers in image order, each to its part; the
/// [begin, end) image range of each part, written into `layout` as its weight ranges.
StatusOr<std::vector<std::pair<int64_t, int64_t>>> cut_image(
    const isa::Bundle& b, const std::vector<std::pair<int, int>>& ranges, pb::Layout* layout) {
  const size_t nparts = ranges.size();
  std::vector<int> order;
  for (size_t i = 0; i < b.buffers.size(); ++i)
    if (b.buffers[i].space == isa::Space::kDram && b.buffers[i].purpose == isa::Purpose::kWeights)
      order.push_back(static_cast<int>(i));
  std::sort(order.begin(), order.end(),
            [&](int x, int y) { return b.buffers[x].offset < b.buffers[y].offset; });
  std::vector<std::pair<int64_t, int64_t>> cut(nparts, {-1, -1});  // [begin, end) per part
  bool seen_block = false;
  int last_part = 0;
  for (int i : order) {
    const isa::Buffer& buf = b.buffers[static_cast<size_t>(i)];
    seen_block = seen_block || buf.block >= 0;
    const int p = part_of_block(buf.block, seen_block, ranges);
    if (p < last_part)
      return internal_error("weight buffer '", buf.name, "' of block ", buf.block,
                            " lies after the weights of a later part");
    last_part = p;
    auto& c = cut[static_cast<size_t>(p)];
    if (c.first < 0) c.first = buf.offset - b.image_base;
    c.second = buf.offset - b.image_base + buf.bytes;
  }
  // Close gaps: each part's range starts where the previous one ends.
  int64_t at = 0;
  for (size_t p = 0; p < nparts; ++p) {
    if (cut[p].first < 0) cut[p] = {at, at};
    cut[p].first = at;
    at = cut[p].second;
  }
  cut.back().second = b.image_size();
  for (size_t p = 0; p < nparts; ++p) {
    pb::WeightRange* w = layout->add_weights();
    w->set_block(ranges[p].first);
    w->set_image_offset(cut[p].first);
    w->set_bytes(cut[p].second - cut[p].first);
    w->set_part(static_cast<int32_t>(p));
  }
  return cut;
}

/// The sections of every part but the metadata, whose digests make the model hash. Weights,
/// embedding and assets are views of the bundle and the request, not copies.
struct ModelSections {
  explicit ModelSections(size_t nparts) : parts(nparts) {}
  void add_view(size_t p, SectionKind kind, std::string_view bytes, int bundle = -1, int core = -1,
                int block = -1) {
    SectionEntry e;
    e.kind = static_cast<uint32_t>(kind);
    e.bundle = bundle;
    e.core = core;
    e.block = block;
    const Digest d = digest_of(bytes.data(), bytes.size());
    hash_input.append(reinterpret_cast<const char*>(d.data()), d.size());
    parts[p].sections.push_back({e, bytes, d});
  }
  void add_owned(size_t p, SectionKind kind, std::string bytes, int bundle = -1, int core = -1) {
    parts[p].owned.push_back(std::move(bytes));
    add_view(p, kind, parts[p].owned.back(), bundle, core);
  }

  std::vector<PartSections> parts;
  std::string hash_input;
  bool bf16 = true;                  ///< the embedding is stored as bf16
  bool i8 = false;                   ///< the embedding is stored as int8 codes + row scales
  std::vector<uint16_t> bf16_table;  ///< its bf16 values, when converted from fp32 here
  std::string i8_table;              ///< the 8-bit section: fp32 row scales, then the codes
};

/// The 8-bit table's section: embed_rows fp32 scales (little-endian), then the int8 codes.
std::string_view embedding_i8_bytes(const isa::Bundle& b, ModelSections* s) {
  s->bf16 = false;
  s->i8 = true;
  const size_t scale_bytes = static_cast<size_t>(b.embed_rows) * sizeof(float);
  const size_t code_bytes = static_cast<size_t>(b.embedding_size());
  s->i8_table.resize(scale_bytes + code_bytes);
  std::memcpy(s->i8_table.data(), b.embedding_scales(), scale_bytes);
  std::memcpy(s->i8_table.data() + scale_bytes, b.embedding_codes(), code_bytes);
  return s->i8_table;
}

/// The embedding as bf16 when that loses nothing (a bf16 source: half the bytes), else fp32.
std::string_view embedding_bytes(const isa::Bundle& b, ModelSections* s) {
  if (b.embedding_is_i8()) return embedding_i8_bytes(b, s);
  if (!b.embedding_bf16_view.empty())
    return std::string_view(reinterpret_cast<const char*>(b.embedding_bf16_view.data),
                            static_cast<size_t>(b.embedding_size()) * 2);
  if (bf16_exact(b.embedding_data(), b.embedding_size(), &s->bf16_table))
    return std::string_view(reinterpret_cast<const char*>(s->bf16_table.data()),
                            s->bf16_table.size() * 2);
  s->bf16 = false;
  return std::string_view(reinterpret_cast<const char*>(b.embedding_data()),
                          static_cast<size_t>(b.embedding_size()) * 4);
}

/// Part 0: layout, code, debug map, embedding and assets; every part: its weights.
Status add_sections(const isa::Bundle& b, const WriteRequest& req, const pb::Layout& layout,
                    const std::vector<std::pair<int64_t, int64_t>>& cut,
                    const std::vector<std::pair<int, int>>& ranges, ModelSections* s) {
  s->add_owned(0, SectionKind::kLayout, serialize(layout));
  for (size_t m = 0; m < b.modes.size(); ++m) {
    for (size_t c = 0; c < b.modes[m].decode.cores.size(); ++c) {
      QBC_ASSIGN_OR_RETURN(pb::CoreCode code, encode_code(b, m, c));
      s->add_owned(0, SectionKind::kCode, serialize(code), static_cast<int>(m),
                   static_cast<int>(c));
    }
  }
  s->add_owned(0, SectionKind::kDebug, serialize(encode_debug(b)));
  // A feature bundle (a vision tower) has no token embedding.
  if (b.kind != isa::BundleKind::kFeatures)
    s->add_view(0, SectionKind::kEmbedding, embedding_bytes(b, s));
  for (const HostAsset& a : req.assets) s->add_view(0, SectionKind::kAsset, a.bytes);
  if (!req.vision.empty()) s->add_view(0, SectionKind::kVision, req.vision);
  for (size_t p = 0; p < cut.size(); ++p) {
    s->add_view(p, SectionKind::kWeights,
                std::string_view(reinterpret_cast<const char*>(b.image_data()) + cut[p].first,
                                 static_cast<size_t>(cut[p].second - cut[p].first)),
                -1, -1, ranges[p].first);
  }
  return ok_status();
}

/// The files of one write, laid out, not built: their sections stay views of the bundle (the
/// weights image and the embedding are most of it), hashed and written piece by piece.
struct OutFiles {
  struct File {
    std::string path;
    ContainerLayout layout;
    std::string digest;
  };
  /// Adds a file; returns its digest.
  std::string add(std::string file, ContainerLayout layout) {
    DigestStream ds;
    ds.update(layout.head.data(), layout.head.size());
    for (const ContainerLayout::Piece& piece : layout.body) {
      ds.update(piece.bytes.data(), piece.bytes.size());
      ds.update(zeros.data(), piece.pad);
    }
    files.push_back({std::move(file), std::move(layout), digest_hex(ds.finish())});
    return files.back().digest;
  }

  std::deque<std::string> owned;  ///< section bytes the files point into (metadata, manifest)
  const std::string zeros = std::string(kAlignment, '\0');  ///< every pad is shorter
  std::vector<File> files;
};

/// The metadata of part `p` of `nparts` (part 0 lists the asset sections, which follow
/// meta, layout, code, debug and embedding).
pb::Meta part_meta(const isa::Bundle& b, const WriteRequest& req, const ModelSections& s,
                   const std::vector<std::pair<int, int>>& ranges, const Digest& model_hash,
                   size_t p) {
  pb::Meta meta = req.meta;
  meta.clear_schemes();
  for (const isa::Mode& m : b.modes) meta.add_schemes(isa::scheme_name(m.scheme));
  meta.set_target(b.target);
  meta.set_model_hash(digest_hex(model_hash));
  meta.set_blocks(req.blocks);
  meta.set_part_index(static_cast<int32_t>(p));
  meta.set_part_count(static_cast<int32_t>(ranges.size()));
  meta.set_block_begin(ranges[p].first);
  meta.set_block_end(ranges[p].second);
  meta.clear_assets();
  if (p != 0) return meta;
  int32_t index = 1;
  for (const SectionData& d : s.parts[0].sections) {
    if (d.entry.kind == static_cast<uint32_t>(SectionKind::kAsset)) break;
    ++index;
  }
  for (const HostAsset& a : req.assets) {
    pb::Asset* x = meta.add_assets();
    x->set_name(a.name);
    x->set_section(index++);
  }
  return meta;
}

/// Each part's container (its metadata first), then, for a split build, the manifest.
void lay_out_files(const std::string& path, const fs::path& dir, const isa::Bundle& b,
                   const WriteRequest& req, const ModelSections& s,
                   const std::vector<std::pair<int, int>>& ranges, OutFiles* out) {
  const size_t nparts = ranges.size();
  const bool split = nparts > 1;
  const fs::path target(path);
  const Digest model_hash = digest_of(s.hash_input.data(), s.hash_input.size());
  const uint64_t compact = compact_weight_features(b);
  pb::Manifest manifest;
  manifest.set_producer(req.meta.producer());
  manifest.set_producer_version(req.meta.producer_version());
  manifest.set_model_hash(digest_hex(model_hash));
  const uint64_t word =
      target_word(b.target, b.target_cores, b.sram_bytes, b.dram_bytes, b.dma_align);
  for (size_t p = 0; p < nparts; ++p) {
    const std::string& meta_bytes =
        out->owned.emplace_back(serialize(part_meta(b, req, s, ranges, model_hash, p)));
    std::vector<SectionData> sections;
    SectionEntry me;
    me.kind = static_cast<uint32_t>(SectionKind::kMeta);
    sections.push_back({me, meta_bytes});
    for (const SectionData& d : s.parts[p].sections) sections.push_back(d);
    HeaderInfo h;
    if (p == 0 && s.bf16) h.required_features |= kFeatureEmbeddingBf16;
    if (p == 0 && s.i8) h.required_features |= kFeatureEmbeddingI8;
    h.required_features |= compact;
    if (b.rope_inputs.present()) h.required_features |= kFeatureRopeInputs;
    if (b.rope_inputs.present() && b.rope_inputs.interleaved)
      h.required_features |= kFeatureInterleavedMRope;
    if (has_span_programs(b)) h.required_features |= kFeatureSpanPrograms;
    if (!b.deepstack.empty()) h.required_features |= kFeatureDeepStack;
    if (has_kv_records(b)) h.required_features |= kFeatureKvRecords;
    if (b.kind == isa::BundleKind::kFeatures || !req.vision.empty())
      h.required_features |= kFeatureVision;
    h.target_word = word;
    h.part_index = static_cast<uint32_t>(p);
    h.part_count = static_cast<uint32_t>(nparts);
    h.model_hash = model_hash;
    ContainerLayout layout = layout_container(h, sections);
    const fs::path file = split ? dir / part_name(target, p, nparts) : target;
    const int64_t size = static_cast<int64_t>(layout.size);
    const std::string digest = out->add(file.string(), std::move(layout));
    if (split) {
      pb::ManifestPart* mp = manifest.add_parts();
      mp->set_file(file.filename().string());
      mp->set_bytes(size);
      mp->set_xxh3_128(digest);
      mp->set_block_begin(ranges[p].first);
      mp->set_block_end(ranges[p].second);
    }
  }
  if (split) {  // the manifest: one piece of bytes
    ContainerLayout m;
    m.head = write_manifest(manifest);
    m.size = m.head.size();
    out->add(target.string(), std::move(m));
  }
}

/// Writes the files under temporary names, then moves them into place, the loadable file
/// last; on any failure (or cancellation) nothing is left behind.
StatusOr<std::vector<WrittenFile>> commit_files(const OutFiles& out) {
  std::error_code ec;
  std::vector<std::string> temps;
  auto cleanup = [&]() {
    for (const std::string& t : temps) fs::remove(t, ec);
  };
  for (const OutFiles::File& f : out.files) {
    const std::string& final_path = f.path;
    const fs::path fp(final_path);
    const std::string tmp =
        (fp.parent_path() / ("." + fp.filename().string() + ".tmp." + std::to_string(::getpid())))
            .string();
    std::ofstream o(tmp, std::ios::binary | std::ios::trunc);
    if (o) temps.push_back(tmp);
    o.write(f.layout.head.data(), static_cast<std::streamsize>(f.layout.head.size()));
    for (const ContainerLayout::Piece& piece : f.layout.body) {
      if (Status c = cancel::check("writing " + final_path); !c.ok()) {
        o.close();
        cleanup();
        return c;
      }
      o.write(piece.bytes.data(), static_cast<std::streamsize>(piece.bytes.size()));
      o.write(out.zeros.data(), static_cast<std::streamsize>(piece.pad));
    }
    o.flush();
    if (!o) {
      cleanup();
      return invalid_argument(final_path, ": cannot write: ", std::strerror(errno));
    }
  }
  std::vector<WrittenFile> written;
  for (size_t i = 0; i < out.files.size(); ++i) {
    fs::rename(temps[i], out.files[i].path, ec);
    if (ec) {
      const std::string msg = ec.message();
      cleanup();
      for (size_t j = 0; j < i; ++j) fs::remove(out.files[j].path, ec);
      return invalid_argument(out.files[i].path, ": cannot move output into place: ", msg);
    }
    written.push_back(
        {out.files[i].path, static_cast<int64_t>(out.files[i].layout.size), out.files[i].digest});
  }
  return written;
}

/// The sections of a write of `req` (`path` names it in errors) and the parts' block ranges:
/// what write_model and write_model_bytes share before they lay out their files.
StatusOr<std::unique_ptr<ModelSections>> model_sections(const std::string& path,
                                                        const WriteRequest& req,
                                                        std::vector<std::pair<int, int>>* ranges) {
  const isa::Bundle& b = *req.bundle;
  QBC_RETURN_IF_ERROR(check_writable(path, b));
  QBC_ASSIGN_OR_RETURN(*ranges,
                       part_ranges(req.split_blocks, std::max(req.blocks, 1), "splitBlocks"));
  pb::Layout layout = encode_layout(b);
  QBC_ASSIGN_OR_RETURN(auto cut, cut_image(b, *ranges, &layout));
  auto sections = std::make_unique<ModelSections>(ranges->size());
  QBC_RETURN_IF_ERROR(add_sections(b, req, layout, cut, *ranges, sections.get()));
  return sections;
}

}  // namespace

StatusOr<std::vector<WrittenFile>> write_model(const std::string& path, const WriteRequest& req) {
  std::vector<std::pair<int, int>> ranges;
  QBC_ASSIGN_OR_RETURN(const std::unique_ptr<ModelSections> sections,
                       model_sections(path, req, &ranges));
  const fs::path out(path);
  const fs::path dir = out.has_parent_path() ? out.parent_path() : fs::path(".");
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    return not_found(path, ": output folder ", dir.string(), " does not exist");
  OutFiles files;
  lay_out_files(path, dir, *req.bundle, req, *sections, ranges, &files);
  return commit_files(files);
}

StatusOr<std::string> write_model_bytes(const WriteRequest& req, std::string* model_hash) {
  const std::string name = "<in memory>";
  if (!req.split_blocks.empty())
    return invalid_argument(name, ": a model written to memory is one file (no splitBlocks)");
  std::vector<std::pair<int, int>> ranges;
  QBC_ASSIGN_OR_RETURN(const std::unique_ptr<ModelSections> sections,
                       model_sections(name, req, &ranges));
  OutFiles files;
  lay_out_files(name, fs::path("."), *req.bundle, req, *sections, ranges, &files);
  if (model_hash != nullptr)
    *model_hash = digest_hex(digest_of(sections->hash_input.data(), sections->hash_input.size()));
  const ContainerLayout& l = files.files.at(0).layout;
  std::string bytes;
  bytes.reserve(static_cast<size_t>(l.size));
  bytes.append(l.head);
  for (const ContainerLayout::Piece& piece : l.body) {
    bytes.append(piece.bytes.data(), piece.bytes.size());
    bytes.append(piece.pad, '\0');
  }
  return bytes;
}

const HostAsset* LoadedModel::asset(const std::string& name) const {
  for (const HostAsset& a : assets)
    if (a.name == name) return &a;
  return nullptr;
}

bool is_mxq_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  char magic[8] = {};
  if (!in.read(magic, 8)) return false;
  return std::memcmp(magic, kMagic.data(), 8) == 0 ||
         std::memcmp(magic, kManifestMagic.data(), 8) == 0;
}

namespace {

/// Index of the one section of `kind` in `c`, or -1; an error when there are several.
StatusOr<int> unique_section(const Container& c, SectionKind kind) {
  int found = -1;
  for (size_t i = 0; i < c.sections().size(); ++i) {
    if (c.sections()[i].kind != static_cast<uint32_t>(kind)) continue;
    if (found >= 0)
      return data_loss(c.where(i), ": a second ", section_kind_name(c.sections()[i].kind),
                       " section");
    found = static_cast<int>(i);
  }
  return found;
}

/// Hands out->bundle out through a pointer that keeps the sections its views point into (the
/// mapping, which this layer owns) alive as long as the bundle is in use.
void hold_storage(LoadedModel* out, std::vector<std::shared_ptr<uint8_t>> held) {
  if (held.empty()) return;
  auto* moved = new isa::Bundle(std::move(*out->bundle));
  out->bundle =
      std::shared_ptr<isa::Bundle>(moved, [held = std::move(held)](isa::Bundle* p) { delete p; });
}

/// The (part, section) of each part's weights sections.
using WeightSections = std::vector<std::vector<std::pair<size_t, size_t>>>;

/// Opens the parts into out->containers: each is the part of the manifest (its size) and of
/// the build (its model hash) it says it is, in order; only part 0 holds sections other than
/// weights. out->meta is part 0's metadata.
Status check_parts(std::vector<Container> opened, const std::vector<std::string>& files,
                   const pb::Manifest* manifest, LoadedModel* out, WeightSections* weights) {
  const size_t n = opened.size();
  weights->assign(n, {});
  for (size_t p = 0; p < n; ++p) {
    const std::string& f = files[p];
    Container c = std::move(opened[p]);
    if (manifest != nullptr) {
      const pb::ManifestPart& mp = manifest->parts(static_cast<int>(p));
      if (static_cast<int64_t>(c.file_size()) != mp.bytes())
        return data_loss(f, ": part ", p + 1, " of the manifest has ", c.file_size(),
                         " bytes, the manifest lists ", mp.bytes(), " (from another build?)");
    }
    if (manifest == nullptr && c.header().part_count > 1)
      return invalid_argument(f, ": is part ", c.header().part_index + 1, " of ",
                              c.header().part_count, " of a split build; load its manifest");
    if (c.header().part_index != p || c.header().part_count != n)
      return data_loss(f, ": is part ", c.header().part_index + 1, " of ", c.header().part_count,
                       ", expected part ", p + 1, " of ", n, " (parts reordered or mixed?)");
    QBC_ASSIGN_OR_RETURN(int mi, unique_section(c, SectionKind::kMeta));
    if (mi != 0) return data_loss(f, ": the first section is not the metadata");
    pb::Meta meta;
    QBC_RETURN_IF_ERROR(parse(c.bytes(0), c.where(0), &meta));
    if (meta.model_hash() != digest_hex(c.header().model_hash))
      return data_loss(c.where(0), ": model hash ", meta.model_hash().substr(0, 32),
                       " differs from the header's ", digest_hex(c.header().model_hash));
    if (manifest != nullptr && meta.model_hash() != manifest->model_hash())
      return data_loss(f, ": part of build ", meta.model_hash().substr(0, 32),
                       ", the manifest is of build ", manifest->model_hash().substr(0, 32),
                       " (a part from another build)");
    if (p > 0 && meta.model_hash() != out->meta.model_hash())
      return data_loss(f, ": part of build ", meta.model_hash().substr(0, 32), ", part 1 is of ",
                       out->meta.model_hash());
    if (meta.part_index() != static_cast<int>(p) || meta.part_count() != static_cast<int>(n))
      return data_loss(c.where(0), ": says part ", meta.part_index() + 1, " of ",
                       meta.part_count());
    if (p == 0) out->meta = meta;
    // Sections each part may hold.
    for (size_t i = 1; i < c.sections().size(); ++i) {
      const SectionEntry& e = c.sections()[i];
      const auto kind = static_cast<SectionKind>(e.kind);
      if (kind == SectionKind::kWeights) {
        (*weights)[p].emplace_back(p, i);
      } else if (p != 0) {
        return data_loss(c.where(i), ": only the first part holds ", section_kind_name(e.kind),
                         " sections");
      }
    }
    out->containers.push_back(std::move(c));
  }
  return ok_status();
}

/// The code sections of part 0: one per mode and core of the layout, decoded into `b`;
/// `code` maps (mode, core) to its section.
Status load_code(const Container& c0, const std::string& file, isa::Bundle& b,
                 std::map<std::pair<int, int>, size_t>* code) {
  for (size_t i = 0; i < c0.sections().size(); ++i) {
    const SectionEntry& e = c0.sections()[i];
    if (e.kind != kCode) continue;
    if (e.bundle < 0 || static_cast<size_t>(e.bundle) >= b.modes.size() || e.core < 0 ||
        static_cast<size_t>(e.core) >= b.modes[static_cast<size_t>(e.bundle)].prefill.cores.size())
      return data_loss(c0.where(i), ": no such mode or core in the layout");
    if (!code->emplace(std::make_pair(e.bundle, e.core), i).second)
      return data_loss(c0.where(i), ": a second code section for this mode and core");
    pb::CoreCode cc;
    QBC_RETURN_IF_ERROR(parse(c0.bytes(i), c0.where(i), &cc));
    QBC_RETURN_IF_ERROR(decode_code(cc, static_cast<size_t>(e.bundle), static_cast<size_t>(e.core),
                                    c0.where(i), &b));
  }
  for (size_t m = 0; m < b.modes.size(); ++m)
    for (size_t c = 0; c < b.modes[m].prefill.cores.size(); ++c)
      if (code->count({static_cast<int>(m), static_cast<int>(c)}) == 0)
        return data_loss(file, ": no code section for mode ", m, " (",
                         isa::scheme_name(b.modes[m].scheme), ") core ", c);
  if (b.rope_inputs.present() != ((c0.header().required_features & kFeatureRopeInputs) != 0))
    return data_loss(file, b.rope_inputs.present()
                               ? ": the layout has rope-table inputs but required feature bit 3 "
                                 "is not set"
                               : ": required feature bit 3 is set but the layout has no "
                                 "rope-table inputs");
  const bool interleaved = b.rope_inputs.present() && b.rope_inputs.interleaved;
  if (interleaved != ((c0.header().required_features & kFeatureInterleavedMRope) != 0))
    return data_loss(file, interleaved
                               ? ": the layout's rope-table inputs are interleaved but required "
                                 "feature bit 7 is not set"
                               : ": required feature bit 7 is set but the layout has no "
                                 "interleaved rope-table inputs");
  if (b.deepstack.empty() == ((c0.header().required_features & kFeatureDeepStack) != 0))
    return data_loss(file, b.deepstack.empty()
                               ? ": required feature bit 10 is set but the layout has no "
                                 "DeepStack inputs"
                               : ": the layout has DeepStack inputs but required feature bit 10 "
                                 "is not set");
  if (has_span_programs(b) != ((c0.header().required_features & kFeatureSpanPrograms) != 0))
    return data_loss(file, has_span_programs(b)
                               ? ": the layout has span programs but required feature bit 6 is "
                                 "not set"
                               : ": required feature bit 6 is set but the layout has no span "
                                 "programs");
  if (has_kv_records(b) != ((c0.header().required_features & kFeatureKvRecords) != 0))
    return data_loss(file, has_kv_records(b)
                               ? ": the layout's attentions store KV records (the KV4 rules) but "
                                 "required feature bit 8 is not set"
                               : ": required feature bit 8 is set but no attention of the layout "
                                 "stores KV records");
  const uint64_t needed = compact_weight_features(b);
  if ((c0.header().required_features & needed & kFeatureCompactWeights) !=
      (needed & kFeatureCompactWeights))
    return data_loss(file,
                     ": the code reads fp16 weight scales or 4-bit zero points (the compact "
                     "weight image) but required feature bit 1 is not set");
  if ((c0.header().required_features & needed & kFeatureZeroPointsI8) !=
      (needed & kFeatureZeroPointsI8))
    return data_loss(file,
                     ": the code reads 8-bit zero points (the compact 8-bit group image) but "
                     "required feature bit 2 is not set");
  if ((needed & kFeatureWeightOffsets) != (c0.header().required_features & kFeatureWeightOffsets))
    return data_loss(file, (needed & kFeatureWeightOffsets) != 0
                               ? ": the code adds float weight offsets but required feature "
                                 "bit 9 is not set"
                               : ": required feature bit 9 is set but no instruction adds float "
                                 "weight offsets");
  return ok_status();
}

/// The debug map of part 0, with the counts the layout gives, and every instruction's node
/// and pass inside it.
Status load_debug(const Container& c0, const std::string& file, const pb::Layout& layout,
                  const std::map<std::pair<int, int>, size_t>& code, isa::Bundle& b) {
  QBC_ASSIGN_OR_RETURN(int di, unique_section(c0, SectionKind::kDebug));
  if (di < 0) return data_loss(file, ": no debug section");
  pb::DebugMap debug;
  QBC_RETURN_IF_ERROR(
      parse(c0.bytes(static_cast<size_t>(di)), c0.where(static_cast<size_t>(di)), &debug));
  QBC_RETURN_IF_ERROR(decode_debug(debug, c0.where(static_cast<size_t>(di)), &b));
  if (static_cast<int64_t>(b.nodes.size()) != layout.nodes() ||
      static_cast<int64_t>(b.passes.size()) != layout.passes())
    return data_loss(c0.where(static_cast<size_t>(di)), ": ", b.nodes.size(), " nodes and ",
                     b.passes.size(), " passes, the layout says ", layout.nodes(), " and ",
                     layout.passes());
  for (size_t m = 0; m < b.modes.size(); ++m) {
    for (const isa::Program* prog : b.modes[m].programs()) {
      for (size_t c = 0; c < prog->cores.size(); ++c) {
        const auto& stream = prog->cores[c].code;
        for (size_t i = 0; i < stream.size(); ++i) {
          const isa::Instr& in = stream[i];
          if (in.node < -1 || in.node >= static_cast<int64_t>(b.nodes.size()) || in.pass < -1 ||
              in.pass >= static_cast<int64_t>(b.passes.size()))
            return data_loss(c0.where(code.at({static_cast<int>(m), static_cast<int>(c)})), ": ",
                             isa::phase_name(prog->phase), " instruction ", i, ": node ", in.node,
                             " / pass ", in.pass, " not in the debug map");
        }
      }
    }
  }
  return ok_status();
}

/// The 8-bit embedding section (feature bit 4), used in place: embed_rows fp32 scales, each
/// finite and at least 1e-8, then embed_rows × hidden int8 codes. Anything else is exit 2
/// naming the section.
Status load_embedding_i8(Container& c0, size_t ei, isa::Bundle& b,
                         std::vector<std::shared_ptr<uint8_t>>* held) {
  const std::string_view e = c0.bytes(ei);
  if ((c0.header().required_features & kFeatureEmbeddingBf16) != 0)
    return data_loss(c0.where(ei), ": both the bf16 and the int8 embedding feature bits are set");
  if (b.embed_rows <= 0 || b.hidden <= 0 || b.embed_rows > (int64_t{1} << 31) / b.hidden ||
      e.size() != static_cast<size_t>(b.embed_rows * (b.hidden + 4)))
    return data_loss(c0.where(ei), ": ", e.size(), " bytes for an [", b.embed_rows, ", ", b.hidden,
                     "] int8 table with fp32 row scales (expected rows x (hidden + 4))");
  held->push_back(c0.share_section(ei));
  const uint8_t* base = held->back().get();
  const auto* scales = reinterpret_cast<const float*>(base);
  for (int64_t r = 0; r < b.embed_rows; ++r) {
    if (!std::isfinite(scales[r]) || !(scales[r] >= 1e-8f))
      return data_loss(c0.where(ei), ": row ", r, " scale ", scales[r],
                       " is not a finite value of at least 1e-8");
  }
  b.embedding_row_scales_view = {scales, b.embed_rows};
  b.embedding_i8_view = {reinterpret_cast<const int8_t*>(base + b.embed_rows * 4),
                         b.embed_rows * b.hidden};
  return ok_status();
}

/// The embedding section of part 0, used in place (bf16 or fp32 by the header's feature bit).
Status load_embedding(Container& c0, const std::string& file, isa::Bundle& b,
                      std::vector<std::shared_ptr<uint8_t>>* held) {
  QBC_ASSIGN_OR_RETURN(int ei, unique_section(c0, SectionKind::kEmbedding));
  if (ei < 0) return data_loss(file, ": no embedding section");
  const std::string_view e = c0.bytes(static_cast<size_t>(ei));
  if ((c0.header().required_features & kFeatureEmbeddingI8) != 0)
    return load_embedding_i8(c0, static_cast<size_t>(ei), b, held);
  const bool bf16 = (c0.header().required_features & kFeatureEmbeddingBf16) != 0;
  const size_t value_bytes = bf16 ? 2 : 4;
  if (b.embed_rows < 0 || b.hidden <= 0 || b.embed_rows > (int64_t{1} << 31) / b.hidden ||
      e.size() != static_cast<size_t>(b.embed_rows * b.hidden) * value_bytes)
    return data_loss(c0.where(static_cast<size_t>(ei)), ": ", e.size(), " bytes for an [",
                     b.embed_rows, ", ", b.hidden, "] ", bf16 ? "bf16" : "fp32", " table");
  // Used in place (sections are 4096-aligned, so the rows are aligned): nothing is copied,
  // and the table is resident only as far as tokens touch it.
  if (!e.empty()) held->push_back(c0.share_section(static_cast<size_t>(ei)));
  if (!e.empty() && bf16) {
    b.embedding_bf16_view = {reinterpret_cast<const uint16_t*>(held->back().get()),
                             static_cast<int64_t>(e.size() / 2)};
  } else if (!e.empty()) {
    b.embedding_view = {reinterpret_cast<const float*>(held->back().get()),
                        static_cast<int64_t>(e.size() / 4)};
  }
  return ok_status();
}

/// The assets part 0's metadata lists, each from its asset section.
Status load_assets(const Container& c0, LoadedModel* out) {
  for (const pb::Asset& a : out->meta.assets()) {
    if (a.section() < 0 || static_cast<size_t>(a.section()) >= c0.sections().size() ||
        c0.sections()[static_cast<size_t>(a.section())].kind !=
            static_cast<uint32_t>(SectionKind::kAsset))
      return data_loss(c0.where(0), ": asset '", a.name().substr(0, 64), "' names section ",
                       a.section(), ", which is not an asset section");
    out->assets.push_back({a.name(), std::string(c0.bytes(static_cast<size_t>(a.section())))});
  }
  return ok_status();
}

/// A VLM's vision part: the vision section of part 0 loaded as a single-file MXQ (every rule
/// of the format again), then checked against meta.vision so that a language part never runs
/// with the vision part of another compile (check_vision_pair names what differs).
Status load_vision(const Container& c0, const std::string& file, LoadedModel* out) {
  const isa::Bundle& b = *out->bundle;
  const bool bit = (c0.header().required_features & kFeatureVision) != 0;
  QBC_ASSIGN_OR_RETURN(int vi, unique_section(c0, SectionKind::kVision));
  if (b.kind == isa::BundleKind::kFeatures) {
    if (!bit) return data_loss(file, ": a feature bundle but required feature bit 5 is not set");
    if (vi >= 0)
      return data_loss(c0.where(static_cast<size_t>(vi)),
                       ": a vision part's file holds a vision section");
    if (out->meta.has_vision())
      return data_loss(c0.where(0), ": a vision part's metadata describes a vision part");
    return ok_status();
  }
  if (vi < 0) {
    if (out->meta.has_vision())
      return data_loss(file,
                       ": the metadata describes a vision part but the file has no vision section");
    if (bit)
      return data_loss(file, ": required feature bit 5 is set but the file has no vision part");
    return ok_status();
  }
  const std::string where = c0.where(static_cast<size_t>(vi));
  if (!bit) return data_loss(where, ": a vision section but required feature bit 5 is not set");
  if (!out->meta.has_vision())
    return data_loss(where, ": a vision section but the metadata describes no vision part");
  auto vision = load_model_bytes(std::string(c0.bytes(static_cast<size_t>(vi))), where);
  if (!vision.ok()) return vision.status();
  QBC_RETURN_IF_ERROR(check_vision_pair(out->meta, b, *vision, out->assets, where));
  out->vision = std::make_shared<LoadedModel>(std::move(*vision));
  return ok_status();
}

/// The weight image: one range per part, in order, covering it without holes. A single
/// file's image is its weights section, used in place; a split build's parts are copied into
/// one image (their sections are in different files).
Status load_image(LoadedModel* out, const std::vector<std::string>& files, const pb::Layout& layout,
                  const WeightSections& weights, std::vector<std::shared_ptr<uint8_t>>* held) {
  const size_t n = files.size();
  isa::Bundle& b = *out->bundle;
  Container& c0 = out->containers[0];
  QBC_ASSIGN_OR_RETURN(int li, unique_section(c0, SectionKind::kLayout));
  if (layout.weights_size() != static_cast<int>(n))
    return data_loss(c0.where(static_cast<size_t>(li)), ": ", layout.weights_size(),
                     " weight ranges for ", n, " parts");
  if (n > 1) b.image.assign(static_cast<size_t>(layout.image_bytes()), 0);
  int64_t at = 0;
  for (size_t p = 0; p < n; ++p) {
    const pb::WeightRange& w = layout.weights(static_cast<int>(p));
    Container& c = out->containers[p];
    if (weights[p].size() != 1)
      return data_loss(files[p], ": ", weights[p].size(), " weights sections (expected 1)");
    const size_t si = weights[p][0].second;
    const std::string_view bytes = c.bytes(si);
    if (w.part() != static_cast<int>(p) || w.image_offset() != at || w.bytes() < 0 ||
        static_cast<uint64_t>(w.bytes()) != bytes.size() || w.bytes() > layout.image_bytes() - at)
      return data_loss(c.where(si), ": holds ", bytes.size(), " bytes for the image range at ",
                       w.image_offset(), " of ", w.bytes(), " bytes (expected it at ", at,
                       " of an image of ", layout.image_bytes(), ")");
    if (n == 1 && !bytes.empty()) {
      held->push_back(c.share_section(si));
      b.image_view = {held->back().get(), w.bytes()};
    } else if (!bytes.empty()) {
      c.copy_section(si, b.image.data() + at);
    }
    at += w.bytes();
  }
  if (at != layout.image_bytes())
    return data_loss(files.back(), ": the weight sections hold ", at, " of the image's ",
                     layout.image_bytes(), " bytes");
  return ok_status();
}

Status load_parts(std::vector<Container> opened, const pb::Manifest* manifest, LoadedModel* out) {
  const size_t n = opened.size();
  std::vector<std::string> files;
  for (const Container& c : opened) files.push_back(c.path());
  isa::Bundle& b = *out->bundle;
  std::vector<std::shared_ptr<uint8_t>> held;  // the shared sections b's views point into
  WeightSections weights;
  QBC_RETURN_IF_ERROR(check_parts(std::move(opened), files, manifest, out, &weights));
  // Part 0: layout, code, debug map, embedding, assets.
  Container& c0 = out->containers[0];
  QBC_ASSIGN_OR_RETURN(int li, unique_section(c0, SectionKind::kLayout));
  if (li < 0) return data_loss(files[0], ": no layout section");
  pb::Layout layout;
  QBC_RETURN_IF_ERROR(
      parse(c0.bytes(static_cast<size_t>(li)), c0.where(static_cast<size_t>(li)), &layout));
  QBC_RETURN_IF_ERROR(decode_layout(layout, c0.where(static_cast<size_t>(li)), &b));
  const uint64_t word =
      target_word(b.target, b.target_cores, b.sram_bytes, b.dram_bytes, b.dma_align);
  for (size_t p = 0; p < n; ++p) {
    if (out->containers[p].header().target_word != word)
      return data_loss(files[p], ": target word ", std::hex,
                       out->containers[p].header().target_word, " does not match target '",
                       b.target.substr(0, 64), "' of the layout (", word, ")");
  }
  std::map<std::pair<int, int>, size_t> code;
  QBC_RETURN_IF_ERROR(load_code(c0, files[0], b, &code));
  QBC_RETURN_IF_ERROR(load_debug(c0, files[0], layout, code, b));
  if (b.kind == isa::BundleKind::kFeatures) {
    QBC_ASSIGN_OR_RETURN(int ei, unique_section(c0, SectionKind::kEmbedding));
    if (ei >= 0)
      return data_loss(c0.where(static_cast<size_t>(ei)),
                       ": a feature bundle has no token embedding");
  } else {
    QBC_RETURN_IF_ERROR(load_embedding(c0, files[0], b, &held));
  }
  QBC_RETURN_IF_ERROR(check_meta_against_layout(out->meta, b, c0.where(0)));
  QBC_RETURN_IF_ERROR(load_assets(c0, out));
  QBC_RETURN_IF_ERROR(load_vision(c0, files[0], out));
  QBC_RETURN_IF_ERROR(load_image(out, files, layout, weights, &held));
  out->files = files;
  hold_storage(out, std::move(held));  // last: `b` is moved from
  return ok_status();
}

/// The result of decoding `decoded` once c's deferred digests are in: a digest mismatch
/// first (the bytes were corrupt, whatever decoding made of them), then decoding's error.
Status finish_after(Status decoded, const Container& c) {
  QBC_RETURN_IF_ERROR(c.finish_digests());
  return decoded;
}

}  // namespace

StatusOr<LoadedModel> load_model(const std::string& path, const ReadOptions& options) {
  LoadedModel out;
  out.bundle = std::make_shared<isa::Bundle>();
  std::error_code ec;
  if (!fs::exists(path, ec)) return not_found(path, ": no such file");
  std::ifstream in(path, std::ios::binary);
  char magic[8] = {};
  in.read(magic, 8);
  if (in && std::memcmp(magic, kManifestMagic.data(), 8) == 0) {
    const auto size = fs::file_size(path, ec);
    if (ec || size > (64u << 20)) return data_loss(path, ": manifest of ", size, " bytes");
    QBC_ASSIGN_OR_RETURN(std::string bytes, read_text_file(path));
    QBC_ASSIGN_OR_RETURN(pb::Manifest m, parse_manifest(bytes, path));
    const fs::path dir = fs::path(path).has_parent_path() ? fs::path(path).parent_path() : ".";
    std::vector<std::string> files;
    for (const pb::ManifestPart& p : m.parts()) {
      const std::string f = (dir / p.file()).string();
      if (!fs::exists(f, ec))
        return not_found(path, ": part ", files.size() + 1, " of ", m.parts_size(), " (", p.file(),
                         ") is missing");
      files.push_back(f);
    }
    out.split = true;
    std::vector<Container> parts;
    for (const std::string& f : files) {
      QBC_ASSIGN_OR_RETURN(Container c, Container::open(f, options));
      parts.push_back(std::move(c));
    }
    QBC_RETURN_IF_ERROR(load_parts(std::move(parts), &m, &out));
    if (options.verify_digests) {
      for (int i = 0; i < m.parts_size(); ++i) {
        QBC_ASSIGN_OR_RETURN(std::string h, xxh3_128_file(files[static_cast<size_t>(i)]));
        if (h != m.parts(i).xxh3_128())
          return data_loss(files[static_cast<size_t>(i)], ": digest ", h,
                           " differs from the manifest's ", m.parts(i).xxh3_128().substr(0, 32),
                           " (from another build?)");
      }
    }
    for (const Container& c : out.containers) c.drop_resident_pages();
    return out;
  }
  ReadOptions deferred = options;  // the large sections hash while the rest decodes
  deferred.defer_large_digests = true;
  QBC_ASSIGN_OR_RETURN(Container c, Container::open(path, deferred));
  std::vector<Container> one;
  one.push_back(c);
  QBC_RETURN_IF_ERROR(finish_after(load_parts(std::move(one), nullptr, &out), c));
  for (const Container& k : out.containers) k.drop_resident_pages();
  return out;
}

StatusOr<LoadedModel> load_model_bytes(std::string bytes, const std::string& name,
                                       const ReadOptions& options) {
  LoadedModel out;
  out.bundle = std::make_shared<isa::Bundle>();
  QBC_ASSIGN_OR_RETURN(Container c, Container::from_bytes(std::move(bytes), name, options));
  std::vector<Container> one;
  one.push_back(std::move(c));
  QBC_RETURN_IF_ERROR(load_parts(std::move(one), nullptr, &out));
  return out;
}

}  // namespace qbc::mxq
