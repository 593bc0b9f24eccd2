// Integer expressions of an NPU program: trip counts, row counts and buffer offsets that
// depend on loop indices and on the runtime values of one call (start position, tokens in
// the call, instance slot). They are what keeps a program's size independent of the
// context length: a 32K-token cache is a loop trip count, not 32K instructions.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace qbc::isa {

/// The runtime values of one call of a program.
enum class Sym : uint8_t {
  kStart = 0,  ///< first cache position of the call (tokens already cached)
  kSeq = 1,    ///< tokens in the call (1 for decode, 1..chunk for prefill)
  kSlot = 2,   ///< the instance (sequence) slot: selects the KV, activation and scratch regions
};
inline constexpr int kNumSyms = 3;
const char* sym_name(Sym s);

/// Values an expression is evaluated with.
struct Env {
  int64_t sym[kNumSyms] = {0, 0, 0};
  std::vector<int64_t> loop;  ///< loop variable values, indexed by Loop::var
};

/// A small expression tree stored as a node list (the root is the last node). Operands of a
/// node are earlier nodes. Division and modulo are floor/ceil on non-negative values; they
/// are defined for negative numerators too (floor semantics) so bounds checks are exact.
class Expr {
 public:
  enum class Op : uint8_t {
    kConst,
    kSym,
    kLoop,
    kAdd,
    kSub,
    kMul,
    kFloorDiv,
    kCeilDiv,
    kMod,
    kMin,
    kMax
  };
  struct Node {
    Op op = Op::kConst;
    int64_t value = 0;  ///< kConst: the value; kSym: the Sym; kLoop: the loop variable
    int32_t a = -1, b = -1;
  };

  Expr() : Expr(int64_t{0}) {}
  Expr(int64_t c);  // NOLINT(google-explicit-constructor): constants read naturally
  static Expr sym(Sym s);
  static Expr loop(int var);
  /// An expression from a node list read from a file (the MXQ reader): false when the list
  /// is empty or longer than kMaxNodes, an op or a symbol is unknown, a loop variable is
  /// negative or an operand is not an earlier node.
  static bool from_nodes(std::vector<Node> nodes, Expr* out);
  static constexpr size_t kMaxNodes = 4096;

  Expr operator+(const Expr& o) const { return bin(Op::kAdd, o); }
  Expr operator-(const Expr& o) const { return bin(Op::kSub, o); }
  Expr operator*(const Expr& o) const { return bin(Op::kMul, o); }
  Expr floordiv(const Expr& o) const { return bin(Op::kFloorDiv, o); }
  Expr ceildiv(const Expr& o) const { return bin(Op::kCeilDiv, o); }
  Expr mod(const Expr& o) const { return bin(Op::kMod, o); }
  Expr min(const Expr& o) const { return bin(Op::kMin, o); }
  Expr max(const Expr& o) const { return bin(Op::kMax, o); }

  int64_t eval(const Env& env) const;
  bool is_const() const;
  /// The constant value (QBC_CHECKed to be constant).
  int64_t constant() const;
  /// True when the expression reads `s` (directly or through a loop bound is not tracked).
  bool uses(Sym s) const;
  /// The loop variables it reads.
  std::vector<int> loops() const;
  /// Text form, e.g. "min(seq - 16*i0, 16)"; constant-folded where trivial.
  std::string to_string() const;
  const std::vector<Node>& nodes() const { return nodes_; }
  bool operator==(const Expr& o) const;

 private:
  Expr bin(Op op, const Expr& o) const;
  std::vector<Node> nodes_;
};

}  // namespace qbc::isa
