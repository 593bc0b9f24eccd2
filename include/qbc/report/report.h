// The compile report (`qbc compile ... --report OUT.html`, `qbc report MODEL.mxq`): one
// self-contained HTML file, inline CSS and SVG, no script and nothing loaded from
// anywhere. Sections: the configuration with the origin of every value; per-layer SQNR
// and the KL divergence when accuracy was measured; the weight-bit map per projection;
// the DRAM map and the SRAM use per core; the cost model's time and bound per node for a
// prefill chunk and a decode step; pass times.
#pragma once

#include <string>
#include <vector>

#include "qbc/config/config.h"
#include "qbc/isa/program.h"
#include "qbc/npu/cost_model.h"
#include "qbc/support/status.h"

namespace qbc::report {

/// The wall time of one compile step.
struct PassTime {
  std::string stage;  ///< "quant", "backend", "mxq"
  std::string name;   ///< the pass ("calibrate", "spinR1"...)
  double seconds = 0;
};

/// Output error of one node against the float reference.
struct LayerAccuracy {
  std::string node;
  double sqnr_db = 0;
  bool identical = false;  ///< no error at all (SQNR +inf)
};

/// What `qbc eval MODEL --reference REF --json` measured.
struct Accuracy {
  bool measured = false;
  std::string source;  ///< the file it was read from
  double perplexity = 0, perplexity_reference = 0;
  double kld_mean = 0, kld_p99 = 0, kld_max = 0, top1 = 0;
  std::vector<LayerAccuracy> layers;
};

/// Reads the JSON `qbc eval --reference --json` prints. kInvalidArgument names `source`
/// and the key when the document is not such a report.
StatusOr<Accuracy> parse_accuracy_json(const std::string& text, const std::string& source);

/// Everything the report shows besides the compiled program itself.
struct ReportInput {
  std::string model_file;  ///< the MXQ path
  std::string model_name;
  std::string producer;
  const isa::Bundle* bundle = nullptr;
  std::vector<config::OriginRow> config;
  std::string config_note;      ///< e.g. that origins are known only at compile time
  npu::CostParams cost;         ///< the target profile's cost parameters
  int64_t prompt_tokens = 240;  ///< the decode step is evaluated after this many tokens
  std::vector<PassTime> passes;
  std::string passes_note;  ///< shown when `passes` is empty
  Accuracy accuracy;
};

/// The report as one HTML document. Fails (kInvalidArgument) when the cost model cannot
/// evaluate the bundle's programs.
StatusOr<std::string> render_html(const ReportInput& in);

}  // namespace qbc::report
