#include "qbc/driver/accuracy.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>

#include "accuracy_json.h"
#include "qbc/runner/reply_forward.h"
#include "qbc/support/logging.h"

namespace qbc::driver {

void log_softmax(const float* x, int64_t n, std::vector<double>* out) {
  out->resize(static_cast<size_t>(n));
  double m = -std::numeric_limits<double>::infinity();
  for (int64_t i = 0; i < n; ++i) m = std::max(m, static_cast<double>(x[i]));
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += std::exp(static_cast<double>(x[i]) - m);
  const double lse = m + std::log(sum);
  for (int64_t i = 0; i < n; ++i) (*out)[static_cast<size_t>(i)] = static_cast<double>(x[i]) - lse;
}

void TokenComparison::add(const float* test, const float* reference, int64_t vocab, int32_t next) {
  log_softmax(test, vocab, &pt_);
  log_softmax(reference, vocab, &pr_);
  double kl = 0;
  for (int64_t v = 0; v < vocab; ++v) {
    const double p = std::exp(pr_[static_cast<size_t>(v)]);
    kl += p * (pr_[static_cast<size_t>(v)] - pt_[static_cast<size_t>(v)]);
  }
  klds_.push_back(std::max(kl, 0.0));
  nll_ -= pt_[static_cast<size_t>(next)];
  nll_reference_ -= pr_[static_cast<size_t>(next)];
  same_ += (std::max_element(test, test + vocab) - test) ==
           (std::max_element(reference, reference + vocab) - reference);
}

double sqnr_db(double signal, double noise) {
  if (noise <= 0) return std::numeric_limits<double>::infinity();
  return 10.0 * std::log10(signal / noise);
}

double TokenComparison::kld_mean() const {
  double sum = 0;
  for (double k : klds_) sum += k;
  return klds_.empty() ? 0.0 : sum / static_cast<double>(klds_.size());
}

double TokenComparison::kld_p99() const {
  if (klds_.empty()) return 0.0;
  std::vector<double> sorted = klds_;
  std::sort(sorted.begin(), sorted.end());
  return sorted[std::min(sorted.size() - 1,
                         static_cast<size_t>(0.99 * static_cast<double>(sorted.size())))];
}

double TokenComparison::kld_max() const {
  return klds_.empty() ? 0.0 : *std::max_element(klds_.begin(), klds_.end());
}

double TokenComparison::top1() const {
  return klds_.empty() ? 0.0 : static_cast<double>(same_) / static_cast<double>(klds_.size());
}

StatusOr<AccuracyReport> compare_models(runner::Runner& test, runner::Runner& reference,
                                        const std::vector<int32_t>& tokens, int32_t bos_id,
                                        const std::vector<LayerError>& nodes,
                                        const CompareOptions& o) {
  if (o.ctx < 4) return invalid_argument("--ctx must be >= 4");
  if (test.vocab_size() != reference.vocab_size()) {
    return invalid_argument("the model and the reference have different vocabularies (",
                            test.vocab_size(), " vs ", reference.vocab_size(), ")");
  }
  int64_t chunks = static_cast<int64_t>(tokens.size()) / o.ctx;
  if (chunks < 1)
    return invalid_argument("the text has ", tokens.size(), " tokens, fewer than one chunk of ",
                            o.ctx);
  if (o.max_chunks > 0) chunks = std::min(chunks, o.max_chunks);
  const auto t0 = std::chrono::steady_clock::now();
  const int64_t vocab = test.vocab_size();
  const int64_t first = o.ctx / 2;
  AccuracyReport r;
  r.ctx = o.ctx;
  r.chunks = chunks;
  TokenComparison cmp;
  std::vector<double> signal(nodes.size(), 0.0), noise(nodes.size(), 0.0);
  std::vector<float> lt, lr, at, ar;
  std::vector<int64_t> shape;
  for (int64_t c = 0; c < chunks; ++c) {
    std::vector<int32_t> chunk(tokens.begin() + c * o.ctx, tokens.begin() + (c + 1) * o.ctx);
    if (bos_id >= 0) chunk[0] = bos_id;
    // The per-layer table compares whole chunks' activations: not with as_reply, whose last
    // call holds one token.
    const bool layers = !o.as_reply && c < o.layer_chunks && !nodes.empty();
    test.set_keep_activations(layers);
    reference.set_keep_activations(layers);
    test.reset();
    reference.reset();
    QBC_RETURN_IF_ERROR((o.as_reply ? runner::forward_chunk_as_reply(test, chunk, first, &lt)
                                    : test.forward(chunk, &lt))
                            .with_context("model, chunk ", c));
    QBC_RETURN_IF_ERROR(reference.forward(chunk, &lr).with_context("reference, chunk ", c));
    for (int64_t i = first; i < o.ctx - 1; ++i)
      cmp.add(lt.data() + i * vocab, lr.data() + i * vocab, vocab,
              chunk[static_cast<size_t>(i + 1)]);
    if (layers) {
      for (size_t k = 0; k < nodes.size(); ++k) {
        QBC_RETURN_IF_ERROR(test.activation(nodes[k].node, &at, &shape).with_context("model"));
        if (nodes[k].undo_spin_r1) {
          if (!o.undo_spin_r1)
            return internal_error("node '", nodes[k].node, "' needs R1 undone and no rotation");
          QBC_RETURN_IF_ERROR(o.undo_spin_r1(&at).with_context("node '", nodes[k].node, "'"));
        }
        QBC_RETURN_IF_ERROR(
            reference.activation(nodes[k].node, &ar, &shape).with_context("reference"));
        if (at.size() != ar.size())
          return invalid_argument("node '", nodes[k].node, "' differs in size between models");
        for (size_t e = 0; e < ar.size(); ++e) {
          signal[k] += static_cast<double>(ar[e]) * ar[e];
          noise[k] += (static_cast<double>(ar[e]) - at[e]) * (static_cast<double>(ar[e]) - at[e]);
        }
      }
    }
    events::progress("eval", c + 1, chunks);
  }
  test.set_keep_activations(false);
  reference.set_keep_activations(false);
  r.tokens_scored = cmp.count();
  r.ppl = std::exp(cmp.nll() / static_cast<double>(r.tokens_scored));
  r.ppl_reference = std::exp(cmp.nll_reference() / static_cast<double>(r.tokens_scored));
  r.kld_mean = cmp.kld_mean();
  r.kld_p99 = cmp.kld_p99();
  r.kld_max = cmp.kld_max();
  r.top1 = cmp.top1();
  for (size_t k = 0; k < nodes.size(); ++k) {
    LayerError e = nodes[k];
    e.sqnr_db = sqnr_db(signal[k], noise[k]);
    r.layers.push_back(e);
  }
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

std::string format_report(const AccuracyReport& r) {
  std::ostringstream os;
  os.setf(std::ios::fixed);
  os.precision(4);
  os << "perplexity      " << r.ppl << "   (reference " << r.ppl_reference << ", ratio "
     << r.ppl / r.ppl_reference << ")\n";
  os.precision(5);
  os << "KL divergence   mean " << r.kld_mean << "   p99 " << r.kld_p99 << "   max " << r.kld_max
     << "\n";
  os.precision(2);
  os << "top-1 agreement " << 100 * r.top1 << " %\n";
  os << "scored          " << r.tokens_scored << " tokens in " << r.chunks << " chunks of " << r.ctx
     << "\n";
  if (!r.layers.empty()) {
    os << "\nper-layer SQNR (dB, higher is better) against the reference, in the reference's "
          "basis\n"
       << "(basis model: compared as computed; residual, R1 undone: a value of the rotated "
          "residual stream, rotated back by spinR1's R1 first)\n";
    for (const LayerError& e : r.layers) {
      os << "  " << e.node << std::string(e.node.size() < 28 ? 28 - e.node.size() : 1, ' ') << e.op
         << std::string(e.op.size() < 10 ? 10 - e.op.size() : 1, ' ');
      std::ostringstream v;
      v.setf(std::ios::fixed);
      v.precision(2);
      if (std::isinf(e.sqnr_db))
        v << "exact";
      else
        v << e.sqnr_db;
      os << v.str() << std::string(v.str().size() < 10 ? 10 - v.str().size() : 1, ' ') << e.basis
         << "\n";
    }
  }
  if (!r.layers_left_out.empty()) {
    // Grouped by the node name with the block number replaced ("blk.N.attn.q_proj").
    std::vector<std::pair<std::string, std::string>> groups;  // (pattern, passes)
    std::vector<int> counts;
    for (const LayerLeftOut& l : r.layers_left_out) {
      std::string pattern = l.node;
      if (pattern.rfind("blk.", 0) == 0) {
        const size_t dot = pattern.find('.', 4);
        if (dot != std::string::npos) pattern = "blk.N" + pattern.substr(dot);
      }
      size_t g = 0;
      while (g < groups.size() && groups[g].first != pattern) ++g;
      if (g == groups.size()) {
        groups.push_back({pattern, l.passes});
        counts.push_back(0);
      } else if (groups[g].second.find(l.passes) == std::string::npos) {
        groups[g].second += ", " + l.passes;
      }
      ++counts[g];
    }
    os << "not compared: " << r.layers_left_out.size()
       << " projection output(s) a transform re-based (no float counterpart in this basis)\n";
    for (size_t g = 0; g < groups.size(); ++g)
      os << "  " << groups[g].first << " x" << counts[g] << ": " << groups[g].second << "\n";
  }
  return os.str();
}

nlohmann::ordered_json accuracy_figures_json(const AccuracyReport& r) {
  return {{"ctx", r.ctx},
          {"chunks", r.chunks},
          {"tokens_scored", r.tokens_scored},
          {"perplexity", r.ppl},
          {"perplexity_reference", r.ppl_reference},
          {"kld_mean", r.kld_mean},
          {"kld_p99", r.kld_p99},
          {"kld_max", r.kld_max},
          {"top1", r.top1},
          {"seconds", r.seconds}};
}

std::string report_json(const AccuracyReport& r) {
  nlohmann::ordered_json j = accuracy_figures_json(r);
  nlohmann::ordered_json layers = nlohmann::ordered_json::array();
  for (const LayerError& e : r.layers) {
    layers.push_back({{"node", e.node},
                      {"op", e.op},
                      {"block", e.block},
                      {"basis", e.basis},
                      {"sqnr_db", std::isinf(e.sqnr_db) ? nlohmann::ordered_json(nullptr)
                                                        : nlohmann::ordered_json(e.sqnr_db)}});
  }
  j["layers"] = layers;
  nlohmann::ordered_json left = nlohmann::ordered_json::array();
  for (const LayerLeftOut& l : r.layers_left_out)
    left.push_back({{"node", l.node}, {"passes", l.passes}});
  j["layers_not_compared"] = left;
  return j.dump(2) + "\n";
}

StatusOr<PerplexityResult> perplexity(runner::Runner& model, const std::vector<int32_t>& tokens,
                                      int32_t bos_id, const PerplexityRequest& request) {
  ref::PerplexityOptions po;
  po.max_chunks = request.max_chunks;
  po.logprobs_path = request.logprobs_path;
  po.write_logits = request.write_logits;
  po.as_reply = request.as_reply;
  po.progress = [](int64_t chunk, int64_t n, double ppl) {
    events::progress("eval", chunk, n);
    log("eval").debug("chunk {}/{}: running perplexity {:.4f}", chunk, n, ppl);
  };
  return ref::perplexity(model, tokens, request.ctx, bos_id, po);
}

}  // namespace qbc::driver
