// qbc random-model: writes a HuggingFace model folder (config.json + model.safetensors) with
// deterministic random weights, from a real config (optionally shrunk) or a built-in tiny one.
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <system_error>
#include <utility>

#include "cli.h"
#include "qbc/frontend/hparams.h"
#include "qbc/frontend/random_model.h"
#include "qbc/support/file_util.h"
#include "qbc/support/logging.h"
#include "qbc/tensorfile/dtype.h"

namespace qbc::cli {
namespace {

namespace fs = std::filesystem;

struct RandomModelFlags {
  std::string config;
  bool tiny = false;
  std::string output;
  std::string dtype;
  uint64_t seed = 0;
  bool force = false;
  // Shape overrides; applied only when the option was given (count() > 0).
  struct Override {
    CLI::Option* option = nullptr;
    int64_t value = 0;
  };
  Override layers, hidden, intermediate, vocab, heads, kv_heads, head_dim;
};

StatusOr<tensorfile::DType> parse_dtype_flag(const std::string& name) {
  if (name == "f32") return tensorfile::DType::kF32;
  if (name == "f16") return tensorfile::DType::kF16;
  if (name == "bf16") return tensorfile::DType::kBF16;
  return invalid_argument("--dtype ", name, ": expected f32, f16 or bf16");
}

// The weight dtype when --dtype is not given: the config's torch_dtype ("dtype" in newer
// configs) when it is float32, float16 or bfloat16, else f32. Unreadable configs give f32 here;
// write_random_model() reports them properly.
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

Status run_random_model(const RandomModelFlags& f) {
  if (f.tiny == !f.config.empty()) {
    return invalid_argument("random-model: give either a CONFIG.json or --tiny");
  }
  const fs::path dir(f.output);
  QBC_RETURN_IF_ERROR(check_output_dir(dir, f.force));

  frontend::RandomModelOptions o;
  o.config_path = f.config;  // Empty with --tiny: the built-in tiny Llama config.
  o.output_dir = dir;
  o.seed = f.seed;
  if (f.dtype.empty()) {
    o.dtype = default_dtype(f.config);
  } else {
    QBC_ASSIGN_OR_RETURN(o.dtype, parse_dtype_flag(f.dtype));
  }
  const std::pair<const RandomModelFlags::Override*, std::optional<int64_t>*> overrides[] = {
      {&f.layers, &o.overrides.num_hidden_layers},
      {&f.hidden, &o.overrides.hidden_size},
      {&f.intermediate, &o.overrides.intermediate_size},
      {&f.vocab, &o.overrides.vocab_size},
      {&f.heads, &o.overrides.num_attention_heads},
      {&f.kv_heads, &o.overrides.num_key_value_heads},
      {&f.head_dim, &o.overrides.head_dim},
  };
  for (const auto& [flag, target] : overrides) {
    if (flag->option->count() > 0) *target = flag->value;
  }

  const std::string source = f.tiny ? std::string("built-in tiny Llama config") : f.config;
  events::status("frontend", "writing " + dir.string() + " from " + source);
  const auto start = std::chrono::steady_clock::now();
  QBC_RETURN_IF_ERROR(frontend::write_random_model(o).with_context("random-model"));
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

  // Summarize what was written (the files are complete and valid at this point).
  const fs::path weights = dir / "model.safetensors";
  const fs::path config = dir / "config.json";
  QBC_ASSIGN_OR_RETURN(frontend::HParams hp, frontend::load_hparams(config));
  uint64_t bytes = 0;
  for (const fs::path& p : {weights, config}) {
    std::error_code ec;
    const uintmax_t size = fs::file_size(p, ec);
    if (ec) return internal_error(p.string(), ": missing after it was written: ", ec.message());
    bytes += size;
  }
  const size_t tensors = frontend::hf_tensor_specs(hp).size();
  const int64_t params = hp.param_counts().total();
  const std::string dtype_text(tensorfile::dtype_name(o.dtype));
  log("frontend")
      .info("random-model: wrote {} tensors ({} parameters, {} bytes) to {} in {:.2f} s", tensors,
            params, bytes, dir.string(), seconds);
  events::result("random-model", nlohmann::ordered_json{{"output_dir", dir.string()},
                                                        {"architecture", hp.architecture},
                                                        {"dtype", dtype_text},
                                                        {"seed", o.seed},
                                                        {"tensors", tensors},
                                                        {"parameters", params},
                                                        {"bytes", bytes},
                                                        {"seconds", seconds}}
                                     .dump());
  std::printf("%s: %s, %zu tensors, %lld parameters (%s), %llu bytes in %.2f s\n",
              dir.string().c_str(), hp.architecture.c_str(), tensors,
              static_cast<long long>(params), dtype_text.c_str(),
              static_cast<unsigned long long>(bytes), seconds);
  std::fflush(stdout);
  return ok_status();
}

}  // namespace

void register_random_model(CLI::App& app, Action& action) {
  auto f = std::make_shared<RandomModelFlags>();
  CLI::App* cmd = app.add_subcommand(
      "random-model",
      "Write a HuggingFace model folder (config.json + model.safetensors) with deterministic\n"
      "random weights: N(0, 0.02) for linear, embedding and bias tensors, 1 + noise for norms\n"
      "(noise only for Gemma's 1+w norms). The same seed gives byte-identical files. Weights are\n"
      "streamed, so memory stays small even for multi-GB shapes. model.safetensors is written to\n"
      "a temporary file and renamed into place, and config.json is written last.");
  CLI::Option* config =
      cmd->add_option("config", f->config,
                      "Source HF config.json; its shape can be changed with the options below");
  CLI::Option* tiny = cmd->add_flag(
      "--tiny", f->tiny,
      "Use the built-in tiny Llama config (2 layers, hidden 64, 4 heads, 2 kv heads, head_dim "
      "16, intermediate 128, vocab 256) instead of CONFIG.json");
  tiny->excludes(config);
  cmd->add_option("-o,--output", f->output,
                  "Output folder (created when missing; must be empty unless --force)")
      ->required();
  cmd->add_option("--dtype", f->dtype,
                  "Weight dtype: f32 | f16 | bf16 (default: the config's torch_dtype when it is "
                  "one of these, else f32)")
      ->check(CLI::IsMember({"f32", "f16", "bf16"}));
  cmd->add_option("--seed", f->seed, "PRNG seed (default 0); equal seeds give identical files");
  const auto shape = [&](const char* name, RandomModelFlags::Override& o, const char* what) {
    o.option = cmd->add_option(name, o.value, what)->check(CLI::PositiveNumber);
  };
  shape("--layers", f->layers, "Override num_hidden_layers (layer_types is cut or repeated)");
  shape("--hidden", f->hidden, "Override hidden_size");
  shape("--intermediate", f->intermediate, "Override intermediate_size");
  shape("--vocab", f->vocab, "Override vocab_size");
  shape("--heads", f->heads, "Override num_attention_heads");
  shape("--kv-heads", f->kv_heads, "Override num_key_value_heads");
  shape("--head-dim", f->head_dim,
        "Override head_dim (not derived from --hidden: set it too when the config has it)");
  cmd->add_flag("--force", f->force,
                "Write into a non-empty output folder, replacing config.json and "
                "model.safetensors (other files are kept)");
  cmd->callback([f, &action] { action = [f] { return run_random_model(*f); }; });
}

}  // namespace qbc::cli
