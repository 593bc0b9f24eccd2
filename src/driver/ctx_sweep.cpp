// qbc eval --ctx-sweep: compare_models() per context length (include/qbc/driver/ctx_sweep.h).
#include "qbc/driver/ctx_sweep.h"

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <sstream>

#include "accuracy_json.h"

namespace qbc::driver {

StatusOr<std::vector<int64_t>> parse_ctx_list(const std::string& list) {
  std::vector<int64_t> out;
  std::stringstream in(list);
  std::string item;
  while (std::getline(in, item, ',')) {
    size_t used = 0;
    int64_t v = 0;
    try {
      v = std::stoll(item, &used);
    } catch (...) {
      used = 0;
    }
    if (item.empty() || used != item.size() || v < 2)
      return invalid_argument("--ctx-sweep '", list, "': '", item,
                              "' is not a context length (an integer >= 2)");
    out.push_back(v);
  }
  if (out.empty()) return invalid_argument("--ctx-sweep '", list, "': no context length");
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

StatusOr<std::vector<AccuracyReport>> sweep_contexts(
    runner::Runner& test, runner::Runner& reference, const std::vector<int32_t>& tokens,
    int32_t bos_id, const std::vector<int64_t>& ctxs, int64_t max_chunks) {
  std::vector<AccuracyReport> rows;
  for (int64_t ctx : ctxs) {
    if (static_cast<int64_t>(tokens.size()) < ctx)
      return invalid_argument("--ctx-sweep length ", ctx, ": the text has ", tokens.size(),
                              " tokens, fewer than one chunk");
    CompareOptions co;
    co.ctx = ctx;
    co.max_chunks = max_chunks;
    co.layer_chunks = 0;
    QBC_ASSIGN_OR_RETURN(AccuracyReport r, compare_models(test, reference, tokens, bos_id, {}, co));
    rows.push_back(std::move(r));
  }
  return rows;
}

std::string format_sweep(const std::vector<AccuracyReport>& rows) {
  std::string out =
      "     ctx  chunks   scored  perplexity   reference   KLD mean    KLD p99   top-1\n";
  char line[160];
  for (const AccuracyReport& r : rows) {
    std::snprintf(line, sizeof line, "%8lld %7lld %8lld %11.4f %11.4f %10.5f %10.5f %6.2f %%\n",
                  static_cast<long long>(r.ctx), static_cast<long long>(r.chunks),
                  static_cast<long long>(r.tokens_scored), r.ppl, r.ppl_reference, r.kld_mean,
                  r.kld_p99, 100.0 * r.top1);
    out += line;
  }
  return out;
}

std::string sweep_json(const std::vector<AccuracyReport>& rows) {
  nlohmann::ordered_json sweep = nlohmann::ordered_json::array();
  for (const AccuracyReport& r : rows) {
    sweep.push_back(accuracy_figures_json(r));
  }
  nlohmann::ordered_json j;
  j["sweep"] = sweep;
  return j.dump(2) + "\n";
}

}  // namespace qbc::driver
