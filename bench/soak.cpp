// A soak of the runtime (issue 29): S sequences decoded interleaved on one cache slot of an
// MXQ, each swapped out and in through a KV dump and load (to a folder of its own, so the host
// holds no dump), for N decode steps in all; then each sequence again on its own without any
// dump, and every step's logits compared bit for bit. Resident memory is sampled as it runs and
// must stay flat after the warm-up (a prefill as deep as the deepest position, then the first
// fifth of the steps).
//
//   qbc-soak MODEL.mxq [steps=10000] [sequences=4] [prompt=16] [workdir=/tmp/qbc-soak]
//
// Prints "soak_steps", "soak_rss_kb first/last/min/max", "soak_rss_drift" (max deviation from
// the value after the warm-up, as a fraction), "soak_tok_s" and "soak_equal 1|0" with the first
// step that differs; exits 1 when the logits differ or the drift exceeds 1 %, 2 when it cannot run.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "qbc/runtime/llm_model.h"

namespace {

using qbc::runtime::LlmModel;

int64_t rss_kb() {
  FILE* f = std::fopen("/proc/self/statm", "r");
  if (f == nullptr) return 0;
  long pages = 0, resident = 0;
  const int n = std::fscanf(f, "%ld %ld", &pages, &resident);
  std::fclose(f);
  return n == 2 ? resident * (sysconf(_SC_PAGESIZE) / 1024) : 0;
}

// FNV-1a of the logits' bytes: equal logits, equal hash; a step's check without keeping them.
uint64_t hash_logits(const std::vector<float>& v) {
  uint64_t h = 1469598103934665603ull;
  const auto* p = reinterpret_cast<const unsigned char*>(v.data());
  for (size_t i = 0; i < v.size() * sizeof(float); ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

int32_t argmax(const std::vector<float>& v) {
  return static_cast<int32_t>(std::max_element(v.begin(), v.end()) - v.begin());
}

struct Sequence {
  std::vector<int32_t> prompt;
  int32_t next = 0;              // the token to feed at the next step
  int64_t cached = 0;            // tokens in its cache
  int64_t steps = 0;             // decode steps done
  std::vector<uint64_t> hashes;  // per step: the logits' hash
  std::string folder;            // its dumped cache
};

bool fail(const qbc::Status& s, const char* what) {
  if (s.ok()) return false;
  std::fprintf(stderr, "qbc-soak: %s: %s\n", what, s.to_string().c_str());
  return true;
}

// Prefill of `s`'s prompt on slot 0 (emptied first); sets its next token.
bool prefill(LlmModel& m, Sequence& s) {
  m.reset(0);
  auto e = m.embed(s.prompt);
  if (!e.ok()) return !fail(e.status(), "embed");
  auto logits = m.infer(*e, 0);
  if (!logits.ok()) return !fail(logits.status(), "prefill");
  const int64_t vocab = m.vocab();
  std::vector<float> last(logits->end() - vocab, logits->end());
  s.next = argmax(last);
  s.cached = static_cast<int64_t>(s.prompt.size());
  return true;
}

// One decode step of `s` on slot 0 (its cache loaded); records the logits' hash.
bool step(LlmModel& m, Sequence& s) {
  auto e = m.embed({s.next});
  if (!e.ok()) return !fail(e.status(), "embed");
  auto logits = m.infer(*e, s.cached);
  if (!logits.ok()) return !fail(logits.status(), "decode");
  s.hashes.push_back(hash_logits(*logits));
  s.next = argmax(*logits);
  ++s.cached;
  ++s.steps;
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr,
                 "usage: qbc-soak MODEL.mxq [steps=10000] [sequences=4] [prompt=16] "
                 "[workdir=/tmp/qbc-soak]\n");
    return 2;
  }
  const std::string path = argv[1];
  const int64_t steps = argc > 2 ? std::atoll(argv[2]) : 10000;
  const int nseq = argc > 3 ? std::atoi(argv[3]) : 4;
  const int prompt = argc > 4 ? std::atoi(argv[4]) : 16;
  const std::string work = argc > 5 ? argv[5] : "/tmp/qbc-soak";
  if (steps <= 0 || nseq <= 0 || prompt <= 0) {
    std::fprintf(stderr, "qbc-soak: steps, sequences and prompt must be positive\n");
    return 2;
  }
  auto model = LlmModel::create(path);
  if (!model.ok()) return fail(model.status(), path.c_str()) ? 2 : 2;
  LlmModel& m = **model;
  const int64_t per = (steps + nseq - 1) / nseq;
  if (prompt + per > m.max_cache()) {
    std::fprintf(stderr, "qbc-soak: %d prompt + %lld steps per sequence exceed the cache of %lld\n",
                 prompt, static_cast<long long>(per), static_cast<long long>(m.max_cache()));
    return 2;
  }
  // Warm-up: one prefill as long as a sequence gets, so the executor's KV region has every
  // page the soak will touch (the device memory is touched lazily: without this, RSS grows
  // with the deepest position reached, which is by design, not a leak).
  {
    std::vector<int32_t> fill(static_cast<size_t>(prompt + per), 1);
    auto e = m.embed(fill);
    if (!e.ok()) return fail(e.status(), "embed") ? 2 : 2;
    auto l = m.infer(*e, 0);
    if (!l.ok()) return fail(l.status(), "warm-up prefill") ? 2 : 2;
    m.reset(0);
  }
  std::error_code ec;
  std::filesystem::remove_all(work, ec);
  std::vector<Sequence> seqs(nseq);
  std::mt19937 rng(29);
  std::uniform_int_distribution<int32_t> tok(1, static_cast<int32_t>(m.vocab()) - 1);
  for (int i = 0; i < nseq; ++i) {
    for (int t = 0; t < prompt; ++t) seqs[i].prompt.push_back(tok(rng));
    seqs[i].folder = work + "/seq" + std::to_string(i);
    std::filesystem::create_directories(seqs[i].folder, ec);
    if (!prefill(m, seqs[i])) return 2;
    if (fail(m.dump_cache_to(seqs[i].folder, 0), "dump")) return 2;
  }
  // Interleaved: bursts of 1..7 steps, round robin, every switch a dump and a load.
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<int64_t> rss;
  int64_t done = 0, turn = 0, next_sample = 0;
  const int64_t sample_every = std::max<int64_t>(steps / 50, 1);
  while (done < steps) {
    Sequence& s = seqs[turn % nseq];
    const int64_t burst = std::min<int64_t>({1 + turn % 7, per - s.steps, steps - done});
    ++turn;
    if (burst <= 0) continue;
    m.reset(0);
    if (fail(m.load_cache_from(s.folder, 0), "load")) return 2;
    for (int64_t b = 0; b < burst; ++b) {
      if (!step(m, s)) return 2;
      if (++done >= next_sample) {
        rss.push_back(rss_kb());
        next_sample += sample_every;
      }
    }
    if (fail(m.dump_cache_to(s.folder, 0), "dump")) return 2;
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  // Alone: each sequence from its prompt, no dump.
  bool equal = true;
  for (int i = 0; i < nseq && equal; ++i) {
    Sequence alone;
    alone.prompt = seqs[i].prompt;
    if (!prefill(m, alone)) return 2;
    for (int64_t k = 0; k < seqs[i].steps; ++k) {
      if (!step(m, alone)) return 2;
      if (alone.hashes.back() != seqs[i].hashes[k]) {
        std::printf("soak_equal 0 (sequence %d, step %lld: logits differ)\n", i,
                    static_cast<long long>(k));
        equal = false;
        break;
      }
    }
  }
  std::filesystem::remove_all(work, ec);
  // Drift: after the warm-up (the first fifth of the samples), against the first value then.
  const size_t warm = rss.size() / 5;
  const int64_t ref = rss.empty() ? 0 : rss[warm];
  double drift = 0;
  int64_t lo = INT64_MAX, hi = 0;
  for (size_t i = warm; i < rss.size(); ++i) {
    drift =
        std::max(drift, std::fabs(static_cast<double>(rss[i] - ref)) / std::max<int64_t>(ref, 1));
    lo = std::min(lo, rss[i]);
    hi = std::max(hi, rss[i]);
  }
  std::printf("soak_steps %lld sequences %d switches %lld\n", static_cast<long long>(done), nseq,
              static_cast<long long>(turn));
  std::printf("soak_rss_kb first %lld after_warmup %lld last %lld min %lld max %lld\n",
              static_cast<long long>(rss.empty() ? 0 : rss.front()), static_cast<long long>(ref),
              static_cast<long long>(rss.empty() ? 0 : rss.back()), static_cast<long long>(lo),
              static_cast<long long>(hi));
  std::printf("soak_rss_drift %.4f (target <= 0.01)\n", drift);
  std::printf("soak_tok_s %.1f (with a dump and a load at every switch)\n", done / secs);
  if (equal) std::printf("soak_equal 1\n");
  return equal && drift <= 0.01 ? 0 : 1;
}
