// `qbc inspect` of a graph file (see qbc/driver/inspect.h).
#include "graph_summary.h"
#include "qbc/driver/backend.h"
#include "qbc/driver/generate.h"
#include "qbc/driver/inspect.h"
#include "qbc/driver/model_loader.h"
#include "qbc/ir/serialize.h"
#include "qbc/ir/text.h"
#include "qbc/isa/text.h"
#include "qbc/npu/compile.h"
#include "qbc/npu/memory_plan.h"
#include "qbc/support/file_util.h"

namespace qbc::driver {
namespace {

/// True for the text form of MBLT (the --dump-after files).
bool is_mblt_text_path(const std::string& path) {
  const std::string ext = ".mblt.txt";
  return path.size() > ext.size() && path.compare(path.size() - ext.size(), ext.size(), ext) == 0;
}

/// --memory / --program: compiles the quantized MBLT for the configured target in memory
/// (shapes only) and prints the memory plan or the programs.
StatusOr<Inspection> inspect_backend(const GraphInspectRequest& r) {
  const char* what = r.memory ? "--memory" : "--program";
  // The backend lowers quantized graphs only: a float model has no memory plan or program
  // yet. Its plan before quantizing is `qbc plan` (from config.json, no weights read).
  if (!is_mblt_path(r.path)) {
    return invalid_argument("inspect ", what, ": ", r.path,
                            " is not a quantized .mblt (qbc quantize) or a compiled .mxq; a model "
                            "folder or .gguf is a float model, which the backend does not lower: "
                            "for its memory plan and speed before quantizing, run `qbc plan ",
                            r.path, "`");
  }
  QBC_ASSIGN_OR_RETURN(config::ResolvedConfig cfg, resolve_request_for_model(r.config, r.path));
  QBC_ASSIGN_OR_RETURN(LoadedModel m, open_model(r.path, cfg));
  if (!is_quantized(m.graph)) {
    return invalid_argument("inspect ", what, ": ", r.path,
                            " is a float graph (from `qbc parse`), which the backend does not "
                            "lower; for its memory plan and speed before quantizing run `qbc "
                            "plan` on the model it was parsed from (",
                            m.graph.source_path, "), or inspect the .mblt of `qbc quantize`");
  }
  QBC_ASSIGN_OR_RETURN(npu::Options opts, backend_options(m.graph, cfg));
  // Shapes only: the programs do not depend on the weights' values.
  QBC_ASSIGN_OR_RETURN(isa::Bundle b, npu::run_pipeline("npu-compile", m.graph, opts, nullptr));
  Inspection out;
  if (r.memory) {
    const npu::MemoryReport mr = npu::memory_report(b);
    out.text += r.json ? npu::memory_json(mr) : npu::memory_text(b, mr);
  }
  if (r.program) out.text += isa::print_bundle(b);
  return out;
}

StatusOr<ir::Graph> load_graph(const std::string& path) {
  if (is_mblt_text_path(path)) {
    QBC_ASSIGN_OR_RETURN(std::string text, read_text_file(path));
    return ir::parse_text(text, path);
  }
  if (is_mblt_path(path)) return ir::load(path);
  return invalid_argument("inspect: ", path, " is not an .mblt file (or .mblt.txt, the text form)");
}

}  // namespace

StatusOr<Inspection> inspect_graph(const GraphInspectRequest& r) {
  if (r.memory || r.program) return inspect_backend(r);
  QBC_ASSIGN_OR_RETURN(ir::Graph g, load_graph(r.path));
  const nlohmann::ordered_json j = graph_summary_json(g, r.path);
  Inspection out;
  out.event = "inspect";
  out.event_json = j.dump();
  out.text = r.json ? j.dump(2) + "\n" : graph_summary_text(j);
  if (r.graph) out.text += (r.json ? "" : "\n") + ir::print_text(g);
  return out;
}

}  // namespace qbc::driver
