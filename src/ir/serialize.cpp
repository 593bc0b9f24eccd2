// MBLT protobuf form <-> ir::Graph.
#include "qbc/ir/serialize.h"

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>
#include <google/protobuf/stubs/logging.h>

#include <mutex>

#include "mblt.pb.h"
#include "qbc/ir/verifier.h"
#include "qbc/support/file_util.h"
#include "qbc/support/logging.h"
#include "qbc/support/quote.h"

namespace qbc::ir {
namespace {

mblt::DType to_pb(DType d) { return static_cast<mblt::DType>(static_cast<int>(d) + 1); }

StatusOr<DType> from_pb(mblt::DType d, const std::string& where) {
  const int v = static_cast<int>(d) - 1;
  if (v < 0 || v > static_cast<int>(DType::kU8)) return invalid_argument(where, ": unknown element type ", int(d));
  return static_cast<DType>(v);
}

void type_to_pb(const TensorType& t, mblt::TensorType* out) {
  out->set_dtype(to_pb(t.dtype));
  for (int64_t d : t.dims) out->add_dims(d);
}

StatusOr<TensorType> type_from_pb(const mblt::TensorType& t, const std::string& where) {
  TensorType out;
  QBC_ASSIGN_OR_RETURN(out.dtype, from_pb(t.dtype(), where));
  // Static dimensions multiply into element counts (weights, buffers): the product must fit.
  int64_t count = 1;
  for (int64_t d : t.dims()) {
    if (d < kDynamic) return invalid_argument(where, ": invalid dimension ", d);
    if (d > 0 && __builtin_mul_overflow(count, d, &count)) {
      return invalid_argument(where, ": dimensions overflow the element count at ", d);
    }
    out.dims.push_back(d);
  }
  return out;
}

void protobuf_log(google::protobuf::LogLevel level, const char* file, int line, const std::string& message) {
  log("protobuf").debug("libprotobuf {} {}:{}: {}", level >= google::protobuf::LOGLEVEL_ERROR ? "error" : "warning",
                        file != nullptr ? file : "?", line, message);
}

}  // namespace

void route_protobuf_logs() {
  static std::once_flag once;
  std::call_once(once, [] { google::protobuf::SetLogHandler(protobuf_log); });
}

std::string to_proto_bytes(const Graph& g) {
  mblt::Model m;
  m.set_format_version(kMbltFormatVersion);
  auto producer = g.metadata.find("producer");
  if (producer != g.metadata.end()) m.set_producer(producer->second);
  m.set_graph_name(g.name());
  for (const Node& n : g.nodes()) {
    mblt::Node* pn = m.add_nodes();
    pn->set_name(n.name);
    pn->set_op(std::string(op_info(n.op).name));
    for (const Operand& o : n.operands) {
      if (o.is_weight()) {
        pn->add_operands()->set_weight(o.weight);
      } else {
        pn->add_operands()->set_value(g.node(o.value).name);
      }
    }
    type_to_pb(n.type, pn->mutable_type());
    for (const auto& [name, v] : n.attrs.all()) {
      mblt::Attr* a = pn->add_attrs();
      a->set_name(name);
      switch (attr_kind(v)) {
        case AttrKind::kInt: a->set_i(std::get<int64_t>(v)); break;
        case AttrKind::kFloat: a->set_f(std::get<double>(v)); break;
        case AttrKind::kString: a->set_s(std::get<std::string>(v)); break;
        case AttrKind::kInts:
          for (int64_t x : std::get<std::vector<int64_t>>(v)) a->mutable_ints()->add_values(x);
          break;
        case AttrKind::kFloats:
          for (double x : std::get<std::vector<double>>(v)) a->mutable_floats()->add_values(x);
          break;
      }
    }
    pn->set_origin(n.origin);
    pn->set_block(n.block);
    pn->set_part(n.part == Part::kHead ? mblt::PART_HEAD : mblt::PART_BODY);
  }
  for (ValueId o : g.outputs()) m.add_outputs(g.node(o).name);
  for (const auto& [name, w] : g.weights()) {
    mblt::Weight* pw = m.add_weights();
    pw->set_name(name);
    type_to_pb(w.type, pw->mutable_type());
    pw->set_source(w.source == WeightSource::kModel ? mblt::WEIGHT_SOURCE_MODEL : mblt::WEIGHT_SOURCE_SIDECAR);
    pw->set_tensor(w.tensor);
    pw->set_role(w.role == WeightRole::kParameter ? mblt::WEIGHT_ROLE_PARAMETER
                                                  : mblt::WEIGHT_ROLE_HOST_EMBEDDING);
  }
  m.set_source_path(g.source_path);
  m.set_source_format(g.source_format);
  for (const SourceFile& f : g.files) {
    mblt::SourceFile* pf = m.add_files();
    pf->set_path(f.path);
    pf->set_size(f.size);
    pf->set_xxh3_128(f.xxh3_128);
  }
  for (const auto& [k, v] : g.metadata) {
    mblt::MetadataEntry* e = m.add_metadata();
    e->set_key(k);
    e->set_value(v);
  }
  std::string out;
  google::protobuf::io::StringOutputStream sos(&out);
  google::protobuf::io::CodedOutputStream cos(&sos);
  cos.SetSerializationDeterministic(true);
  m.SerializeToCodedStream(&cos);
  cos.Trim();
  return out;
}

StatusOr<Graph> from_proto_bytes(const std::string& bytes, const std::string& label) {
  route_protobuf_logs();
  mblt::Model m;
  if (!m.ParseFromString(bytes)) return data_loss(label, ": not an MBLT file (protobuf parse failed)");
  if (m.format_version() == 0 || m.format_version() > static_cast<uint32_t>(kMbltFormatVersion)) {
    return invalid_argument(label, ": MBLT format version ", m.format_version(), " is not supported (this qbc reads ",
                            kMbltFormatVersion, ")");
  }
  Graph g(m.graph_name());
  for (const mblt::Weight& pw : m.weights()) {
    Weight w;
    w.name = pw.name();
    const std::string where = label + ": weight " + quote_prefix("@" + w.name);
    QBC_ASSIGN_OR_RETURN(w.type, type_from_pb(pw.type(), where));
    w.source = pw.source() == mblt::WEIGHT_SOURCE_SIDECAR ? WeightSource::kSidecar : WeightSource::kModel;
    w.tensor = pw.tensor();
    w.role = pw.role() == mblt::WEIGHT_ROLE_HOST_EMBEDDING ? WeightRole::kHostEmbedding : WeightRole::kParameter;
    g.add_weight(std::move(w));
  }
  for (int i = 0; i < m.nodes_size(); ++i) {
    const mblt::Node& pn = m.nodes(i);
    Node n;
    n.name = pn.name();
    const std::string where =
        label + ": node " + quote_prefix(n.name) + " (#" + std::to_string(i) + ")";
    auto op = op_from_name(pn.op());
    if (!op) return invalid_argument(where, ": unknown op ", quote_prefix(pn.op()));
    n.op = *op;
    for (const mblt::Operand& po : pn.operands()) {
      if (po.ref_case() == mblt::Operand::kWeight) {
        n.operands.push_back(Operand::of_weight(po.weight()));
      } else {
        const ValueId v = g.find(po.value());
        if (v < 0) {
          return invalid_argument(where, ": operand ", quote_prefix(po.value()),
                                  " is not defined before its use");
        }
        n.operands.push_back(Operand::of(v));
      }
    }
    QBC_ASSIGN_OR_RETURN(n.type, type_from_pb(pn.type(), where));
    for (const mblt::Attr& a : pn.attrs()) {
      switch (a.value_case()) {
        case mblt::Attr::kI: n.attrs.set(a.name(), a.i()); break;
        case mblt::Attr::kF: n.attrs.set(a.name(), a.f()); break;
        case mblt::Attr::kS: n.attrs.set(a.name(), a.s()); break;
        case mblt::Attr::kInts:
          n.attrs.set(a.name(), std::vector<int64_t>(a.ints().values().begin(), a.ints().values().end()));
          break;
        case mblt::Attr::kFloats:
          n.attrs.set(a.name(), std::vector<double>(a.floats().values().begin(), a.floats().values().end()));
          break;
        default: return invalid_argument(where, ": attribute ", quote_prefix(a.name()), " has no value");
      }
    }
    n.origin = pn.origin();
    n.block = pn.block();
    n.part = pn.part() == mblt::PART_HEAD ? Part::kHead : Part::kBody;
    g.append(std::move(n));
  }
  for (const std::string& o : m.outputs()) {
    const ValueId v = g.find(o);
    if (v < 0) return invalid_argument(label, ": output ", quote_prefix(o), " is not a node");
    g.add_output(v);
  }
  g.source_path = m.source_path();
  g.source_format = m.source_format();
  for (const mblt::SourceFile& pf : m.files()) g.files.push_back(SourceFile{pf.path(), pf.size(), pf.xxh3_128()});
  for (const mblt::MetadataEntry& e : m.metadata()) g.metadata[e.key()] = e.value();
  QBC_RETURN_IF_ERROR(verify(g).with_context(label));
  return g;
}

Status save(const Graph& g, const std::string& path) {
  QBC_RETURN_IF_ERROR(verify(g).with_context("refusing to write invalid MBLT ", path));
  return write_file_atomic(path, to_proto_bytes(g));
}

StatusOr<Graph> load(const std::string& path) {
  QBC_ASSIGN_OR_RETURN(std::string bytes, read_text_file(path));
  return from_proto_bytes(bytes, path);
}

}  // namespace qbc::ir
