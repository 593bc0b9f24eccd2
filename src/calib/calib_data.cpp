// Calibration datasets (include/qbc/calib/calib_data.h): resolving folders, .txt lists and JSON
// maps to .npy files, checking every header against the model's inputs up front, and loading
// one sample at a time.
#include "qbc/calib/calib_data.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "qbc/ir/host_inputs.h"
#include "qbc/runner/runner.h"
#include "qbc/support/file_util.h"
#include "qbc/support/json_parse.h"
#include "qbc/support/quote.h"

namespace qbc::calib {

namespace fs = std::filesystem;

struct CalibDataset::State {
  std::vector<CalibInputSpec> inputs;
  std::vector<CalibSample> samples;
  // Generated datasets only.
  std::shared_ptr<const EmbeddingTable> table;
  size_t random_count = 0;
  int64_t random_seq = 0;
  uint64_t seed = 0;
  int32_t bos_id = -1;
};

namespace {

std::string input_names(const std::vector<CalibInputSpec>& inputs) {
  std::string s;
  for (const CalibInputSpec& in : inputs) s += (s.empty() ? "" : ", ") + in.name;
  return s.empty() ? "(none)" : s;
}

std::string lower_ext(const fs::path& p) {
  std::string e = p.extension().string();
  std::transform(e.begin(), e.end(), e.begin(), [](unsigned char c) { return std::tolower(c); });
  return e;
}

std::string trim(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(" \t\r\n") - b + 1);
}

/// Reads the header of `path` and checks it against `spec`.
StatusOr<CalibSampleInput> check_sample(const fs::path& path, const CalibInputSpec& spec) {
  QBC_ASSIGN_OR_RETURN(NpyHeader h, read_npy_header(path));
  const std::string expected =
      "the model's " + spec.name + " [1, seq, " + std::to_string(spec.hidden) + "]";
  const std::vector<int64_t>& s = h.shape;
  const bool rank_ok = (s.size() == 3 && s[0] == 1) || s.size() == 2;
  if (!rank_ok || s.back() != spec.hidden) {
    return invalid_argument(path.string(), ": shape ", shape_string(s), " does not match ",
                            expected, " (or [seq, ", spec.hidden, "])");
  }
  const int64_t seq = s[s.size() - 2];
  if (seq < 1) {
    return invalid_argument(path.string(), ": shape ", shape_string(s), " has no tokens; ",
                            expected, " needs seq >= 1");
  }
  return CalibSampleInput{path, seq, h.dtype};
}

/// Reads a .txt list of .npy paths.
StatusOr<std::vector<fs::path>> read_list(const fs::path& list) {
  QBC_ASSIGN_OR_RETURN(std::string text, read_text_file(list.string()));
  std::vector<fs::path> out;
  std::istringstream in(text);
  std::string line;
  int line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    const std::string entry = trim(line);
    if (entry.empty() || entry[0] == '#') continue;
    fs::path p(entry);
    if (p.is_relative()) p = list.parent_path() / p;
    std::error_code ec;
    if (!fs::exists(p, ec)) {
      return not_found(list.string(), ":", line_no, ": ", p.string(), ": no such file");
    }
    out.push_back(p);
  }
  if (out.empty()) return invalid_argument(list.string(), ": lists no .npy files");
  return out;
}

/// The .npy files of a folder: its npy_files.txt, else every *.npy by sorted name.
StatusOr<std::vector<fs::path>> read_folder(const fs::path& dir) {
  std::error_code ec;
  const fs::path list = dir / "npy_files.txt";
  if (fs::exists(list, ec)) return read_list(list);
  std::vector<fs::path> out;
  fs::directory_iterator it(dir, ec);
  if (ec) return invalid_argument(dir.string(), ": cannot list folder: ", ec.message());
  for (const fs::directory_entry& e : it) {
    if (e.is_regular_file(ec) && lower_ext(e.path()) == ".npy") out.push_back(e.path());
  }
  if (out.empty()) return invalid_argument(dir.string(), ": folder has no .npy files");
  std::sort(out.begin(), out.end(), [](const fs::path& a, const fs::path& b) {
    return a.filename().string() < b.filename().string();
  });
  return out;
}

/// The .npy files of a folder, .txt list or single .npy file.
StatusOr<std::vector<fs::path>> resolve_files(const fs::path& p) {
  std::error_code ec;
  if (!fs::exists(p, ec)) return not_found(p.string(), ": no such file or folder");
  if (fs::is_directory(p, ec)) return read_folder(p);
  const std::string ext = lower_ext(p);
  if (ext == ".txt") return read_list(p);
  if (ext == ".npy") return std::vector<fs::path>{p};
  return invalid_argument(p.string(),
                          ": not calibration data (expected a folder of .npy files, a .txt list, ",
                          "a .json map or a .npy file)");
}

Status add_files(const std::vector<fs::path>& files, const CalibInputSpec& spec,
                 std::vector<CalibSample>* out) {
  for (const fs::path& f : files) {
    QBC_ASSIGN_OR_RETURN(CalibSampleInput in, check_sample(f, spec));
    CalibSample s;
    s.inputs[spec.name] = in;
    out->push_back(std::move(s));
  }
  return ok_status();
}

/// Parses a JSON map (located errors, never a nlohmann exception).
StatusOr<nlohmann::json> parse_json(const fs::path& path) {
  QBC_ASSIGN_OR_RETURN(std::string text, read_text_file(path.string()));
  JsonParseOptions options;
  options.error_label = "malformed JSON";
  return parse_json_text(text, path.string(), options);
}

Status add_json_map(const fs::path& path, const std::vector<CalibInputSpec>& inputs,
                    std::vector<CalibSample>* out) {
  QBC_ASSIGN_OR_RETURN(nlohmann::json j, parse_json(path));
  if (!j.is_object()) {
    return invalid_argument(path.string(),
                            ": expected an object mapping input names to lists of .npy files");
  }
  for (const auto& item : j.items()) {
    const std::string& key = item.key();  // not a structured binding: lambdas capture it (clang)
    const bool known = std::any_of(inputs.begin(), inputs.end(),
                                   [&](const CalibInputSpec& s) { return s.name == key; });
    if (!known) {
      return invalid_argument(path.string(), ": unknown input ", quote_prefix(key),
                              "; the model's float inputs are: ", input_names(inputs));
    }
  }
  std::vector<std::vector<CalibSampleInput>> per_input;
  std::vector<std::string> names;  // the inputs the map gives, in the model's order
  size_t count = 0;
  const CalibInputSpec* first = nullptr;
  for (const CalibInputSpec& spec : inputs) {
    if (!j.contains(spec.name) && spec.optional) continue;
    if (!j.contains(spec.name)) {
      return invalid_argument(path.string(), ": no samples for the model's input '", spec.name,
                              "' (inputs: ", input_names(inputs), ")");
    }
    const nlohmann::json& v = j[spec.name];
    std::vector<fs::path> files;
    auto resolve = [&](const nlohmann::json& e) -> Status {
      if (!e.is_string()) {
        return invalid_argument(path.string(), ": '", spec.name,
                                "': expected file paths (strings), got ", clip_prefix(e.dump()));
      }
      fs::path p(e.get<std::string>());
      if (p.is_relative()) p = path.parent_path() / p;
      QBC_ASSIGN_OR_RETURN(std::vector<fs::path> f, resolve_files(p));
      files.insert(files.end(), f.begin(), f.end());
      return ok_status();
    };
    if (v.is_array()) {
      for (const nlohmann::json& e : v) QBC_RETURN_IF_ERROR(resolve(e).with_context(path.string()));
    } else {
      QBC_RETURN_IF_ERROR(resolve(v).with_context(path.string()));
    }
    if (files.empty()) {
      return invalid_argument(path.string(), ": '", spec.name, "' lists no .npy files");
    }
    std::vector<CalibSampleInput> checked;
    for (const fs::path& f : files) {
      QBC_ASSIGN_OR_RETURN(CalibSampleInput in, check_sample(f, spec));
      checked.push_back(in);
    }
    if (!per_input.empty() && checked.size() != count) {
      return invalid_argument(path.string(), ": '", spec.name, "' has ", checked.size(),
                              " samples but '", first->name, "' has ", count,
                              "; every input needs one file per sample");
    }
    // An optional input (DeepStack rows) is added to the stream row by row: the same length.
    for (size_t k = 0; spec.optional && first != nullptr && k < checked.size(); ++k) {
      if (checked[k].seq != per_input.front()[k].seq)
        return invalid_argument(checked[k].path.string(), ": ", checked[k].seq,
                                " tokens, but sample ", k, " of '", first->name, "' has ",
                                per_input.front()[k].seq,
                                "; every input of a sample has its length");
    }
    if (first == nullptr) first = &spec;
    count = checked.size();
    per_input.push_back(std::move(checked));
    names.push_back(spec.name);
  }
  // Optional inputs come together (a sample's DeepStack levels): all of them or none.
  size_t optional = 0, given = 0;
  std::string missing;
  for (const CalibInputSpec& spec : inputs) {
    if (!spec.optional) continue;
    ++optional;
    if (j.contains(spec.name))
      ++given;
    else if (missing.empty())
      missing = spec.name;
  }
  if (given > 0 && given < optional)
    return invalid_argument(path.string(), ": gives ", given, " of the model's ", optional,
                            " optional inputs but not '", missing,
                            "'; give all of them (the DeepStack levels) or none");
  for (size_t i = 0; i < count; ++i) {
    CalibSample s;
    for (size_t k = 0; k < names.size(); ++k) s.inputs[names[k]] = per_input[k][i];
    out->push_back(std::move(s));
  }
  return ok_status();
}

Status check_finite(const std::vector<float>& data, const std::string& name) {
  for (size_t i = 0; i < data.size(); ++i) {
    if (!std::isfinite(data[i])) {
      return invalid_argument(name, ": non-finite value ", data[i], " at element ", i,
                              "; calibration data must be finite");
    }
  }
  return ok_status();
}

}  // namespace

std::vector<CalibInputSpec> calib_input_specs(const ir::Graph& g) {
  std::vector<CalibInputSpec> out;
  for (const ir::Node& n : g.nodes()) {
    if (n.op != ir::Op::kInput || n.type.dtype != ir::DType::kF32 || n.type.rank() == 0) continue;
    if (n.type.dim(-1) == ir::kDynamic) continue;
    // An M-RoPE graph's rope tables are computed by the host from the positions on every call
    // (calibration included), like the positions themselves.
    if (n.name == "rope_cos" || n.name == "rope_sin") continue;
    // Qwen3-VL's DeepStack rows are the vision part's: an image-text sample has them
    // (`qbc calib prepare --images`), a text sample none (zeros).
    out.push_back({n.name, n.type.dim(-1), ir::is_deepstack_input(n.name)});
  }
  return out;
}

Status EmbeddingTable::embed(const std::vector<int32_t>& tokens, std::vector<float>* out) const {
  return runner::embed_tokens(data.data(), vocab, hidden, tokens, out);
}

StatusOr<const ir::Weight*> find_host_embedding(const ir::Graph& g) {
  for (const auto& [name, w] : g.weights()) {
    if (w.role != ir::WeightRole::kHostEmbedding) continue;
    if (w.type.rank() != 2 || w.type.dims[0] <= 0 || w.type.dims[1] <= 0) {
      return invalid_argument("host embedding '@", name, "' has type ", w.type.to_string(),
                              ", expected [vocab, hidden]");
    }
    return &w;
  }
  return invalid_argument("graph '", g.name(),
                          "' has no host embedding weight (role host-embedding)");
}

CalibDataset::CalibDataset() : state_(std::make_shared<State>()) {}
CalibDataset::CalibDataset(std::shared_ptr<const State> state) : state_(std::move(state)) {}

size_t CalibDataset::size() const {
  return state_->table ? state_->random_count : state_->samples.size();
}
const std::vector<CalibInputSpec>& CalibDataset::inputs() const { return state_->inputs; }
const std::vector<CalibSample>& CalibDataset::samples() const { return state_->samples; }
bool CalibDataset::is_random() const { return state_->table != nullptr; }

Status CalibDataset::load(size_t i, std::vector<float>* data, int64_t* seq) const {
  for (const CalibInputSpec& in : state_->inputs)
    if (!in.optional) return load_input(i, in.name, data, seq);
  return failed_precondition("calibration dataset has no required input");
}

bool CalibDataset::has_input(size_t i, const std::string& input) const {
  if (state_->table || i >= state_->samples.size()) return false;
  return state_->samples[i].inputs.count(input) != 0;
}

Status CalibDataset::load_input(size_t i, const std::string& input, std::vector<float>* data,
                                int64_t* seq) const {
  const State& s = *state_;
  auto spec = std::find_if(s.inputs.begin(), s.inputs.end(),
                           [&](const CalibInputSpec& c) { return c.name == input; });
  if (spec == s.inputs.end()) {
    return not_found("no calibration input '", input, "' (inputs: ", input_names(s.inputs), ")");
  }
  if (i >= size()) {
    return invalid_argument("calibration sample ", i, " out of range (", size(), " samples)");
  }
  if (s.table) {
    uint64_t st = i;
    st = splitmix64(st) ^ s.seed;
    std::vector<int32_t> tokens(static_cast<size_t>(s.random_seq));
    for (int32_t& t : tokens) {
      t = static_cast<int32_t>(splitmix64(st) % static_cast<uint64_t>(s.table->vocab));
    }
    if (s.bos_id >= 0) tokens[0] = s.bos_id;
    *seq = s.random_seq;
    return s.table->embed(tokens, data);
  }
  auto file = s.samples[i].inputs.find(input);
  if (file == s.samples[i].inputs.end())
    return not_found("calibration sample ", i, " has no file for '", input, "'");
  const CalibSampleInput& f = file->second;
  // Re-check the header: the file may have changed since the dataset was opened.
  QBC_ASSIGN_OR_RETURN(CalibSampleInput now, check_sample(f.path, *spec));
  if (now.seq != f.seq) {
    return failed_precondition(f.path.string(), ": changed since it was checked (seq ", f.seq,
                               " -> ", now.seq, ")");
  }
  QBC_RETURN_IF_ERROR(read_npy(f.path, data));
  QBC_RETURN_IF_ERROR(check_finite(*data, f.path.string()));
  *seq = f.seq;
  return ok_status();
}

StatusOr<CalibDataset> open_calib_inputs(const std::vector<std::string>& paths,
                                         const std::vector<CalibInputSpec>& inputs) {
  if (inputs.empty()) return invalid_argument("the model has no float inputs to calibrate");
  if (paths.empty()) {
    return invalid_argument("no calibration data paths given (calibDataPaths is empty)");
  }
  auto state = std::make_shared<CalibDataset::State>();
  state->inputs = inputs;
  for (const std::string& raw : paths) {
    const fs::path p(raw);
    std::error_code ec;
    if (!fs::exists(p, ec)) return not_found(raw, ": no such file or folder");
    if (!fs::is_directory(p, ec) && lower_ext(p) == ".json") {
      QBC_RETURN_IF_ERROR(add_json_map(p, inputs, &state->samples));
      continue;
    }
    if (fs::is_directory(p, ec) && fs::exists(p / "inputs.json", ec)) {
      QBC_RETURN_IF_ERROR(add_json_map(p / "inputs.json", inputs, &state->samples));
      continue;
    }
    std::vector<CalibInputSpec> required;
    for (const CalibInputSpec& in : inputs)
      if (!in.optional) required.push_back(in);
    if (required.size() != 1) {
      return invalid_argument(raw, ": the model has ", required.size(), " required float inputs (",
                              input_names(required),
                              "); give a .json map from input names to .npy files");
    }
    QBC_ASSIGN_OR_RETURN(std::vector<fs::path> files, resolve_files(p));
    QBC_RETURN_IF_ERROR(add_files(files, required.front(), &state->samples));
  }
  if (state->samples.empty()) return invalid_argument("calibration data has no samples");
  return CalibDataset(std::move(state));
}

StatusOr<CalibDataset> make_random_calib(std::shared_ptr<const EmbeddingTable> table,
                                         const std::string& input_name, size_t num_samples,
                                         int64_t seq_len, uint64_t seed, int32_t bos_id) {
  if (!table || table->vocab <= 0 || table->hidden <= 0 ||
      static_cast<int64_t>(table->data.size()) != table->vocab * table->hidden) {
    return invalid_argument("random calibration: the embedding table is empty or inconsistent");
  }
  if (num_samples == 0) {
    return invalid_argument("random calibration: the number of samples must be positive");
  }
  if (seq_len < 1) {
    return invalid_argument("random calibration: the sequence length must be positive, got ",
                            seq_len);
  }
  if (bos_id >= table->vocab) {
    return invalid_argument("random calibration: BOS id ", bos_id, " is outside the vocabulary of ",
                            table->vocab);
  }
  auto state = std::make_shared<CalibDataset::State>();
  state->inputs = {{input_name, table->hidden}};
  state->table = std::move(table);
  state->random_count = num_samples;
  state->random_seq = seq_len;
  state->seed = seed;
  state->bos_id = bos_id;
  return CalibDataset(std::move(state));
}

}  // namespace qbc::calib
