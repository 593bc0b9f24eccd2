// A pipeline is data: an ordered list of pass names, each with the configuration key
// that puts it there and the reason it sits where it does (Glow's commented pass
// pipelines). Stages build their list from the configuration; --print-pipeline
// prints it.
#pragma once

#include <string>
#include <vector>

namespace qbc::pass {

/// One pass of a pipeline.
struct PipelineEntry {
  std::string pass;        ///< Registry name.
  std::string enabled_by;  ///< The config key that enables it ("always" for fixed stages).
  std::string why;         ///< Why it runs here (one line).
};

/// What the user asked of a pipeline run (qbc --disable-pass, --dump-after, --dump-dir).
struct Instrumentation {
  /// Pass names not to run. The stage checks them (quant: an unregistered name or a fixed
  /// stage is refused, a registered pass outside this pipeline only warned about).
  std::vector<std::string> disabled;
  /// Pass names after which the unit is dumped as text; "all" dumps after every pass
  /// (the stage refuses names that are not passes of the pipeline).
  std::vector<std::string> dump_after;
  /// Folder of the dumps (created): NN-<pass>.<dump_extension>, NN the position in the pipeline.
  std::string dump_dir = "qbc-dump";
};

/// True when `entries` contains a pass called `name`.
bool contains_pass(const std::vector<PipelineEntry>& entries, const std::string& name);

/// The pipeline as a table for --print-pipeline: position, pass, enabling key, why;
/// passes in `disabled` are marked "(disabled)".
std::string format_pipeline(const std::string& stage, const std::vector<PipelineEntry>& entries,
                            const std::vector<std::string>& disabled);

/// The same as a JSON array of {"pass", "enabled_by", "why", "disabled"} (serialised).
std::string pipeline_json(const std::vector<PipelineEntry>& entries,
                          const std::vector<std::string>& disabled);

}  // namespace qbc::pass
