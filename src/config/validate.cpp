// Cross-field checks on a resolved configuration. Types and ranges of single
// keys are checked while loading (schema_walk.cpp); here live the rules that
// relate several keys. Every error names the key path and where its value came
// from.
#include <set>
#include <sstream>

#include "qbc/config/config.h"
#include "qbc/config/presets.h"
#include "qbc/config/target.h"

namespace qbc::config {
namespace {

// "cfg.yaml:3:5: llm.attributes.maxCacheLength" (or "... (default)").
std::string at(const ResolvedConfig& c, const std::string& path) {
  auto it = c.origins.find(path);
  if (it == c.origins.end() || it->second.source == "default") return path + " (default)";
  return it->second.to_string() + ": " + path;
}

std::string from(const ResolvedConfig& c, const std::string& path) {
  auto it = c.origins.find(path);
  return it == c.origins.end() ? "default" : it->second.to_string();
}

// The scheme table's minimum (all and unspecified: 1, they fall back to what fits).
int cores_needed(InferenceScheme s) {
  const std::optional<isa::Scheme> row = isa_scheme(s);
  return row ? isa::scheme_info(*row).min_cores() : 1;
}

Status check_lengths(const ResolvedConfig& c) {
  const LlmAttributes& a = c.options.llm().attributes();
  if (a.max_cache_length() < a.max_sequence_length()) {
    return invalid_argument(at(c, "llm.attributes.maxCacheLength"), ": ", a.max_cache_length(),
                            " is smaller than llm.attributes.maxSequenceLength ",
                            a.max_sequence_length(), " (from ",
                            from(c, "llm.attributes.maxSequenceLength"),
                            "); the KV cache must hold at least one full call");
  }
  if (a.runtime().batch_size() > 1) {
    if (a.max_core_data_length() > a.max_data_length()) {
      return invalid_argument(at(c, "llm.attributes.maxCoreDataLength"), ": ",
                              a.max_core_data_length(), " exceeds llm.attributes.maxDataLength ",
                              a.max_data_length(), " (from ",
                              from(c, "llm.attributes.maxDataLength"), ")");
    }
    if (a.max_cache_length() < a.max_core_data_length()) {
      return invalid_argument(at(c, "llm.attributes.maxCacheLength"), ": ", a.max_cache_length(),
                              " is smaller than llm.attributes.maxCoreDataLength ",
                              a.max_core_data_length());
    }
  }
  return ok_status();
}

Status check_split(const ResolvedConfig& c) {
  const auto& blocks = c.options.split_blocks();
  for (int i = 0; i < blocks.size(); ++i) {
    if (blocks[i] <= 0) {
      return invalid_argument(at(c, "splitBlocks"), ": entry ", i, " is ", blocks[i],
                              "; block boundaries must be positive");
    }
    if (i > 0 && blocks[i] <= blocks[i - 1]) {
      return invalid_argument(at(c, "splitBlocks"), ": must be strictly increasing, but entry ", i,
                              " (", blocks[i], ") follows ", blocks[i - 1]);
    }
  }
  if (!blocks.empty() && c.options.split_parts() > 0) {
    return invalid_argument(at(c, "splitParts"), ": ", c.options.split_parts(),
                            " cannot be combined with splitBlocks (from ", from(c, "splitBlocks"),
                            "); choose one split strategy");
  }
  return ok_status();
}

Status check_scheme(ResolvedConfig& c) {
  const TargetProfile& t = c.options.target();
  const int cores = total_cores(t);
  const InferenceScheme scheme = c.options.inference_scheme();
  const int batch = c.options.llm().attributes().runtime().batch_size();
  if (batch > 1) {
    if (!is_default(c, "inferenceScheme") && scheme != INFERENCE_SCHEME_SINGLE) {
      return invalid_argument(at(c, "inferenceScheme"), ": '", spell(scheme),
                              "' cannot be used with llm.attributes.runtime.batchSize ", batch,
                              " (from ", from(c, "llm.attributes.runtime.batchSize"),
                              "); batch LLMs run in the single scheme");
    }
    if (is_default(c, "inferenceScheme")) {
      c.options.set_inference_scheme(INFERENCE_SCHEME_SINGLE);
      c.origins["inferenceScheme"] = Origin{"batch LLM rule", 0, 0};
      std::ostringstream os;
      os << "inferenceScheme set to 'single' because llm.attributes.runtime.batchSize is " << batch
         << " (batch LLMs run in the single scheme)";
      c.notes.push_back(os.str());
    }
  }
  if (cores_needed(scheme) > cores) {
    return invalid_argument(at(c, "inferenceScheme"), ": '", spell(scheme), "' needs ",
                            cores_needed(scheme), " cores, but target '", t.name(), "' (",
                            spell(c.options.target_device()), ") has ", cores,
                            cores == 1 ? " core (single-core target: use 'single')" : " cores");
  }
  // npuCoreIds: "cluster:core" within the target, each once.
  std::set<std::string> seen;
  const auto& ids = c.options.llm().attributes().runtime().npu_core_ids();
  for (int i = 0; i < ids.size(); ++i) {
    const std::string& id = ids[i];
    int cluster = -1, core = -1;
    char colon = 0, extra = 0;
    std::istringstream is(id);
    bool parsed =
        static_cast<bool>(is >> cluster >> colon >> core) && colon == ':' && !(is >> extra);
    if (!parsed || cluster < 0 || core < 0 || cluster >= t.clusters() ||
        core >= t.cores_per_cluster()) {
      return invalid_argument(at(c, "llm.attributes.runtime.npuCoreIds"), ": entry '", id,
                              "' is not a core of target '", t.name(),
                              "' (expected \"cluster:core\" with cluster < ", t.clusters(),
                              " and core < ", t.cores_per_cluster(), ")");
    }
    if (!seen.insert(id).second) {
      return invalid_argument(at(c, "llm.attributes.runtime.npuCoreIds"), ": core '", id,
                              "' listed twice");
    }
  }
  return ok_status();
}

/// True when the value at `path` was set by the user (a -c file, --set or a flag), not
/// by the defaults or a built-in preset.
bool user_set(const ResolvedConfig& c, const std::string& path) {
  auto it = c.origins.find(path);
  if (it == c.origins.end() || it->second.source == "default") return false;
  for (const Preset& p : presets()) {
    if (it->second.source == p.path) return false;
  }
  return true;
}

// useRandomCalib is a smoke test: random tokens say nothing about the model's
// activations, so calibrating on 128 samples of the full sequence length only costs
// time (13 minutes for a 135M model at 4096 positions). Unless the user chose the
// sample count or length, it runs on kRandomSamples × kRandomSeqLength.
constexpr int kRandomSamples = 8;
constexpr int kRandomSeqLength = 256;

void shrink_random_calibration(ResolvedConfig& c) {
  if (!c.options.use_random_calib()) return;
  CalibrationConfig* cal = c.options.mutable_calibration();
  bool shrunk = false;
  if (!user_set(c, "calibration.numSamples") && cal->num_samples() > kRandomSamples) {
    shrunk = true;
    cal->set_num_samples(kRandomSamples);
    c.origins["calibration.numSamples"] = Origin{"useRandomCalib smoke-test rule", 0, 0};
  }
  auto* full = c.options.mutable_llm()->mutable_attributes()->mutable_calibration();
  const bool length_chosen = user_set(c, "calibration.seqLength") ||
                             user_set(c, "llm.attributes.calibration.useFullSeqLength");
  if (!length_chosen) {
    if (full->use_full_seq_length()) {
      shrunk = true;
      full->set_use_full_seq_length(false);
      c.origins["llm.attributes.calibration.useFullSeqLength"] =
          Origin{"useRandomCalib smoke-test rule", 0, 0};
    }
    if (cal->seq_length() > kRandomSeqLength) {
      shrunk = true;
      cal->set_seq_length(kRandomSeqLength);
      c.origins["calibration.seqLength"] = Origin{"useRandomCalib smoke-test rule", 0, 0};
    }
  }
  if (shrunk) {
    const int64_t seq = full->use_full_seq_length()
                            ? c.options.llm().attributes().max_sequence_length()
                            : cal->seq_length();
    c.notes.push_back("useRandomCalib is a smoke test: calibrating on " +
                      std::to_string(cal->num_samples()) + " samples of " + std::to_string(seq) +
                      " tokens" +
                      " (set calibration.numSamples / calibration.seqLength to choose)");
  }
}

Status check_calibration(ResolvedConfig& c) {
  if (c.options.use_random_calib() && c.options.calib_data_paths_size() > 0) {
    return invalid_argument(at(c, "useRandomCalib"), ": true together with calibDataPaths (from ",
                            from(c, "calibDataPaths"), "); give one calibration source");
  }
  for (int i = 0; i < c.options.calib_data_paths_size(); ++i) {
    if (c.options.calib_data_paths(i).empty()) {
      return invalid_argument(at(c, "calibDataPaths"), ": entry ", i, " is empty");
    }
  }
  const LayerOverrides& lo = c.options.bit().layer_overrides();
  for (const auto* list : {&lo.activation16_bits(), &lo.weight8_bits(), &lo.weight16_bits()}) {
    for (const std::string& g : *list) {
      if (g.empty()) return invalid_argument("bit.layerOverrides: empty layer-name glob");
    }
  }
  if (c.options.device() == COMPUTE_DEVICE_GPU) {
    c.notes.push_back("device 'gpu' requested (" + from(c, "device") +
                      "), but this qbc build computes on the CPU; continuing on the CPU");
  }
  return ok_status();
}

/// bit.prefill / bit.decode: one phase at most gets its own weight image.
Status check_phase_bits(const ResolvedConfig& c) {
  const PhaseWeightBits& pre = c.options.bit().prefill();
  const PhaseWeightBits& dec = c.options.bit().decode();
  if (pre.weight() != 0 && dec.weight() != 0) {
    return invalid_argument(at(c, "bit.decode.weight"), ": ", dec.weight(),
                            " together with bit.prefill.weight ", pre.weight(), " (from ",
                            from(c, "bit.prefill.weight"),
                            "); one phase at most gets its own weight image, the other runs the "
                            "bit.transformer image: set the phase you want to differ");
  }
  for (const char* phase : {"prefill", "decode"}) {
    const PhaseWeightBits& p = phase[0] == 'p' ? pre : dec;
    if (p.weight() == 0 && p.weight_group_size() != -1) {
      const std::string key = std::string("bit.") + phase + ".weightGroupSize";
      return invalid_argument(at(c, key), ": ", p.weight_group_size(), " without bit.", phase,
                              ".weight: the group size of an image that is not made (set bit.",
                              phase, ".weight to 4 or 8)");
    }
  }
  return ok_status();
}

}  // namespace

Status validate(ResolvedConfig& c) {
  QBC_RETURN_IF_ERROR(check_lengths(c));
  QBC_RETURN_IF_ERROR(check_split(c));
  QBC_RETURN_IF_ERROR(check_scheme(c));
  QBC_RETURN_IF_ERROR(check_calibration(c));
  QBC_RETURN_IF_ERROR(check_phase_bits(c));
  shrink_random_calibration(c);
  return ok_status();
}

bool is_default(const ResolvedConfig& c, const std::string& path) {
  auto it = c.origins.find(path);
  return it == c.origins.end() || it->second.source == "default";
}

bool set_by_user(const ResolvedConfig& c, const std::string& path) {
  auto it = c.origins.find(path);
  if (it == c.origins.end() || it->second.source == "default") return false;
  // Rules record a line-less origin that is not a flag ("batch LLM rule", "model: ...").
  const std::string& source = it->second.source;
  if (it->second.line == 0 && source.rfind("--", 0) != 0) return false;
  for (const Preset& p : presets()) {
    if (source == p.path) return false;
  }
  return true;
}

}  // namespace qbc::config
