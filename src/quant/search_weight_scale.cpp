// searchWeightScale: AWQ-style per-input-channel scale search and per-row clip search
// (docs/research/quant.md §5, §2.3, §3.7), block by block over the calibration set.
//
// For each decoder block (BlockRunner: one block's weights and activations in memory)
// and each enabled projection group:
//   attention input  q/k/v (or a fused qkv) read the attn_norm output X: one s for all,
//                    folded into the norm gain, (g + u) ← (g + u) / s, W ← W·diag(s);
//   out              o_proj reads the attention output; 1/s goes into the v_proj rows
//                    (and bias): attention is linear in V per channel. GQA: o column
//                    h·d + c is produced by V channel (h / group)·d + c, so s is tied
//                    over the query heads of a group (one s per KV channel, expanded);
//   ffn              gate/up (or a fused gate_up) read the ffn_norm output: into the gain;
//   down             down_proj reads act(gate) ⊙ up: 1/s into the up rows (and bias).
// The search: s_c = m_c^α / sqrt(max_c m^α · min_c m^α) with m_c = mean|X_c| over the
// calibration rows (for o_proj the mean over the query heads of each group too), for
// α ∈ {0, 0.05, ..., 1}; the error of α is Σ over the group's linears and rows w of
//   ||X·(w − Q(w ⊙ s) / s)||²  =  ||Y − (X / s)·Q(W·diag(s))ᵀ||²,
// Q the per-row round-to-nearest quantizer at the linear's weight bits (numerics.md).
// α = 0 (s = 1, no scaling) is in the grid and the first minimum wins, so the chosen
// s never has a larger error than RTN on the calibration rows. The folds are exact in
// float (up to one fp32 rounding), so the float model is unchanged.
// Then, on the folded weights and the matching inputs X / s, each row's clip ratio
// r ∈ {1, 0.95, ..., 0.5}, with the row's extreme on either end of the code range
// (extreme_scale; r = 1 on ±qmax is absmax RTN, tried first), that minimises
// ||X·(w − ŵ)||²; the codes and scales go to ctx.fixed.
//
// Folding into v rows / up rows does not change their own quantization: per-row
// symmetric quantization is invariant to scaling a row. So every group of a block is
// searched from one run of the block on the float stream, then all folds are applied,
// then the clip searches run, then the stream advances to that run's outputs (the folded
// block computes them up to the fp32 rounding of its folded weights).
//
// Not handled (left to RTN, with the float weights untouched): the LM head; norms that
// feed anything but linears or per-head norms (group > 0). When v or up is a slice of a
// fused linear (Phi-3's qkv_proj / gate_up_proj), o_proj / down_proj get the clip search
// only (s = 1); the norm-fed groups are searched as usual. Linears at 16 weight bits are folded
// (the fold is exact) but neither contribute to the error nor get fixed integers.
//
// Cost (what keeps it usable on real models): the output error of a candidate is
// evaluated for a batch of weight rows with one product (OutputError), through the input's
// Gram matrix when the input has at most 512 features (all kept calibration rows), or
// on 512 evenly spaced calibration rows otherwise; the α search scores at most 256
// evenly spaced output rows of each linear (α is one number per group). Per block that
// is about 22 clip candidates × rows × in × 512 multiply-adds for the clip search and a
// small fraction of it for the α search.
//
// Deterministic: fp64 arithmetic except OutputError's fp32 products past 512 inputs (each
// element one fused multiply-add chain in input order, f32_products.h), fixed evenly spaced
// row subsamples, every reduction in index order (neither gemm_acc's nor the fp32 products
// depend on how they are split or on the CPU's vector width); threads only split
// independent output rows (or Gram rows), whose results are combined in index order.
#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "gptq_linalg.h"
#include "output_error.h"
#include "qbc/numerics/quantizer.h"
#include "qbc/quant/block_runner.h"
#include "qbc/quant/gptq.h"
#include "qbc/quant/weight_passes.h"
#include "qbc/support/logging.h"
#include "transform_util.h"

namespace qbc::quant {
namespace {

constexpr int64_t kMaxRows = 4096;    // calibration rows kept per group input
constexpr int kAlphaGrid = 20;        // α = i / 20, i = 0..20
constexpr int kClipSteps = 10;        // r = 1 − 0.05·i, i = 0..10
constexpr int64_t kSearchRows = 256;  // α search: output rows of each linear scored
constexpr int64_t kRowChunk = 64;     // weight rows per batched error evaluation

/// Calls f(i) for i in [0, n) on up to `threads` threads (each i is independent).
template <typename F>
void parallel_for(int64_t n, int threads, const F& f) {
  gptq_detail::parallel_chunks(n, 1, threads, [&](int64_t a, int64_t b) {
    for (int64_t i = a; i < b; ++i) f(i);
  });
}

double code_of(double w, double s, int qm) {
  return std::clamp(std::nearbyint(w / s), static_cast<double>(-qm - 1), static_cast<double>(qm));
}

/// d[c] = (w[c] − q·code_of(w[c], q, qm))·inv[c] for c < in: one row's rounding error at
/// scale q, weighted by the input's scale. The AVX2 clone computes the same operations a
/// vector at a time (division, round to nearest even, clamp, multiply, subtract: each exact
/// or correctly rounded, no fused multiply-adds in qbc_quant), with code_of inlined.
__attribute__((target_clones("avx2", "default"))) void weighted_row_error(const double* w, double q,
                                                                          int qm, const double* inv,
                                                                          int64_t in, double* d) {
  for (int64_t c = 0; c < in; ++c) d[c] = (w[c] - q * code_of(w[c], q, qm)) * inv[c];
}

/// Rows of one activation, subsampled: at most `per_sample` evenly spaced tokens of each
/// sample, as fp64.
struct Rows {
  int64_t cols = 0, n = 0;
  std::vector<double> x;
  std::vector<double> abs_sum;  // Σ|x_c| over every token (not only the kept rows)
  int64_t tokens = 0;
};

Status add_rows(const std::vector<float>& act, const std::vector<int64_t>& shape,
                int64_t per_sample, Rows* r, const std::string& name) {
  const int64_t cols = shape.empty() ? 1 : shape.back();
  if (cols <= 0) return internal_error("activation '", name, "' has no columns");
  const int64_t seq = static_cast<int64_t>(act.size()) / cols;
  if (r->cols == 0) {
    r->cols = cols;
    r->abs_sum.assign(static_cast<size_t>(cols), 0.0);
  }
  if (r->cols != cols)
    return internal_error("activation '", name, "' changed width: ", r->cols, " vs ", cols);
  for (int64_t t = 0; t < seq; ++t) {
    for (int64_t c = 0; c < cols; ++c)
      r->abs_sum[static_cast<size_t>(c)] += std::fabs(act[t * cols + c]);
  }
  r->tokens += seq;
  const int64_t keep = std::min(seq, per_sample);
  for (int64_t k = 0; k < keep; ++k) {
    const int64_t t = keep == seq ? k : (k * seq) / keep;
    r->x.insert(r->x.end(), act.begin() + t * cols, act.begin() + (t + 1) * cols);
    ++r->n;
  }
  return ok_status();
}

/// A linear of a group: its node, its weight (the block's working copy) and bits.
struct Member {
  std::string node;
  std::string weight;
  int bits = 16;
  bool fix = false;  // record integers (its projection's flag is on and bits < 16)
};

/// One projection group: the input activation, its linears, the producer fold.
struct Group {
  enum Kind { kNorm, kValue, kUp } kind = kNorm;
  std::string label;  // "attn", "out", "ffn", "down"
  std::string input;  // activation name of the linears' input
  std::vector<Member> members;
  // kNorm: the norm gain and unit offset; kValue / kUp: the producer linear whose rows
  // (and bias) are divided by s, the first of those rows, and for kValue the GQA tie.
  std::string gain;
  double unit_offset = 0;
  ir::ValueId producer = -1;
  int64_t row_offset = 0;
  int64_t heads = 0, kv_heads = 0, head_dim = 0;
  bool search = true;  // false: only clip search (scale search off for this group)
};

class SearchWeightScale final : public Pass {
 public:
  explicit SearchWeightScale(const config::SearchWeightScaleConfig& config) : config_(config) {}
  std::string name() const override { return "searchWeightScale"; }
  pass::ResourceSet needs() const override { return kCalibSamples | kFixedWeights; }

  StatusOr<bool> run(PassContext& ctx) override {
    const auto& t = config_.transformer();
    if (!(t.query() || t.key() || t.value() || t.out() || t.ffn())) return false;
    threads_ = gptq_detail::resolve_threads(ctx.session.threads);

    const ir::Graph& g = *ctx.graph;
    const auto users = consumers(g);
    const std::vector<BlockNodes> blocks = block_nodes(g);
    QBC_ASSIGN_OR_RETURN(BlockRunner runner, BlockRunner::create(g, ctx.num_samples, *ctx.samples,
                                                                 ctx.session, ctx.deepstack));
    const ir::WeightReader reader = ctx.weights->reader();
    bool changed = false;
    size_t done = 0;
    for (size_t s = 0; s < runner.num_segments(); ++s) {
      const BlockNodes* b = block_among(g, blocks, runner.node_names(s));
      if (b == nullptr) {
        if (s + 1 == runner.num_segments()) break;  // the head: not searched
        QBC_RETURN_IF_ERROR(runner.advance(s, reader));
        continue;
      }
      QBC_ASSIGN_OR_RETURN(std::vector<Group> groups, plan_block(ctx, users, *b));
      const bool ran = !groups.empty();  // run_block ran the block and kept its outputs
      if (ran) {
        QBC_ASSIGN_OR_RETURN(bool c, run_block(ctx, runner, s, reader, std::move(groups)));
        changed = changed || c;
      }
      events::progress("awq", static_cast<int64_t>(++done), static_cast<int64_t>(blocks.size()));
      // The next block reads this block's outputs from the run before the folds: the folds
      // leave the block's function unchanged up to the fp32 rounding of the folded weights,
      // and a second float run of the block would cost as much as the first.
      if (s + 1 < runner.num_segments()) {
        QBC_RETURN_IF_ERROR(ran ? runner.advance_from_last_run(s) : runner.advance(s, reader));
      }
    }
    return changed;
  }

 private:
  /// The groups of block `b` that the config enables and the graph allows.
  StatusOr<std::vector<Group>> plan_block(const PassContext& ctx,
                                          const std::vector<std::vector<ir::ValueId>>& users,
                                          const BlockNodes& b) const {
    const ir::Graph& g = *ctx.graph;
    const auto& t = config_.transformer();
    auto member = [&](ir::ValueId id) {
      Member m;
      m.node = g.node(id).name;
      m.weight = weight_operand(g, id, 1);
      m.bits = linear_bits(m.node, g.node(id).part == ir::Part::kHead, *ctx.options).weight;
      bool flag = t.ffn();
      if (id == b.q)
        flag = t.query();
      else if (id == b.k)
        flag = t.key();
      else if (id == b.v)
        flag = t.value();
      else if (id == b.qkv)
        flag = t.query() || t.key() || t.value();
      else if (id == b.o)
        flag = t.out();
      m.fix = flag && m.bits < 16;
      return m;
    };
    // Readers of a norm, when they are all linears (else the fold would not be exact).
    auto norm_group = [&](ir::ValueId norm, const char* label) -> std::optional<Group> {
      if (norm < 0) return std::nullopt;
      const ir::Node& n = g.node(norm);
      if (n.op != ir::Op::kRmsNorm || n.attrs.get_int("group") > 0) return std::nullopt;
      const auto& readers = users[static_cast<size_t>(norm)];
      if (readers.empty()) return std::nullopt;
      Group grp;
      grp.kind = Group::kNorm;
      grp.label = label;
      grp.input = n.name;
      grp.gain = weight_operand(g, norm, 1);
      grp.unit_offset = static_cast<double>(n.attrs.get_int("unit_offset"));
      if (grp.gain.empty()) return std::nullopt;
      for (ir::ValueId r : readers) {
        if (g.node(r).op != ir::Op::kLinear || g.node(r).operands[0].value != norm)
          return std::nullopt;
        Member m = member(r);
        bool dup = false;
        for (const Member& o : grp.members) dup = dup || o.weight == m.weight;
        if (!dup) grp.members.push_back(m);
      }
      return grp;
    };
    // A single reader `id` of a value produced only for it.
    auto only_reader = [&](ir::ValueId v, ir::ValueId id) {
      const auto& u = users[static_cast<size_t>(v)];
      return u.size() == 1 && u[0] == id;
    };

    std::vector<Group> out;
    if (t.query() || t.key() || t.value()) {
      if (auto grp = norm_group(b.attn_norm, "attn")) out.push_back(std::move(*grp));
    }
    if (t.out() && b.o >= 0) {
      const ir::ValueId att = g.node(b.o).operands[0].value;
      const ir::Node& a = g.node(att);
      Group grp;
      grp.kind = Group::kValue;
      grp.label = "out";
      grp.input = a.name;
      grp.members.push_back(member(b.o));
      // The scale needs a separate v_proj read only by this attention, read only by
      // o_proj; otherwise (a fused qkv) only the clip search runs.
      grp.search = b.v >= 0 && a.op == ir::Op::kAttention && a.operands.size() > 2 &&
                   a.operands[2].value == b.v && only_reader(att, b.o) && only_reader(b.v, att) &&
                   g.node(b.v).op == ir::Op::kLinear;
      if (grp.search) {
        grp.producer = b.v;
        grp.heads = a.attrs.get_int("num_heads");
        grp.kv_heads = a.attrs.get_int("num_kv_heads");
        grp.head_dim = a.attrs.get_int("head_dim");
        if (grp.heads <= 0 || grp.kv_heads <= 0 || grp.head_dim <= 0 ||
            grp.heads % grp.kv_heads != 0) {
          return invalid_argument("attention '", a.name, "': ", grp.heads, " query heads, ",
                                  grp.kv_heads, " KV heads of ", grp.head_dim);
        }
      }
      out.push_back(std::move(grp));
    }
    if (t.ffn()) {
      if (auto grp = norm_group(b.ffn_norm, "ffn")) out.push_back(std::move(*grp));
      if (b.down >= 0) {
        const ir::ValueId act = g.node(b.down).operands[0].value;
        const ir::Node& an = g.node(act);
        Group grp;
        grp.kind = Group::kUp;
        grp.label = "down";
        grp.input = an.name;
        grp.members.push_back(member(b.down));
        // The scale needs a separate up_proj read only by the gated activation, read
        // only by down_proj; otherwise (a fused gate_up) only the clip search runs.
        grp.search = b.up >= 0 && an.op == ir::Op::kGatedAct && an.operands.size() > 1 &&
                     an.operands[1].value == b.up && only_reader(act, b.down) &&
                     only_reader(b.up, act) && g.node(b.up).op == ir::Op::kLinear;
        if (grp.search) grp.producer = b.up;
        out.push_back(std::move(grp));
      }
    }
    // Groups whose linears are all left in float have nothing to search.
    std::vector<Group> kept;
    for (Group& grp : out) {
      bool any = false;
      for (const Member& m : grp.members) any = any || m.bits < 16;
      if (any) kept.push_back(std::move(grp));
    }
    return kept;
  }

  StatusOr<bool> run_block(PassContext& ctx, BlockRunner& runner, size_t s,
                           const ir::WeightReader& reader, std::vector<Group> groups) {
    const ir::Graph& g = *ctx.graph;
    // 1. The group inputs, on the float stream.
    std::map<std::string, Rows> rows;
    for (const Group& grp : groups) rows[grp.input];
    const int64_t per_sample =
        std::max<int64_t>(1, kMaxRows / static_cast<int64_t>(ctx.num_samples));
    std::vector<float> act;
    std::vector<int64_t> shape;
    QBC_RETURN_IF_ERROR(runner.run(
        s, reader,
        [&](size_t, ref::Session& session) -> Status {
          for (auto& [name, r] : rows) {
            QBC_RETURN_IF_ERROR(session.activation(name, &act, &shape));
            QBC_RETURN_IF_ERROR(add_rows(act, shape, per_sample, &r, name));
          }
          return ok_status();
        },
        /*keep_outputs=*/true));

    // 2. Working copies of every weight the block's groups touch.
    std::map<std::string, Matrix> w;
    auto load = [&](const std::string& name) -> Status {
      if (name.empty() || w.count(name)) return ok_status();
      QBC_ASSIGN_OR_RETURN(Matrix m, read_matrix(ctx, name));
      w[name] = std::move(m);
      return ok_status();
    };
    for (const Group& grp : groups) {
      for (const Member& m : grp.members) QBC_RETURN_IF_ERROR(load(m.weight));
      if (grp.kind == Group::kNorm) QBC_RETURN_IF_ERROR(load(grp.gain));
      for (size_t i = 1; grp.producer >= 0 && i < g.node(grp.producer).operands.size(); ++i) {
        QBC_RETURN_IF_ERROR(load(weight_operand(g, grp.producer, i)));
      }
    }

    // 3. Scale search per group, then the folds (all from the same unscaled inputs).
    bool changed = false;
    std::vector<OutputError> errs;
    std::vector<std::vector<double>> scales;
    errs.reserve(groups.size());
    for (const Group& grp : groups) {
      Rows& r = rows[grp.input];
      const int64_t in = r.cols;
      for (const Member& m : grp.members) {
        if (w[m.weight].cols != in) {
          return internal_error("'", m.node, "' has ", w[m.weight].cols,
                                " input columns, its input '", grp.input, "' ", in);
        }
      }
      std::vector<double> mean(static_cast<size_t>(in));
      for (int64_t c = 0; c < in; ++c)
        mean[c] = r.abs_sum[c] / static_cast<double>(std::max<int64_t>(r.tokens, 1));
      if (grp.kind == Group::kValue &&
          grp.search) {  // GQA tie: the mean over the query heads of each group
        const int64_t H = grp.heads, KV = grp.kv_heads, d = grp.head_dim, gs = H / KV;
        if (in != H * d)
          return internal_error("'", grp.input, "' has ", in, " channels, expected ", H * d);
        std::vector<double> kv(static_cast<size_t>(KV * d), 0.0);
        for (int64_t h = 0; h < H; ++h) {
          for (int64_t c = 0; c < d; ++c)
            kv[(h / gs) * d + c] += mean[h * d + c] / static_cast<double>(gs);
        }
        for (int64_t h = 0; h < H; ++h) {
          for (int64_t c = 0; c < d; ++c) mean[h * d + c] = kv[(h / gs) * d + c];
        }
      }
      errs.emplace_back(std::move(r.x), r.n, in, threads_);
      r.x = {};
      double alpha = 0;
      std::vector<double> sc = search(errs.back(), mean, grp, w, &alpha);
      log("quant").debug("searchWeightScale: {} ({}): alpha {:.2f}", grp.label, grp.input, alpha);
      if (alpha > 0) {
        fold(g, grp, sc, w);
        if (grp.producer >= 0) note_rebased(ctx, grp.producer, "searchWeightScale");
        changed = true;
      }
      scales.push_back(std::move(sc));
    }

    // 4. Round the working copies to fp32 (what the model will hold), write them back.
    for (auto& [name, m] : w) {
      for (double& v : m.v) v = static_cast<double>(static_cast<float>(v));
    }
    if (changed) {
      for (const Group& grp : groups) {
        for (const Member& m : grp.members) write_matrix(ctx, m.weight, w[m.weight]);
        if (grp.kind == Group::kNorm) write_matrix(ctx, grp.gain, w[grp.gain]);
        for (size_t i = 1; grp.producer >= 0 && i < g.node(grp.producer).operands.size(); ++i) {
          const std::string name = weight_operand(g, grp.producer, i);
          write_matrix(ctx, name, w[name]);
        }
      }
    }

    // 5. Clip search on the folded weights, with the folded inputs X / s.
    for (size_t gi = 0; gi < groups.size(); ++gi) {
      for (const Member& m : groups[gi].members) {
        // The clip search chooses one symmetric scale per row; with group scales
        // (bit.weightGroupSize) or zero points (bit.weightZeroPoint) round-to-nearest or
        // GPTQ chooses the integers of the folded weights instead.
        if (!m.fix || weight_group(*ctx.options, w[m.weight].cols) > 0 ||
            ctx.options->bit().weight_zero_point()) {
          continue;
        }
        std::vector<double> inv(scales[gi].size());
        for (size_t c = 0; c < inv.size(); ++c) inv[c] = 1.0 / scales[gi][c];
        (*ctx.fixed)[m.node] = clip(errs[gi], w[m.weight], inv, m.bits);
        changed = true;
      }
    }
    return changed;
  }

  /// The α search of one group: returns s (all ones for α = 0) and the chosen α.
  std::vector<double> search(const OutputError& err, const std::vector<double>& mean,
                             const Group& grp, const std::map<std::string, Matrix>& w,
                             double* best_alpha) const {
    const int64_t in = err.cols();
    std::vector<double> best(static_cast<size_t>(in), 1.0);
    if (!grp.search) return best;
    double mmax = 0;
    for (double m : mean) mmax = std::max(mmax, m);
    if (!(mmax > 0) || !std::isfinite(mmax)) return best;
    const double floor = mmax * 1e-6;  // dead channels: no information, keep them near 1
    double best_err = std::numeric_limits<double>::infinity();
    *best_alpha = 0;
    std::vector<double> sc(static_cast<size_t>(in));
    for (int i = 0; i <= kAlphaGrid; ++i) {
      const double alpha = static_cast<double>(i) / kAlphaGrid;
      double smax = 0, smin = std::numeric_limits<double>::infinity();
      for (int64_t c = 0; c < in; ++c) {
        sc[c] = i == 0 ? 1.0 : std::pow(std::max(mean[c], floor), alpha);
        smax = std::max(smax, sc[c]);
        smin = std::min(smin, sc[c]);
      }
      const double norm = std::sqrt(smax * smin);
      for (double& v : sc) v /= norm;
      double total = 0;
      for (const Member& m : grp.members) {
        if (m.bits >= 16) continue;
        const Matrix& wm = w.at(m.weight);
        const int qm = static_cast<int>(numerics::quant_max(m.bits));
        // At most kSearchRows evenly spaced rows: α is one number per group.
        const int64_t nr = std::min(wm.rows, kSearchRows);
        const int64_t chunks = (nr + kRowChunk - 1) / kRowChunk;
        std::vector<double> chunk_err(static_cast<size_t>(chunks), 0.0);
        parallel_for(chunks, threads_, [&](int64_t ci) {
          const int64_t k0 = ci * kRowChunk, k1 = std::min(nr, k0 + kRowChunk);
          std::vector<double> D(static_cast<size_t>((k1 - k0) * in)), ws(static_cast<size_t>(in));
          std::vector<double> e(static_cast<size_t>(k1 - k0));
          for (int64_t k = k0; k < k1; ++k) {
            const int64_t r = nr == wm.rows ? k : (k * wm.rows) / nr;
            for (int64_t c = 0; c < in; ++c) ws[c] = wm.at(r, c) * sc[c];
            const double q = rtn_scale(ws.data(), in, m.bits);
            double* d = D.data() + (k - k0) * in;
            for (int64_t c = 0; c < in; ++c) d[c] = wm.at(r, c) - q * code_of(ws[c], q, qm) / sc[c];
          }
          err.errors(D.data(), k1 - k0, e.data());
          double sum = 0;
          for (double v : e) sum += v;
          chunk_err[ci] = sum;
        });
        for (double v : chunk_err) total += v;
      }
      if (total < best_err) {
        best_err = total;
        best = sc;
        *best_alpha = alpha;
      }
    }
    if (*best_alpha == 0) std::fill(best.begin(), best.end(), 1.0);
    return best;
  }

  /// W ← W·diag(s) for the group's linears, 1/s into the producer.
  static void fold(const ir::Graph& g, const Group& grp, const std::vector<double>& sc,
                   std::map<std::string, Matrix>& w) {
    for (const Member& m : grp.members) {
      Matrix& wm = w.at(m.weight);
      for (int64_t r = 0; r < wm.rows; ++r) {
        for (int64_t c = 0; c < wm.cols; ++c) wm.at(r, c) *= sc[c];
      }
    }
    if (grp.kind == Group::kNorm) {
      Matrix& gain = w.at(grp.gain);
      const double u = grp.unit_offset;
      for (size_t c = 0; c < sc.size(); ++c) gain.v[c] = (gain.v[c] + u) / sc[c] - u;
      return;
    }
    // Producer rows: for v, one per KV channel (the tied s of its group's first head).
    std::vector<double> prow;
    if (grp.kind == Group::kValue) {
      const int64_t gs = grp.heads / grp.kv_heads, d = grp.head_dim;
      for (int64_t kv = 0; kv < grp.kv_heads; ++kv) {
        for (int64_t c = 0; c < d; ++c) prow.push_back(sc[(kv * gs) * d + c]);
      }
    } else {
      prow = sc;
    }
    for (size_t i = 1; i < g.node(grp.producer).operands.size(); ++i) {
      Matrix& m = w.at(weight_operand(g, grp.producer, i));
      const bool bias = i == 2;
      for (size_t j = 0; j < prow.size(); ++j) {
        const int64_t row = grp.row_offset + static_cast<int64_t>(j);
        if (bias) {
          m.at(0, row) /= prow[j];
        } else {
          for (int64_t c = 0; c < m.cols; ++c) m.at(row, c) /= prow[j];
        }
      }
    }
  }

  /// Per-row clip search of `wm` (already folded, fp32 values) whose input is X·diag(inv).
  FixedWeights clip(const OutputError& err, const Matrix& wm, const std::vector<double>& inv,
                    int bits) const {
    FixedWeights f;
    f.bits = bits;
    f.codes.assign(static_cast<size_t>(wm.rows * wm.cols), 0);
    f.scales.assign(static_cast<size_t>(wm.rows), 0.0f);
    const int qm = static_cast<int>(numerics::quant_max(bits));
    const int64_t in = wm.cols;
    const int64_t chunks = (wm.rows + kRowChunk - 1) / kRowChunk;
    parallel_for(chunks, threads_, [&](int64_t ci) {
      const int64_t r0 = ci * kRowChunk, r1 = std::min(wm.rows, r0 + kRowChunk), nr = r1 - r0;
      std::vector<double> D(static_cast<size_t>(nr * in)), e(static_cast<size_t>(nr));
      std::vector<double> extreme(static_cast<size_t>(nr)),
          best_err(static_cast<size_t>(nr), INFINITY);
      for (int64_t r = r0; r < r1; ++r) {
        extreme[r - r0] = extreme_weight(wm.v.data() + r * in, in);
        f.scales[r] = extreme_scale(extreme[r - r0], 1.0, bits, ScaleEnd::kQmax);
      }
      // Candidates in the order of the search: r = 1, 0.95, ..., each on ±qmax then the long end.
      for (int i = 0; i <= kClipSteps; ++i) {
        for (ScaleEnd end : {ScaleEnd::kQmax, ScaleEnd::kLongEnd}) {
          std::vector<float> q(static_cast<size_t>(nr));
          for (int64_t r = r0; r < r1; ++r) {
            q[r - r0] = extreme_scale(extreme[r - r0], 1.0 - 0.05 * i, bits, end);
            double* d = D.data() + (r - r0) * in;
            if (extreme[r - r0] == 0) {
              std::fill(d, d + in, 0.0);
            } else {
              weighted_row_error(wm.v.data() + r * in, static_cast<double>(q[r - r0]), qm,
                                 inv.data(), in, d);
            }
          }
          err.errors(D.data(), nr, e.data());
          for (int64_t r = r0; r < r1; ++r) {
            if (extreme[r - r0] != 0 && e[r - r0] < best_err[r - r0]) {
              best_err[r - r0] = e[r - r0];
              f.scales[r] = q[r - r0];
            }
          }
        }
      }
      for (int64_t r = r0; r < r1; ++r) {
        for (int64_t c = 0; c < in; ++c)
          f.codes[r * in + c] = static_cast<int8_t>(code_of(wm.at(r, c), f.scales[r], qm));
      }
    });
    return f;
  }

  config::SearchWeightScaleConfig config_;
  int threads_ = 1;
};

}  // namespace

std::unique_ptr<Pass> make_search_weight_scale(const config::SearchWeightScaleConfig& config) {
  return std::make_unique<SearchWeightScale>(config);
}

}  // namespace qbc::quant
