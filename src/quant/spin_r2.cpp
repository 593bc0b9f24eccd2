// spinR2: per-layer rotation of the value heads, quant.md §3.3 (SpinQuant's R2).
// For each attention node with head_dim d, an orthogonal R2 (d×d) shared by all heads:
//   v rows, per KV head block [d, in]:          W_v[blk] ← R2ᵀ·W_v[blk], b_v[blk] ← R2ᵀ·b_v[blk]
//   o_proj columns, per query head [out, d]:    W_o[:, head] ← W_o[:, head]·R2
// so each head's value is v_h·R2 and the o_proj input columns undo it: attention mixes
// tokens, not channels (P·(V R2)·(W_o R2)ᵀ = P·V·W_oᵀ), also with soft-capping or a
// window. One R2 for every head keeps GQA consistent. The V rows come from v_proj, or
// from a slice of a fused qkv_proj (Phi-3). R2 is the seeded random Hadamard of
// qbc/quant/hadamard.h with seed mix_seed(seed ^ layer). Computed in fp64, written once.
#include <string>
#include <vector>

#include "qbc/quant/transforms.h"
#include "transform_util.h"

namespace qbc::quant {
namespace {

class SpinR2 final : public Pass {
 public:
  explicit SpinR2(uint64_t seed) : seed_(seed) {}
  std::string name() const override { return "spinR2"; }

  StatusOr<bool> run(PassContext& ctx) override {
    const ir::Graph& g = *ctx.graph;
    const auto users = consumers(g);
    struct Site {
      std::string attn;              // the attention node
      std::string v_weight, v_bias;  // the linear producing V (v_proj, or qkv_proj)
      ir::ValueId v_linear = -1;
      int64_t v_row0 = 0;            // first V row of that weight
      std::string o_weight;          // o_proj
      int64_t heads = 0, kv_heads = 0, head_dim = 0;
      uint64_t layer = 0;
    };
    std::vector<Site> sites;
    for (ir::ValueId id = 0; id < static_cast<ir::ValueId>(g.nodes().size()); ++id) {
      const ir::Node& a = g.node(id);
      if (a.op != ir::Op::kAttention) continue;
      auto refuse = [&](const auto&... why) {
        return failed_precondition("attention '", a.name, "': ", why...);
      };
      Site s;
      s.attn = a.name;
      s.heads = a.attrs.get_int("num_heads");
      s.kv_heads = a.attrs.get_int("num_kv_heads");
      s.head_dim = a.attrs.get_int("head_dim");
      s.layer = static_cast<uint64_t>(a.block >= 0 ? a.block : id);
      if (ir::is_quantized(a) || a.attrs.has("v_scale")) {
        return refuse("it has a quantized KV cache; spinR2 must run before KV-cache calibration");
      }
      const int64_t v_width = s.kv_heads * s.head_dim;
      // V: a linear read only by this attention, or a slice of one.
      const ir::ValueId v = a.operands[2].value;
      if (users[static_cast<size_t>(v)] != std::vector<ir::ValueId>{id}) {
        return refuse("its V input '", g.node(v).name, "' is also read by other nodes");
      }
      const ir::Node& vn = g.node(v);
      ir::ValueId v_linear = v;
      if (vn.op == ir::Op::kSlice) {
        v_linear = vn.operands[0].value;
        const int64_t start = vn.attrs.get_int("start"), end = vn.attrs.get_int("end");
        if (end - start != v_width) {
          return refuse("the V slice '", vn.name, "' has ", end - start, " columns, not ", v_width);
        }
        s.v_row0 = start;
        // Every other reader of the fused projection must be a slice disjoint from V's rows.
        for (ir::ValueId other : users[static_cast<size_t>(v_linear)]) {
          if (other == v) continue;
          const ir::Node& on = g.node(other);
          if (on.op != ir::Op::kSlice ||
              (on.attrs.get_int("start") < end && on.attrs.get_int("end") > start)) {
            return refuse("'", g.node(v_linear).name, "' is also read by '", on.name,
                          "', which overlaps the V columns");
          }
        }
      }
      const ir::Node& ln = g.node(v_linear);
      if (ln.op != ir::Op::kLinear) {
        return refuse("V comes from '", ln.name, "' (", ir::op_info(ln.op).name,
                      "), not from a float linear");
      }
      if (v_linear == v && ln.type.dims.back() != v_width) {
        return refuse("V projection '", ln.name, "' has ", ln.type.dims.back(), " outputs, not ",
                      v_width);
      }
      s.v_linear = v_linear;
      s.v_weight = weight_operand(g, v_linear, 1);
      s.v_bias = weight_operand(g, v_linear, 2);
      // O: the attention output feeds exactly one linear.
      const auto& o_users = users[static_cast<size_t>(id)];
      if (o_users.size() != 1 || g.node(o_users[0]).op != ir::Op::kLinear) {
        return refuse("its output must feed exactly one float linear (o_proj)");
      }
      s.o_weight = weight_operand(g, o_users[0], 1);
      sites.push_back(s);
    }

    for (const Site& s : sites) {
      const int64_t d = s.head_dim;
      QBC_ASSIGN_OR_RETURN(const Rotation r2, Rotation::make(d, mix_seed(seed_ ^ s.layer)));
      // V rows, per KV head: every column c of the block becomes R2ᵀ·c. Gather each block
      // transposed ([in, d], rows contiguous), multiply its rows by R2, scatter back.
      QBC_ASSIGN_OR_RETURN(Matrix wv, read_matrix(ctx, s.v_weight));
      if (s.v_row0 + s.kv_heads * d > wv.rows) {
        return internal_error("'", s.attn, "': V rows [", s.v_row0, ", ", s.v_row0 + s.kv_heads * d,
                              ") exceed the ", wv.rows, " rows of '", s.v_weight, "'");
      }
      std::vector<double> block(static_cast<size_t>(wv.cols * d));
      for (int64_t h = 0; h < s.kv_heads; ++h) {
        const int64_t r0 = s.v_row0 + h * d;
        for (int64_t i = 0; i < d; ++i) {
          for (int64_t c = 0; c < wv.cols; ++c)
            block[static_cast<size_t>(c * d + i)] = wv.at(r0 + i, c);
        }
        QBC_RETURN_IF_ERROR(r2.right_multiply_rows(block.data(), wv.cols));
        for (int64_t i = 0; i < d; ++i) {
          for (int64_t c = 0; c < wv.cols; ++c)
            wv.at(r0 + i, c) = block[static_cast<size_t>(c * d + i)];
        }
      }
      write_matrix(ctx, s.v_weight, wv);
      note_rebased(ctx, s.v_linear, "spinR2");
      if (!s.v_bias.empty()) {
        QBC_ASSIGN_OR_RETURN(Matrix b, read_matrix(ctx, s.v_bias));
        // Each head's bias segment (contiguous) becomes R2ᵀ·b = b·R2 as a row.
        QBC_RETURN_IF_ERROR(r2.right_multiply_rows(b.v.data() + s.v_row0, s.kv_heads));
        write_matrix(ctx, s.v_bias, b);
      }
      // o_proj: each row's per-head segments (contiguous, length d) times R2.
      QBC_ASSIGN_OR_RETURN(Matrix wo, read_matrix(ctx, s.o_weight));
      if (wo.cols != s.heads * d) {
        return internal_error("'", s.attn, "': '", s.o_weight, "' has ", wo.cols, " columns, not ",
                              s.heads * d);
      }
      QBC_RETURN_IF_ERROR(r2.right_multiply_rows(wo.v.data(), wo.rows * s.heads));
      write_matrix(ctx, s.o_weight, wo);
    }
    return !sites.empty();
  }

 private:
  uint64_t seed_;
};

}  // namespace

std::unique_ptr<Pass> make_spin_r2(uint64_t seed) { return std::make_unique<SpinR2>(seed); }

}  // namespace qbc::quant
