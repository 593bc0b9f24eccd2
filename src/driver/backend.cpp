// The backend step of the driver (see qbc/driver/backend.h).
#include "qbc/driver/backend.h"

#include <algorithm>
#include <charconv>
#include <optional>
#include <string>

#include "qbc/config/target.h"
#include "qbc/driver/deployment.h"
#include "qbc/driver/generate.h"
#include "qbc/frontend/importer.h"
#include "qbc/frontend/mapped_file.h"
#include "qbc/isa/verify.h"
#include "qbc/runtime/device.h"
#include "qbc/runtime/npu_session.h"

namespace qbc::driver {
using config::is_default;

StatusOr<npu::Options> backend_options(const ir::Graph& graph, const config::ResolvedConfig& cfg) {
  const config::CompileOptions& co = cfg.options;
  npu::Options o;
  QBC_ASSIGN_OR_RETURN(o.target, npu_target(co.target()));
  const config::LlmAttributes& a = co.llm().attributes();
  o.batch = std::max(1, a.runtime().batch_size());
  o.chunk = a.max_core_data_length();
  o.max_cache = is_default(cfg, "llm.attributes.maxCacheLength") ? cache_capacity(graph)
                                                                 : a.max_cache_length();
  if (o.max_cache <= 0) return invalid_argument("graph '", graph.name(), "' has no KV cache");
  o.chunk = std::min(o.chunk, o.max_cache);
  // A Gemma 3 VLM's image tokens attend to each other: each image is one call of the span
  // programs, so a call must hold an image (llama.cpp likewise needs n_ubatch >= its tokens).
  if (const auto it = graph.metadata.find(frontend::kImageSpanMetadata);
      it != graph.metadata.end()) {
    int64_t span = 0;
    const std::string& text = it->second;
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), span);
    if (ec != std::errc() || end != text.data() + text.size() || span < 1 ||
        span > (int64_t{1} << 20))
      return invalid_argument("graph '", graph.name(), "': metadata '",
                              frontend::kImageSpanMetadata, "' = '", it->second,
                              "' is not a token count");
    o.span_programs = true;
    if (o.chunk < span && is_default(cfg, "llm.attributes.maxCoreDataLength")) {
      o.chunk = std::min(span, o.max_cache);
    }
    if (o.chunk < span)
      return invalid_argument(
          "llm.attributes.maxCoreDataLength ", o.chunk, ": an image of this model is ", span,
          " tokens that attend to each other and must be one call (raise it to at least ", span,
          o.max_cache < span ? ", and llm.attributes.maxCacheLength with it)" : ")");
  }
  const int cores = o.target.cores();
  auto add = [&](const isa::SchemeInfo& s) {
    o.modes.push_back(npu::ModeRequest{s.scheme, s.cores_per_instance,
                                       s.instances_for(static_cast<int32_t>(o.batch))});
  };
  // One named scheme (unspecified: single), or "all": every row the target has cores for.
  const std::optional<isa::Scheme> named = config::isa_scheme(co.inference_scheme());
  if (co.inference_scheme() == config::INFERENCE_SCHEME_ALL) {
    for (const isa::SchemeInfo& s : isa::kSchemes)
      if (s.min_cores() <= cores) add(s);
  } else {
    add(isa::scheme_info(named.value_or(isa::Scheme::kSingle)));
  }
  for (const npu::ModeRequest& m : o.modes) o.batch = std::max<int64_t>(o.batch, m.instances);
  return o;
}

ir::Int8View int8_codes(const LoadedModel& model) {
  const LoadedModel* m = &model;
  return [m](const ir::Weight& w) -> const int8_t* {
    if (w.source != ir::WeightSource::kSidecar || !m->sidecar) return nullptr;
    const frontend::SafetensorsTensor* t = m->sidecar->find(w.tensor);
    if (t == nullptr || t->dtype != tensorfile::DType::kI8 ||
        t->data.size != static_cast<size_t>(w.type.num_elements()))
      return nullptr;
    return reinterpret_cast<const int8_t*>(t->data.data);
  };
}

ir::ViewDone release_codes(const LoadedModel& model) {
  const LoadedModel* m = &model;
  return [m](const ir::Weight& w) {
    if (w.source != ir::WeightSource::kSidecar || !m->sidecar) return;
    const frontend::SafetensorsTensor* t = m->sidecar->find(w.tensor);
    if (t != nullptr) frontend::release_pages(t->data);
  };
}

namespace {

/// The bf16 values of a weight read unchanged from a BF16 tensor of the source model.
ir::Bf16View source_bf16(const LoadedModel& model) {
  const LoadedModel* m = &model;
  return [m](const ir::Weight& w) -> const uint16_t* {
    if (w.source != ir::WeightSource::kModel || !m->source) return nullptr;
    const frontend::TensorInfo* t = m->source->find(w.tensor);
    if (t == nullptr || t->num_elements() != w.type.num_elements()) return nullptr;
    StatusOr<const uint16_t*> v = m->source->bf16_view(w.tensor);
    return v.ok() ? *v : nullptr;
  };
}

StatusOr<isa::Bundle> compile_with(const LoadedModel& model, const npu::Options& options,
                                   const pass::Instrumentation& instr,
                                   const ir::WeightViews& views) {
  const LoadedModel* m = &model;
  return npu::compile(
      model.graph,
      [m](const ir::Weight& w, std::vector<float>* out) { return read_weight(*m, w, out); },
      options, views, instr);
}

}  // namespace

StatusOr<isa::Bundle> compile_backend(const LoadedModel& model, const npu::Options& options,
                                      const pass::Instrumentation& instr) {
  // Quantized codes are copied as they are stored (a float round trip of every code took
  // most of a 1B model's backend time).
  return compile_with(model, options, instr,
                      ir::WeightViews(int8_codes(model), nullptr, release_codes(model)));
}

StatusOr<isa::Bundle> compile_backend_in_place(const LoadedModel& model,
                                               const npu::Options& options,
                                               const pass::Instrumentation& instr) {
  return compile_with(model, options, instr,
                      ir::WeightViews(int8_codes(model), source_bf16(model), release_codes(model)));
}

StatusOr<std::unique_ptr<runner::Runner>> make_npu_runner(const LoadedModel& model,
                                                          const config::ResolvedConfig& cfg,
                                                          int host_threads) {
  if (!is_quantized(model.graph)) {
    return invalid_argument("--backend npu runs quantized models: quantize '", model.graph.name(),
                            "' first (qbc quantize / qbc compile)");
  }
  QBC_ASSIGN_OR_RETURN(npu::Options o, backend_options(model.graph, cfg));
  QBC_ASSIGN_OR_RETURN(isa::Bundle b, compile_backend(model, o));
  auto bundle = std::make_shared<const isa::Bundle>(std::move(b));
  runtime::DeviceOptions d;
  d.scheme = bundle->modes.front().scheme;
  d.host_threads = host_threads;
  d.verify = [](const isa::Bundle& x) { return isa::verify(x); };
  QBC_ASSIGN_OR_RETURN(std::shared_ptr<runtime::Device> dev, runtime::Device::create(bundle, d));
  QBC_ASSIGN_OR_RETURN(std::unique_ptr<runtime::NpuSession> s, runtime::NpuSession::create(dev, 0));
  return std::unique_ptr<runner::Runner>(std::move(s));
}

}  // namespace qbc::driver
