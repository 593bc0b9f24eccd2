// The Ref and Expr fields of every op (see op_fields.h).
#include "op_fields.h"

namespace qbc::isa {
namespace {

struct RefLister {
  std::vector<RefField> out;
  void add(const char* name, const Ref& r, bool required) { out.push_back({name, &r, required}); }

  void operator()(const Loop&) {}
  void operator()(const Barrier&) {}
  void operator()(const Dma& d) {
    add("dst", d.dst, true);
    add("src", d.src, true);
  }
  void operator()(const Quantize& q) {
    add("x", q.x, true);
    add("codes", q.codes, true);
    add("scale", q.scale, true);
    add("zero", q.zero, false);
  }
  void operator()(const MatMul& m) {
    add("x", m.x, true);
    add("xzero", m.xzero, false);
    add("w", m.w, true);
    add("wzero", m.wzero, false);
    add("acc", m.acc, true);
  }
  void operator()(const Requant& r) {
    add("acc", r.acc, true);
    add("xscale", r.xscale, true);
    add("wscale", r.wscale, true);
    add("fsum", r.fsum, !r.first || !r.last);
    add("bias", r.bias, false);
    add("y", r.y, r.last);
  }
  void operator()(const RmsNorm& n) {
    add("x", n.x, true);
    add("weight", n.weight, true);
    add("y", n.y, true);
  }
  void operator()(const Rope& r) {
    add("x", r.x, true);
    add("y", r.y, true);
  }
  void operator()(const Eltwise& e) {
    add("a", e.a, true);
    add("b", e.b, e.op == EltOp::kAdd || e.op == EltOp::kSilu || e.op == EltOp::kGelu);
    add("y", e.y, true);
  }
  void operator()(const KvQuant& k) {
    add("k", k.k, true);
    add("v", k.v, true);
    add("kcodes", k.kcodes, true);
    add("vcodes", k.vcodes, true);
    add("params", k.params, true);
  }
  void operator()(const QueryPrep& q) {
    add("q", q.q, true);
    add("params", q.params, true);
    add("qcodes", q.qcodes, true);
    add("mq", q.mq, true);
  }
  void operator()(const QkScores& s) {
    add("qcodes", s.qcodes, true);
    add("mq", s.mq, true);
    add("q", s.q, false);
    add("kcodes", s.kcodes, true);
    add("params", s.params, true);
    add("scores", s.scores, true);
    add("rowmax", s.rowmax, s.max_mode != MaxMode::kNone);
  }
  void operator()(const ExpAccum& e) {
    add("scores", e.scores, true);
    add("rowmax", e.rowmax, true);
    add("vcodes", e.vcodes, true);
    add("esum", e.esum, true);
    add("acc", e.acc, true);
  }
  void operator()(const Merge& m) {
    add("parts", m.parts, true);
    add("out", m.out, true);
  }
  void operator()(const AttnOut& o) {
    add("acc", o.acc, true);
    add("esum", o.esum, true);
    add("params", o.params, true);
    add("y", o.y, true);
  }
  void operator()(const Fill& f) { add("y", f.y, true); }
};

struct ExprLister {
  std::vector<ExprField> out;
  void add(const char* name, const Expr& e) { out.push_back({name, &e}); }

  void operator()(const Loop& l) { add("trip", l.trip); }
  void operator()(const Barrier&) {}
  void operator()(const Dma& d) {
    add("rows", d.rows);
    add("ring_row0", d.ring_row0);
  }
  void operator()(const Quantize& q) { add("rows", q.rows); }
  void operator()(const MatMul& m) { add("rows", m.rows); }
  void operator()(const Requant& r) { add("rows", r.rows); }
  void operator()(const RmsNorm& n) { add("rows", n.rows); }
  void operator()(const Rope& r) {
    add("rows", r.rows);
    add("pos0", r.pos0);
    add("freq_pos", r.freq_pos);
  }
  void operator()(const Eltwise& e) { add("rows", e.rows); }
  void operator()(const KvQuant& k) {
    add("rows", k.rows);
    add("pos0", k.pos0);
  }
  void operator()(const QueryPrep& q) { add("rows", q.rows); }
  void operator()(const QkScores& s) {
    add("rows", s.rows);
    add("qpos0", s.qpos0);
    add("kpos0", s.kpos0);
  }
  void operator()(const ExpAccum& e) { add("rows", e.rows); }
  void operator()(const Merge&) {}
  void operator()(const AttnOut& o) { add("rows", o.rows); }
  void operator()(const Fill& f) { add("count", f.count); }
};

}  // namespace

std::vector<RefField> op_refs(const Op& op) {
  RefLister l;
  std::visit(l, op);
  return std::move(l.out);
}

std::vector<ExprField> op_exprs(const Op& op) {
  ExprLister l;
  std::visit(l, op);
  return std::move(l.out);
}

}  // namespace qbc::isa
