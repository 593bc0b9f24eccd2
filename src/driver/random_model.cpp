// `qbc random-model` over the frontend's writer (see qbc/driver/random_model.h).
#include "qbc/driver/random_model.h"

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <system_error>

#include "qbc/frontend/hparams.h"
#include "qbc/frontend/safetensors.h"
#include "qbc/support/file_util.h"
#include "qbc/support/logging.h"
#include "qbc/tensorfile/dtype.h"

namespace qbc::driver {
namespace {

namespace fs = std::filesystem;

StatusOr<tensorfile::DType> parse_dtype(const std::string& name) {
  if (name == "f32") return tensorfile::DType::kF32;
  if (name == "f16") return tensorfile::DType::kF16;
  if (name == "bf16") return tensorfile::DType::kBF16;
  return invalid_argument("--dtype ", name, ": expected f32, f16 or bf16");
}

// The weight dtype when --dtype is not given: the config's torch_dtype ("dtype" in newer
// configs) when it is float32, float16 or bfloat16, else f32. Unreadable configs give f32 here;
// frontend::write_random_model() reports them properly.
tensorfile::DType default_dtype(const std::string& config_path) {
  if (config_path.empty()) return tensorfile::DType::kF32;
  StatusOr<std::string> text = read_text_file(config_path);
  if (!text.ok()) return tensorfile::DType::kF32;
  const nlohmann::json j = nlohmann::json::parse(*text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return tensorfile::DType::kF32;
  for (const char* key : {"torch_dtype", "dtype"}) {
    const auto it = j.find(key);
    if (it == j.end() || !it->is_string()) continue;
    const std::string& v = it->get_ref<const std::string&>();
    if (v == "float16") return tensorfile::DType::kF16;
    if (v == "bfloat16") return tensorfile::DType::kBF16;
    return tensorfile::DType::kF32;
  }
  return tensorfile::DType::kF32;
}

// The output folder must be missing, empty, or (with --force) an existing folder.
Status check_output_dir(const fs::path& dir, bool force) {
  std::error_code ec;
  const fs::file_status st = fs::status(dir, ec);
  if (ec && ec != std::errc::no_such_file_or_directory) {
    return invalid_argument(dir.string(), ": cannot access output folder: ", ec.message());
  }
  if (!fs::exists(st)) return ok_status();
  if (!fs::is_directory(st)) return invalid_argument(dir.string(), ": exists and is not a folder");
  const bool empty = fs::directory_iterator(dir, ec) == fs::directory_iterator();
  if (ec) return invalid_argument(dir.string(), ": cannot list output folder: ", ec.message());
  if (!empty && !force) {
    return invalid_argument(dir.string(),
                            ": output folder is not empty (use --force to overwrite config.json "
                            "and model.safetensors in it)");
  }
  if (fs::exists(dir / "model.safetensors.index.json", ec)) {
    log("frontend")
        .warn(
            "{}: has model.safetensors.index.json, which readers use instead of the "
            "model.safetensors written now; remove it",
            dir.string());
  }
  return ok_status();
}

// The options of frontend::write_random_model for `r`.
StatusOr<frontend::RandomModelOptions> writer_options(const RandomModelRequest& r) {
  frontend::RandomModelOptions o;
  o.config_path = r.config;  // Empty with --tiny: the built-in tiny Llama config.
  o.output_dir = r.output;
  o.seed = r.seed;
  if (!(r.init_std >= 0.0 && r.init_std <= 10.0))
    return invalid_argument("--init-std ", r.init_std, ": expected a number in [0, 10]");
  o.init_std = r.init_std;
  if (r.dtype.empty()) {
    o.dtype = default_dtype(r.config);
  } else {
    QBC_ASSIGN_OR_RETURN(o.dtype, parse_dtype(r.dtype));
  }
  o.overrides = r.overrides;
  return o;
}

// What was written to `dir` (complete and valid at this point).
Status measure(const fs::path& dir, RandomModelResult* out) {
  const fs::path weights = dir / "model.safetensors";
  const fs::path config = dir / "config.json";
  QBC_ASSIGN_OR_RETURN(frontend::HParams hp, frontend::load_hparams(config));
  for (const fs::path& p : {weights, config}) {
    std::error_code ec;
    const uintmax_t size = fs::file_size(p, ec);
    if (ec) return internal_error(p.string(), ": missing after it was written: ", ec.message());
    out->bytes += size;
  }
  out->architecture = hp.architecture;
  // Counted from the file: a VLM's vision tensors are beside the language model's.
  QBC_ASSIGN_OR_RETURN(const frontend::SafetensorsCheckpoint ck,
                       frontend::SafetensorsCheckpoint::open(weights));
  out->tensors = ck.tensors().size();
  out->parameters = 0;
  for (const frontend::SafetensorsTensor& t : ck.tensors()) out->parameters += t.num_elements();
  return ok_status();
}

}  // namespace

StatusOr<RandomModelResult> write_random_model(const RandomModelRequest& r) {
  if (r.tiny == !r.config.empty()) {
    return invalid_argument("random-model: give either a CONFIG.json or --tiny");
  }
  const fs::path dir(r.output);
  QBC_RETURN_IF_ERROR(check_output_dir(dir, r.force));
  QBC_ASSIGN_OR_RETURN(frontend::RandomModelOptions o, writer_options(r));

  const std::string source = r.tiny ? std::string("built-in tiny Llama config") : r.config;
  events::status("frontend", "writing " + dir.string() + " from " + source);
  const auto start = std::chrono::steady_clock::now();
  QBC_RETURN_IF_ERROR(frontend::write_random_model(o).with_context("random-model"));
  RandomModelResult out;
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  QBC_RETURN_IF_ERROR(measure(dir, &out));
  out.output_dir = dir.string();
  out.dtype = std::string(tensorfile::dtype_name(o.dtype));
  out.seed = o.seed;
  log("frontend")
      .info("random-model: wrote {} tensors ({} parameters, {} bytes) to {} in {:.2f} s",
            out.tensors, out.parameters, out.bytes, out.output_dir, out.seconds);
  return out;
}

std::string random_model_json(const RandomModelResult& r) {
  return nlohmann::ordered_json{{"output_dir", r.output_dir}, {"architecture", r.architecture},
                                {"dtype", r.dtype},           {"seed", r.seed},
                                {"tensors", r.tensors},       {"parameters", r.parameters},
                                {"bytes", r.bytes},           {"seconds", r.seconds}}
      .dump();
}

std::string random_model_text(const RandomModelResult& r) {
  char line[64];
  std::snprintf(line, sizeof line, " bytes in %.2f s\n", r.seconds);
  return r.output_dir + ": " + r.architecture + ", " + std::to_string(r.tensors) + " tensors, " +
         std::to_string(r.parameters) + " parameters (" + r.dtype + "), " +
         std::to_string(r.bytes) + line;
}

}  // namespace qbc::driver
