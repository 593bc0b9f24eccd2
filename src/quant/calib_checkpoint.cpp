#include "qbc/quant/calib_checkpoint.h"

#include <signal.h>

#include <cstdlib>
#include <cstring>

#include "qbc/support/hash.h"
#include "qbc/support/logging.h"

namespace qbc::quant {
namespace {

/// Appends plain values and arrays to a byte string (host byte order: a checkpoint is read
/// back by the same build on the same machine, its key says so).
struct Writer {
  std::string out;
  template <class T>
  void put(T v) {
    out.append(reinterpret_cast<const char*>(&v), sizeof(v));
  }
  template <class T>
  void put_vector(const std::vector<T>& v) {
    put<uint64_t>(v.size());
    out.append(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
  }
  void put_string(const std::string& s) {
    put<uint64_t>(s.size());
    out.append(s);
  }
};

/// Reads what Writer wrote; every read is bounds-checked (false once anything is short).
struct Reader {
  std::string_view in;
  bool ok = true;
  template <class T>
  T get() {
    T v{};
    if (!ok || in.size() < sizeof(T)) {
      ok = false;
      return v;
    }
    std::memcpy(&v, in.data(), sizeof(T));
    in.remove_prefix(sizeof(T));
    return v;
  }
  template <class T>
  std::vector<T> get_vector() {
    const uint64_t n = get<uint64_t>();
    if (!ok || n > in.size() / sizeof(T)) {
      ok = false;
      return {};
    }
    std::vector<T> v(n);
    std::memcpy(v.data(), in.data(), n * sizeof(T));
    in.remove_prefix(n * sizeof(T));
    return v;
  }
  std::string get_string() {
    const uint64_t n = get<uint64_t>();
    if (!ok || n > in.size()) {
      ok = false;
      return {};
    }
    std::string s(in.substr(0, n));
    in.remove_prefix(n);
    return s;
  }
};

std::string block_name(const CalibCheckpoint& c, size_t segment) {
  char n[32];
  std::snprintf(n, sizeof(n), ".block-%04zu", segment);
  return c.run + n + kCheckpointSuffix;
}
std::string stream_name(const CalibCheckpoint& c) { return c.run + ".stream" + kCheckpointSuffix; }

std::string encode_stats(const CalibStats& stats) {
  Writer w;
  w.put<uint64_t>(stats.size());
  for (const auto& [name, s] : stats) {
    w.put_string(name);
    w.put<float>(s.absmax);
    w.put<int64_t>(s.count);
    w.put_vector(s.channel_absmax);
    w.put_vector(s.channel_min);
    w.put_vector(s.channel_max);
    w.put_vector(s.pair_radius);
    w.put_vector(s.histogram);
  }
  return std::move(w.out);
}

bool decode_stats(std::string_view bytes, CalibStats* out) {
  Reader r{bytes};
  const uint64_t n = r.get<uint64_t>();
  for (uint64_t i = 0; i < n && r.ok; ++i) {
    const std::string name = r.get_string();
    TensorStats& s = (*out)[name];
    s.absmax = r.get<float>();
    s.count = r.get<int64_t>();
    s.channel_absmax = r.get_vector<float>();
    s.channel_min = r.get_vector<float>();
    s.channel_max = r.get_vector<float>();
    s.pair_radius = r.get_vector<float>();
    s.histogram = r.get_vector<double>();
  }
  return r.ok && r.in.empty();
}

/// The stream after block `after`: which block, then every sample's rows.
std::string encode_stream(size_t after, const std::vector<std::vector<float>>& stream) {
  Writer w;
  w.put<uint64_t>(after);
  w.put<uint64_t>(stream.size());
  for (const std::vector<float>& s : stream) w.put_vector(s);
  return std::move(w.out);
}

bool decode_stream(std::string_view bytes, size_t samples, size_t* after,
                   std::vector<std::vector<float>>* out) {
  Reader r{bytes};
  *after = r.get<uint64_t>();
  if (r.get<uint64_t>() != samples) return false;
  out->resize(samples);
  for (size_t i = 0; i < samples && r.ok; ++i) (*out)[i] = r.get_vector<float>();
  return r.ok && r.in.empty();
}

/// QBC_TEST_KILL_AFTER_CALIB_BLOCK=RUN:N: a SIGKILL once block N of RUN is saved.
void test_kill_hook(const std::string& run, size_t segment) {
  const char* v = std::getenv("QBC_TEST_KILL_AFTER_CALIB_BLOCK");
  if (v == nullptr) return;
  if (std::string(v) == run + ":" + std::to_string(segment)) ::raise(SIGKILL);
}

}  // namespace

std::string calib_run_key(const CalibCheckpoint& c, const std::vector<std::vector<float>>& stream,
                          const std::vector<int64_t>& seqs, const std::string& extra) {
  std::string digests = c.dir->fingerprint() + "\n" + c.run + "\n";
  if (!extra.empty()) digests += "deepstack " + extra + "\n";
  for (size_t i = 0; i < stream.size(); ++i) {
    digests += std::to_string(i < seqs.size() ? seqs[i] : -1) + " " +
               xxh3_128_bytes(stream[i].data(), stream[i].size() * sizeof(float)) + "\n";
  }
  return xxh3_128_bytes(digests.data(), digests.size());
}

CalibProgress load_calib_progress(const CalibCheckpoint& c, const std::string& key, size_t segments,
                                  size_t samples) {
  CalibProgress p;
  size_t finished = 0;  // blocks [0, finished) have their statistics
  CalibStats stats;
  for (; finished < segments; ++finished) {
    std::optional<std::string> bytes = c.dir->load(block_name(c, finished), key);
    if (!bytes || !decode_stats(*bytes, &stats)) break;
  }
  if (finished == 0) return p;
  if (finished == segments) {
    p.next = segments;
    p.stats = std::move(stats);
    return p;
  }
  // The stream after block `after`: resume at after + 1 (<= finished, since the statistics
  // of a block are saved before its stream).
  std::optional<std::string> bytes = c.dir->load(stream_name(c), key);
  size_t after = 0;
  std::vector<std::vector<float>> stream;
  if (!bytes || !decode_stream(*bytes, samples, &after, &stream) || after + 1 > finished) return p;
  p.next = after + 1;
  p.stream = std::move(stream);
  // The statistics of blocks [0, next) only: a later block's were saved without its stream.
  CalibStats kept;
  for (size_t b = 0; b < p.next; ++b) {
    std::optional<std::string> block = c.dir->load(block_name(c, b), key);
    if (!block || !decode_stats(*block, &kept)) return CalibProgress();
  }
  p.stats = std::move(kept);
  return p;
}

Status save_calib_block(const CalibCheckpoint& c, const std::string& key, size_t segment,
                        size_t segments, const CalibStats& block_stats,
                        const std::vector<std::vector<float>>& stream) {
  QBC_RETURN_IF_ERROR(c.dir->save(block_name(c, segment), key, encode_stats(block_stats)));
  if (segment + 1 < segments) {
    QBC_RETURN_IF_ERROR(c.dir->save(stream_name(c), key, encode_stream(segment, stream)));
  } else {
    c.dir->remove(stream_name(c));  // every block is done: the stream is not needed again
  }
  test_kill_hook(c.run, segment);
  return ok_status();
}

}  // namespace qbc::quant
