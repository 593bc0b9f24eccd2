// Node output bases after the equivalence transforms (see qbc/quant/output_basis.h).
#include "qbc/quant/output_basis.h"

#include <sstream>

#include "transform_util.h"

namespace qbc::quant {
namespace {

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream is(text);
  for (std::string line; std::getline(is, line);) {
    if (!line.empty()) out.push_back(line);
  }
  return out;
}

}  // namespace

StatusOr<OutputBasis> output_basis(const ir::Graph& g) {
  OutputBasis b;
  if (auto it = g.metadata.find(kSpinR1Key); it != g.metadata.end()) {
    const std::vector<std::string> lines = lines_of(it->second);
    std::istringstream head(lines.empty() ? std::string() : lines[0]);
    uint64_t seed = 0;
    if (!(head >> seed >> b.hidden) || b.hidden <= 0)
      return invalid_argument("graph metadata '", kSpinR1Key, "': expected '<seed> <hidden>'");
    b.spin_r1_seed = seed;
    b.rotated.insert(lines.begin() + 1, lines.end());
  }
  if (auto it = g.metadata.find(kRebasedOutputsKey); it != g.metadata.end()) {
    for (const std::string& line : lines_of(it->second)) {
      const size_t tab = line.find('\t');
      if (tab == std::string::npos)
        return invalid_argument("graph metadata '", kRebasedOutputsKey, "': line '", line,
                                "' is not '<node>\\t<pass>'");
      std::string& passes = b.rebased[line.substr(0, tab)];
      passes += (passes.empty() ? "" : ", ") + line.substr(tab + 1);
    }
  }
  return b;
}

namespace {

// rows · R1 (apply) or rows · R1ᵀ (undo), in double, rounded once.
Status rotate_rows(const OutputBasis& b, float* rows, int64_t count, bool undo) {
  if (!b.spin_r1_seed)
    return failed_precondition("the graph has no spinR1 rotation to ", undo ? "undo" : "apply");
  QBC_ASSIGN_OR_RETURN(const Rotation r, Rotation::make(b.hidden, *b.spin_r1_seed));
  std::vector<double> x(rows, rows + count * b.hidden);
  QBC_RETURN_IF_ERROR(undo ? r.right_multiply_rows_by_transpose(x.data(), count)
                           : r.right_multiply_rows(x.data(), count));
  for (size_t i = 0; i < x.size(); ++i) rows[i] = static_cast<float>(x[i]);
  return ok_status();
}

}  // namespace

Status undo_spin_r1(const OutputBasis& b, float* rows, int64_t count) {
  return rotate_rows(b, rows, count, /*undo=*/true);
}

Status apply_spin_r1(const OutputBasis& b, float* rows, int64_t count) {
  return rotate_rows(b, rows, count, /*undo=*/false);
}

void record_spin_r1(ir::Graph& g, uint64_t seed, int64_t hidden,
                    const std::vector<std::string>& rotated) {
  std::string text = std::to_string(seed) + " " + std::to_string(hidden) + "\n";
  for (const std::string& n : rotated) text += n + "\n";
  g.metadata[kSpinR1Key] = text;
}

void record_rebased(ir::Graph& g, const std::string& node, const std::string& pass) {
  std::string& text = g.metadata[kRebasedOutputsKey];
  const std::string line = node + "\t" + pass + "\n";
  if (text.find(line) == std::string::npos) text += line;
}

}  // namespace qbc::quant
