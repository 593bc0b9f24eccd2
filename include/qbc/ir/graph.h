// The in-memory MBLT graph: nodes in topological order, each producing one
// value named after the node; weights referenced by name and stored outside the
// graph. Invariants are numbered in docs/ir.md and checked by ir::verify().
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "qbc/ir/attrs.h"
#include "qbc/ir/op.h"
#include "qbc/ir/types.h"

namespace qbc::ir {

/// Index of a node in Graph::nodes(); also names the value the node produces.
using ValueId = int;

/// An operand: another node's value, or a weight by name.
struct Operand {
  enum class Kind { kValue, kWeight };
  Kind kind = Kind::kValue;
  ValueId value = -1;   ///< kValue: the producing node.
  std::string weight;   ///< kWeight: the weight's name.

  static Operand of(ValueId v) { return Operand{Kind::kValue, v, {}}; }
  static Operand of_weight(std::string name) { return Operand{Kind::kWeight, -1, std::move(name)}; }
  bool is_weight() const { return kind == Kind::kWeight; }
  bool operator==(const Operand& o) const { return kind == o.kind && value == o.value && weight == o.weight; }
};

/// Which compiled part a node belongs to. The head is its own part so it can be
/// quantized and placed separately.
enum class Part { kBody, kHead };

/// One operation.
struct Node {
  Op op = Op::kInput;
  std::string name;    ///< Unique, stable, readable: "blk.3.attn.q_proj".
  std::vector<Operand> operands;
  TensorType type;     ///< The result type.
  Attrs attrs;
  std::string origin;  ///< The HF module it came from: "model.layers.3.self_attn.q_proj".
  int block = -1;      ///< Decoder block index, or -1 outside blocks.
  Part part = Part::kBody;

  bool operator==(const Node& o) const;
};

/// "node 'blk.0.attn.q_proj' (qlinear)": how every stage names a node in a message.
std::string describe(const Node& n);

/// True for nodes that compute with integer numerics (docs/numerics.md): qlinear, and
/// attention with a quantized KV cache.
bool is_quantized(const Node& n);

/// Where a weight's bytes live.
enum class WeightSource {
  kModel,    ///< In the source model, by HF canonical tensor name (frontend::ModelSource).
  kSidecar,  ///< In the MBLT's weights sidecar (a safetensors file), by tensor name.
};

/// What a weight is for.
enum class WeightRole {
  kParameter,      ///< Used by graph nodes.
  kHostEmbedding,  ///< The token-embedding table: stays on the host, used to make inputs_embeds.
};

/// A named weight.
struct Weight {
  std::string name;    ///< "blk.0.attn.q_proj.weight".
  TensorType type;
  WeightSource source = WeightSource::kModel;
  std::string tensor;  ///< Name in the source model or sidecar.
  WeightRole role = WeightRole::kParameter;

  bool operator==(const Weight& o) const {
    return name == o.name && type == o.type && source == o.source && tensor == o.tensor && role == o.role;
  }
};

/// A file the graph was made from, for provenance.
struct SourceFile {
  std::string path;
  uint64_t size = 0;
  std::string xxh3_128;  ///< Hex content hash.
  bool operator==(const SourceFile& o) const { return path == o.path && size == o.size && xxh3_128 == o.xxh3_128; }
};

/// A decoder graph plus its weights table and provenance.
class Graph {
 public:
  explicit Graph(std::string name = "model") : name_(std::move(name)) {}

  const std::string& name() const { return name_; }
  void set_name(std::string n) { name_ = std::move(n); }

  /// Nodes in topological order.
  const std::vector<Node>& nodes() const { return nodes_; }
  std::vector<Node>& mutable_nodes() { return nodes_; }
  const Node& node(ValueId id) const { return nodes_[static_cast<size_t>(id)]; }
  Node& mutable_node(ValueId id) { return nodes_[static_cast<size_t>(id)]; }
  /// Appends a node without checks (Builder and parser use this); returns its id.
  ValueId append(Node n);
  /// The node called `name`, or -1.
  ValueId find(const std::string& name) const;

  /// Graph outputs, in order.
  const std::vector<ValueId>& outputs() const { return outputs_; }
  void add_output(ValueId v) { outputs_.push_back(v); }
  void clear_outputs() { outputs_.clear(); }

  /// Weights by name (ordered, so output is stable).
  const std::map<std::string, Weight>& weights() const { return weights_; }
  const Weight* find_weight(const std::string& name) const;
  void add_weight(Weight w) { weights_[w.name] = std::move(w); }
  void remove_weight(const std::string& name) { weights_.erase(name); }

  /// Provenance: source model path and format, files with hashes, free-form metadata
  /// (producer, qbc version, architecture, config.json text, effective config JSON).
  std::string source_path;
  std::string source_format;
  std::vector<SourceFile> files;
  std::map<std::string, std::string> metadata;

  bool operator==(const Graph& o) const;

 private:
  std::string name_;
  std::vector<Node> nodes_;
  std::map<std::string, ValueId> by_name_;
  std::vector<ValueId> outputs_;
  std::map<std::string, Weight> weights_;
};

}  // namespace qbc::ir
