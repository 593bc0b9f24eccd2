// Block-by-block execution (BlockRunner) and calibration: one decoder block's weights
// and activations in memory.
#include <algorithm>
#include <map>
#include <set>

#include "qbc/ir/host_inputs.h"
#include "qbc/numerics/fp16.h"
#include "qbc/quant/block_runner.h"
#include "qbc/quant/calib_checkpoint.h"
#include "qbc/quant/calibrate.h"
#include "qbc/support/cancel.h"
#include "qbc/support/hash.h"
#include "qbc/support/logging.h"

namespace qbc::quant {
namespace {

/// A run of consecutive nodes executed by one session.
struct SegmentPlan {
  std::vector<ir::ValueId> nodes;
  ir::ValueId input = -1;   ///< The one f32 value it reads from outside (the residual stream).
  ir::ValueId output = -1;  ///< The value later segments (or the graph output) read.
};

/// An input the host gives every call besides the residual stream, which every segment gets as
/// it is: the positions, an M-RoPE graph's rope tables (docs/multimodal.md), and Qwen3-VL's
/// DeepStack rows (the samples' own, BlockRunner::create's DeepStackSource, or zero).
bool host_input(const ir::Node& n) {
  return n.op == ir::Op::kInput && (n.type.dtype == ir::DType::kI64 || n.name == "rope_cos" ||
                                    n.name == "rope_sin" || ir::is_deepstack_input(n.name));
}

/// Cuts `g` at block boundaries. Block -1 nodes before the first block join block 0's
/// segment; those after the last block form the head segment.
StatusOr<std::vector<SegmentPlan>> segments_of(const ir::Graph& g) {
  const auto& nodes = g.nodes();
  int first_block = -1;
  for (const ir::Node& n : nodes) {
    if (n.block >= 0) {
      first_block = n.block;
      break;
    }
  }
  std::vector<int> key(nodes.size(), -1);
  std::map<int, size_t> index;  // segment key -> position
  std::vector<SegmentPlan> out;
  bool seen_block = false;
  int last = first_block;
  for (ir::ValueId id = 0; id < static_cast<ir::ValueId>(nodes.size()); ++id) {
    const ir::Node& n = nodes[static_cast<size_t>(id)];
    if (n.op == ir::Op::kInput) continue;
    int k = n.block;
    if (k >= 0) {
      seen_block = true;
      last = k;
    } else {
      k = seen_block ? last + 1
                     : first_block;  // prefix joins the first block; the rest is the head
    }
    if (k < last && n.block >= 0)
      return internal_error("node '", n.name, "' of block ", k, " follows block ", last);
    key[static_cast<size_t>(id)] = k;
    if (!index.count(k)) {
      index[k] = out.size();
      out.emplace_back();
    }
    out[index[k]].nodes.push_back(id);
  }
  // Each segment's outside input and its output for later segments.
  for (size_t s = 0; s < out.size(); ++s) {
    std::set<ir::ValueId> inside(out[s].nodes.begin(), out[s].nodes.end());
    std::set<ir::ValueId> outside;
    for (ir::ValueId id : out[s].nodes) {
      for (const ir::Operand& o : g.node(id).operands) {
        if (o.is_weight() || inside.count(o.value)) continue;
        if (host_input(g.node(o.value))) continue;  // positions, M-RoPE tables
        outside.insert(o.value);
      }
    }
    if (outside.size() != 1) {
      return unimplemented("block-wise calibration: segment starting at node '",
                           g.node(out[s].nodes[0]).name, "' reads ", outside.size(),
                           " values from earlier blocks (expected the residual stream)");
    }
    out[s].input = *outside.begin();
  }
  for (size_t s = 0; s + 1 < out.size(); ++s) out[s].output = out[s + 1].input;
  if (g.outputs().empty()) return invalid_argument("graph '", g.name(), "' has no output");
  out.back().output = g.outputs()[0];
  for (size_t s = 0; s + 1 < out.size(); ++s) {
    if (std::find(out[s].nodes.begin(), out[s].nodes.end(), out[s].output) == out[s].nodes.end()) {
      return unimplemented("block-wise calibration: segment ", s + 1, " reads '",
                           g.node(out[s].output).name, "', which segment ", s, " does not produce");
    }
  }
  return out;
}

/// The segment as a graph of its own: an f32 input named like the value it replaces,
/// the positions input (and an M-RoPE graph's rope tables, with the metadata that says how to
/// compute them), its nodes, their weights, one output.
StatusOr<ir::Graph> segment_graph(const ir::Graph& g, const SegmentPlan& seg, size_t index) {
  ir::Graph sub(g.name() + ".segment" + std::to_string(index));
  for (const auto& [k, v] : g.metadata)
    if (k.rfind("mrope.", 0) == 0) sub.metadata[k] = v;
  std::map<ir::ValueId, ir::ValueId> remap;
  ir::Node in;
  in.op = ir::Op::kInput;
  in.name = g.node(seg.input).name;
  in.type = g.node(seg.input).type;
  remap[seg.input] = sub.append(in);
  for (ir::ValueId id = 0; id < static_cast<ir::ValueId>(g.nodes().size()); ++id) {
    const ir::Node& n = g.node(id);
    if (n.op == ir::Op::kInput && n.type.dtype == ir::DType::kI64) remap[id] = sub.append(n);
  }
  std::set<ir::ValueId> read;
  for (ir::ValueId id : seg.nodes) {
    for (const ir::Operand& o : g.node(id).operands)
      if (!o.is_weight()) read.insert(o.value);
  }
  for (ir::ValueId id = 0; id < static_cast<ir::ValueId>(g.nodes().size()); ++id) {
    const ir::Node& n = g.node(id);
    if (host_input(n) && n.type.dtype != ir::DType::kI64 && read.count(id))
      remap[id] = sub.append(n);
  }
  for (ir::ValueId id : seg.nodes) {
    ir::Node n = g.node(id);
    for (ir::Operand& o : n.operands) {
      if (o.is_weight()) {
        const ir::Weight* w = g.find_weight(o.weight);
        if (w == nullptr)
          return invalid_argument("node '", n.name, "': unknown weight '", o.weight, "'");
        sub.add_weight(*w);
        continue;
      }
      auto it = remap.find(o.value);
      if (it == remap.end())
        return internal_error("node '", n.name, "': operand outside its segment");
      o.value = it->second;
    }
    remap[id] = sub.append(std::move(n));
  }
  sub.add_output(remap.at(seg.output));
  return sub;
}

/// The part of segment graph `seg` that computes the nodes named `needed`: their ancestors,
/// every input (the host feeds all of them whatever is read), the weights those nodes read,
/// and the last of them in graph order as the output. kNotFound names a missing node.
StatusOr<ir::Graph> prefix_graph(const ir::Graph& seg, const std::vector<std::string>& needed) {
  std::vector<bool> keep(seg.nodes().size(), false);
  std::vector<ir::ValueId> todo;
  ir::ValueId last = -1;
  for (const std::string& name : needed) {
    const ir::ValueId id = seg.find(name);
    if (id < 0) return not_found("segment '", seg.name(), "' has no node '", name, "'");
    todo.push_back(id);
    last = std::max(last, id);
  }
  if (last < 0) return invalid_argument("segment '", seg.name(), "': no node asked for");
  while (!todo.empty()) {
    const ir::ValueId id = todo.back();
    todo.pop_back();
    if (keep[static_cast<size_t>(id)]) continue;
    keep[static_cast<size_t>(id)] = true;
    for (const ir::Operand& o : seg.node(id).operands)
      if (!o.is_weight()) todo.push_back(o.value);
  }
  ir::Graph sub(seg.name() + ".prefix");
  sub.metadata = seg.metadata;
  std::map<ir::ValueId, ir::ValueId> remap;
  for (ir::ValueId id = 0; id < static_cast<ir::ValueId>(seg.nodes().size()); ++id) {
    ir::Node n = seg.node(id);
    if (!keep[static_cast<size_t>(id)] && n.op != ir::Op::kInput) continue;
    for (ir::Operand& o : n.operands) {
      if (o.is_weight()) {
        sub.add_weight(*seg.find_weight(o.weight));
        continue;
      }
      o.value = remap.at(o.value);  // ancestors come first: the segment is in graph order
    }
    remap[id] = sub.append(std::move(n));
  }
  sub.add_output(remap.at(last));
  return sub;
}

/// Where a cancelled run stopped: "calibration sample 3, segment 2".
std::string sample_where(size_t sample, size_t segment) {
  return "calibration sample " + std::to_string(sample) + ", segment " + std::to_string(segment);
}

}  // namespace

StatusOr<BlockRunner> BlockRunner::create(const ir::Graph& g, size_t n, const SampleSource& samples,
                                          const ref::SessionOptions& session,
                                          const DeepStackSource* deepstack) {
  if (n == 0) return invalid_argument("calibration: no samples");
  BlockRunner r;
  r.session_ = session;
  QBC_ASSIGN_OR_RETURN(std::vector<SegmentPlan> segs, segments_of(g));
  for (size_t s = 0; s < segs.size(); ++s) {
    QBC_ASSIGN_OR_RETURN(ir::Graph sub, segment_graph(g, segs[s], s));
    Segment seg{segs[s].nodes, segs[s].input, segs[s].output, {}};
    for (const ir::Node& node : sub.nodes())
      if (node.op == ir::Op::kInput && ir::is_deepstack_input(node.name))
        seg.deepstack_levels.push_back(ir::deepstack_level(node.name));
    r.graphs_.push_back(std::move(sub));
    r.segments_.push_back(std::move(seg));
  }
  int64_t levels = 0;
  for (const ir::Node& node : g.nodes()) {
    r.full_names_.push_back(node.name);
    if (node.op == ir::Op::kInput && ir::is_deepstack_input(node.name)) ++levels;
  }
  // DeepStackSource gives level J at index J: the inputs must be deepstack.0 .. deepstack.{L-1}.
  for (const Segment& seg : r.segments_)
    for (int64_t level : seg.deepstack_levels)
      if (level < 0 || level >= levels)
        return invalid_argument("graph '", g.name(), "': a DeepStack input of segment ",
                                &seg - r.segments_.data(),
                                " is not one of deepstack.0 .. deepstack.", levels - 1);
  r.stream_.resize(n);
  r.seqs_.assign(n, 0);
  for (size_t i = 0; i < n; ++i) {
    QBC_RETURN_IF_ERROR(cancel::check("loading calibration sample " + std::to_string(i)));
    QBC_RETURN_IF_ERROR(
        samples(i, &r.stream_[i], &r.seqs_[i]).with_context("calibration sample ", i));
  }
  if (deepstack == nullptr || levels == 0) return r;
  // Each sample's DeepStack rows, kept from its first to its last nonzero row (an image span).
  r.deepstack_.resize(n);
  std::string digests;
  for (size_t i = 0; i < n; ++i) {
    const int64_t seq = r.seqs_[i];
    if (seq <= 0 || r.stream_[i].size() % static_cast<size_t>(seq) != 0)
      return internal_error("calibration sample ", i, ": ", r.stream_[i].size(),
                            " values are not rows of ", seq, " tokens");
    const auto h = static_cast<int64_t>(r.stream_[i].size()) / seq;
    r.hidden_ = h;
    std::vector<std::vector<float>> rows;
    QBC_RETURN_IF_ERROR((*deepstack)(i, seq, &rows).with_context("calibration sample ", i));
    if (rows.empty()) continue;
    if (static_cast<int64_t>(rows.size()) != levels)
      return invalid_argument("calibration sample ", i, ": ", rows.size(),
                              " DeepStack levels for a graph that takes ", levels);
    for (size_t j = 0; j < rows.size(); ++j) {
      const std::vector<float>& v = rows[j];
      if (static_cast<int64_t>(v.size()) != seq * h)
        return invalid_argument("calibration sample ", i, ": ",
                                ir::deepstack_input_name(static_cast<int64_t>(j)), " has ",
                                v.size(), " values, not ", seq, " rows of ", h);
      int64_t first = seq, last = -1;
      for (int64_t t = 0; t < seq; ++t) {
        const auto* row = v.data() + t * h;
        if (std::any_of(row, row + h, [](float x) { return x != 0.0f; })) {
          first = std::min(first, t);
          last = t;
        }
      }
      HostRows kept;
      if (last >= first) {
        kept.first = first;
        kept.rows.reserve(static_cast<size_t>((last + 1 - first) * h));
        for (auto it = v.begin() + first * h; it != v.begin() + (last + 1) * h; ++it)
          kept.rows.push_back(numerics::fp16_bits(*it));
      }
      digests += std::to_string(i) + "." + std::to_string(j) + " " + std::to_string(kept.first) +
                 " " + xxh3_128_bytes(kept.rows.data(), kept.rows.size() * sizeof(uint16_t)) + "\n";
      r.deepstack_[i].push_back(std::move(kept));
    }
  }
  if (!digests.empty()) r.deepstack_digest_ = xxh3_128_bytes(digests.data(), digests.size());
  return r;
}

Status BlockRunner::feed_deepstack(size_t s, size_t i, ref::Session& session) const {
  const std::vector<int64_t>& levels = segments_[s].deepstack_levels;
  if (levels.empty() || i >= deepstack_.size() || deepstack_[i].empty()) return ok_status();
  const auto size = static_cast<size_t>(seqs_[i] * hidden_);
  std::vector<std::vector<float>> rows;
  for (int64_t level : levels) {
    if (level < 0 || static_cast<size_t>(level) >= deepstack_[i].size())
      return internal_error("segment ", s, " reads DeepStack level ", level, " of ",
                            deepstack_[i].size());
    const HostRows& k = deepstack_[i][static_cast<size_t>(level)];
    std::vector<float> full(size, 0.0f);
    std::transform(k.rows.begin(), k.rows.end(),
                   full.begin() + static_cast<std::ptrdiff_t>(k.first * hidden_),
                   numerics::fp16_from_bits);
    rows.push_back(std::move(full));
  }
  return session.set_deepstack(std::move(rows));
}

std::vector<std::string> BlockRunner::node_names(size_t s) const {
  std::vector<std::string> out;
  for (ir::ValueId id : segments_[s].nodes) out.push_back(full_names_[static_cast<size_t>(id)]);
  return out;
}

Status BlockRunner::run(size_t s, const ir::WeightReader& weights, const Visitor& visit,
                        bool keep_outputs) {
  if (s != current_)
    return internal_error("BlockRunner: segment ", s, " run while the stream is at ", current_);
  return run_graph(s, graphs_[s], weights, visit, keep_outputs && s + 1 < segments_.size());
}

Status BlockRunner::run_prefix(size_t s, const std::vector<std::string>& needed,
                               const ir::WeightReader& weights, const Visitor& visit) {
  if (s != current_)
    return internal_error("BlockRunner: segment ", s, " run while the stream is at ", current_);
  QBC_ASSIGN_OR_RETURN(const ir::Graph prefix, prefix_graph(graphs_[s], needed));
  return run_graph(s, prefix, weights, visit, false);
}

Status BlockRunner::run_graph(size_t s, const ir::Graph& graph, const ir::WeightReader& weights,
                              const Visitor& visit, bool keep) {
  QBC_ASSIGN_OR_RETURN(std::unique_ptr<ref::Session> session,
                       ref::Session::create(graph, weights, session_));
  session->set_keep_activations(true);
  std::vector<float> out;
  if (keep) {  // a run that keeps replaces what an earlier one kept
    kept_outputs_.clear();
    kept_segment_ = s;
  }
  for (size_t i = 0; i < stream_.size(); ++i) {
    QBC_RETURN_IF_ERROR(cancel::check(sample_where(i, s)));
    session->reset();
    QBC_RETURN_IF_ERROR(feed_deepstack(s, i, *session));
    QBC_RETURN_IF_ERROR(session->forward_embeds(stream_[i], seqs_[i], &out)
                            .with_context("calibration sample ", i, ", segment ", s));
    if (visit) QBC_RETURN_IF_ERROR(visit(i, *session));
    if (keep) {
      kept_outputs_.resize(stream_.size());
      kept_outputs_[i] = std::move(out);
      out = {};
    }
  }
  return ok_status();
}

Status BlockRunner::advance_from_last_run(size_t s) {
  if (s != current_)
    return internal_error("BlockRunner: segment ", s, " advanced while the stream is at ",
                          current_);
  if (s + 1 < segments_.size()) {
    if (kept_segment_ != s || kept_outputs_.size() != stream_.size()) {
      return internal_error("BlockRunner: segment ", s, " has no kept outputs to advance from");
    }
    stream_ = std::move(kept_outputs_);
    kept_outputs_.clear();
  }
  ++current_;
  return ok_status();
}

Status BlockRunner::advance(size_t s, const ir::WeightReader& weights) {
  if (s != current_)
    return internal_error("BlockRunner: segment ", s, " advanced while the stream is at ",
                          current_);
  kept_outputs_.clear();  // outputs kept by a run of this segment are not the next's
  if (s + 1 < segments_.size()) {
    QBC_ASSIGN_OR_RETURN(std::unique_ptr<ref::Session> session,
                         ref::Session::create(graphs_[s], weights, session_));
    std::vector<float> out;
    for (size_t i = 0; i < stream_.size(); ++i) {
      QBC_RETURN_IF_ERROR(cancel::check(sample_where(i, s)));
      session->reset();
      QBC_RETURN_IF_ERROR(feed_deepstack(s, i, *session));
      QBC_RETURN_IF_ERROR(session->forward_embeds(stream_[i], seqs_[i], &out)
                              .with_context("calibration sample ", i, ", segment ", s));
      stream_[i] = std::move(out);
      out = {};
    }
  }
  ++current_;
  return ok_status();
}

Status BlockRunner::resume_at(size_t s, std::vector<std::vector<float>> stream) {
  const bool all_done = s == segments_.size();  // no stream is needed then
  if (current_ != 0 || s > segments_.size() || (!all_done && stream.size() != stream_.size()))
    return internal_error("BlockRunner: cannot resume at segment ", s, " of ", segments_.size(),
                          " with ", stream.size(), " samples (at ", current_, ")");
  stream_ = all_done ? std::vector<std::vector<float>>(stream_.size()) : std::move(stream);
  current_ = s;
  return ok_status();
}

StatusOr<CalibStats> collect_stats_blockwise(const ir::Graph& g, const ir::WeightReader& weights,
                                             size_t n, const SampleSource& samples, int mode,
                                             const ref::SessionOptions& session_options,
                                             const CalibCheckpoint* checkpoint,
                                             const DeepStackSource* deepstack) {
  QBC_ASSIGN_OR_RETURN(BlockRunner runner,
                       BlockRunner::create(g, n, samples, session_options, deepstack));
  const std::vector<std::string> observed = observed_nodes(g);
  const std::map<std::string, RotaryPairing> pairings = rotated_key_inputs(g);
  CalibStats stats;
  const int passes = mode == 0 ? 1 : 2;
  const int64_t total = static_cast<int64_t>(runner.num_segments() * n) * passes;
  const bool checkpointed = checkpoint != nullptr && checkpoint->dir != nullptr;
  const std::string key = checkpointed ? calib_run_key(*checkpoint, runner.stream(), runner.seqs(),
                                                       runner.deepstack_digest())
                                       : "";
  size_t start = 0;
  if (checkpointed) {
    CalibProgress p = load_calib_progress(*checkpoint, key, runner.num_segments(), n);
    if (p.next > 0) {
      log("resume").warn("resuming: calibration blocks 1-{} of {} ({}) from {}", p.next,
                         runner.num_segments(), checkpoint->run, checkpoint->dir->path().string());
      QBC_RETURN_IF_ERROR(runner.resume_at(p.next, std::move(p.stream)));
      stats = std::move(p.stats);
      start = p.next;
    }
  }
  int64_t done = static_cast<int64_t>(start * n) * passes;
  std::vector<float> act;
  std::vector<int64_t> shape;
  std::set<std::string> seen;  // observed in an earlier segment (where they were computed)
  for (size_t s = 0; s < runner.num_segments(); ++s) {
    std::vector<std::string> here;
    const ir::Graph& sub = runner.segment(s);
    for (const std::string& name : observed) {
      const ir::ValueId id = sub.find(name);
      if (id < 0) continue;
      // A segment's input was computed by an earlier segment, except the embeddings, which a
      // block without a norm before attention (EXAONE 4) projects directly: observed here.
      if (sub.node(id).op == ir::Op::kInput && seen.count(name) != 0) continue;
      here.push_back(name);
      seen.insert(name);
    }
    if (s < start) continue;  // finished by an earlier run (its statistics are loaded)
    // Pass 0's outputs are the next segment's inputs: no second forward to advance.
    for (int pass = 0; pass < passes; ++pass) {
      QBC_RETURN_IF_ERROR(runner.run(
          s, weights,
          [&](size_t, ref::Session& session) -> Status {
            for (const std::string& name : here) {
              QBC_RETURN_IF_ERROR(session.activation(name, &act, &shape));
              TensorStats& st = stats[name];
              if (pass == 0) {
                auto p = pairings.find(name);
                observe_max(st, act, shape.empty() ? 1 : shape.back(),
                            p == pairings.end() ? nullptr : &p->second);
              } else {
                observe_histogram(st, act);
              }
            }
            events::progress("calib", ++done, total);
            return ok_status();
          },
          /*keep_outputs=*/pass == 0));
    }
    QBC_RETURN_IF_ERROR(runner.advance_from_last_run(s));
    if (checkpointed) {
      CalibStats block;
      for (const std::string& name : here) block[name] = stats[name];
      QBC_RETURN_IF_ERROR(
          save_calib_block(*checkpoint, key, s, runner.num_segments(), block, runner.stream()));
    }
  }
  return stats;
}

}  // namespace qbc::quant
