// qbc random-model: writes a HuggingFace model folder (config.json + model.safetensors) with
// deterministic random weights, from a real config (optionally shrunk) or a built-in tiny one.
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "cli.h"
#include "qbc/driver/random_model.h"
#include "qbc/support/logging.h"

namespace qbc::cli {
namespace {

struct RandomModelFlags {
  driver::RandomModelRequest request;
  // Shape overrides; applied only when the option was given (count() > 0).
  struct Override {
    CLI::Option* option = nullptr;
    int64_t value = 0;
  };
  Override layers, hidden, intermediate, vocab, heads, kv_heads, head_dim;
  Override vision_layers, vision_hidden, vision_intermediate, vision_heads;
};

Status run_random_model(const RandomModelFlags& f) {
  driver::RandomModelRequest r = f.request;
  const std::pair<const RandomModelFlags::Override*, std::optional<int64_t>*> overrides[] = {
      {&f.layers, &r.overrides.num_hidden_layers},
      {&f.hidden, &r.overrides.hidden_size},
      {&f.intermediate, &r.overrides.intermediate_size},
      {&f.vocab, &r.overrides.vocab_size},
      {&f.heads, &r.overrides.num_attention_heads},
      {&f.kv_heads, &r.overrides.num_key_value_heads},
      {&f.head_dim, &r.overrides.head_dim},
      {&f.vision_layers, &r.overrides.vision.depth},
      {&f.vision_hidden, &r.overrides.vision.hidden_size},
      {&f.vision_intermediate, &r.overrides.vision.intermediate_size},
      {&f.vision_heads, &r.overrides.vision.num_heads},
  };
  for (const auto& [flag, target] : overrides) {
    if (flag->option->count() > 0) *target = flag->value;
  }
  QBC_ASSIGN_OR_RETURN(driver::RandomModelResult res, driver::write_random_model(r));
  events::result("random-model", driver::random_model_json(res));
  return emit_output("", driver::random_model_text(res));
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
      cmd->add_option("config", f->request.config,
                      "Source HF config.json; its shape can be changed with the options below");
  CLI::Option* tiny = cmd->add_flag(
      "--tiny", f->request.tiny,
      "Use the built-in tiny Llama config (2 layers, hidden 64, 4 heads, 2 kv heads, head_dim "
      "16, intermediate 128, vocab 256) instead of CONFIG.json");
  tiny->excludes(config);
  cmd->add_option("-o,--output", f->request.output,
                  "Output folder (created when missing; must be empty unless --force)")
      ->required();
  cmd->add_option("--dtype", f->request.dtype,
                  "Weight dtype: f32 | f16 | bf16 (default: the config's torch_dtype when it is "
                  "one of these, else f32)")
      ->check(CLI::IsMember({"f32", "f16", "bf16"}));
  cmd->add_option("--seed", f->request.seed,
                  "PRNG seed (default 0); equal seeds give identical files");
  cmd->add_option("--init-std", f->request.init_std,
                  "Standard deviation of the random weights (default 0.02, HF's "
                  "initializer_range; larger makes attention, and so an image, matter more)");
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
  shape("--vision-layers", f->vision_layers,
        "A VLM: override vision_config's depth / num_hidden_layers (an error without a "
        "vision_config)");
  shape("--vision-hidden", f->vision_hidden, "A VLM: override vision_config's hidden_size");
  shape("--vision-intermediate", f->vision_intermediate,
        "A VLM: override vision_config's intermediate_size");
  shape("--vision-heads", f->vision_heads,
        "A VLM: override vision_config's num_heads / num_attention_heads");
  cmd->add_flag("--force", f->request.force,
                "Write into a non-empty output folder, replacing config.json and "
                "model.safetensors (other files are kept)");
  cmd->callback([f, &action] { action = [f] { return run_random_model(*f); }; });
}

}  // namespace qbc::cli
