// The plan as text (see backend.h): what a --dump-after of plan-tiles, plan-memory,
// check-fit or fill-weights writes. One line per planned node (its tiles), per value (its
// DRAM place) and per DRAM buffer (region, offset, size, and for KV whether it grows with
// the cache), in node and buffer order.
#include <sstream>
#include <string>

#include "backend.h"

namespace qbc::npu {
namespace {

void print_tiles(const Context& cx, std::ostringstream& os) {
  os << "tiles\n";
  const auto& nodes = cx.g.nodes();
  for (size_t i = 0; i < nodes.size(); ++i) {
    const int id = static_cast<int>(i);
    if (auto it = cx.plan.lin.find(id); it != cx.plan.lin.end()) {
      const LinearInfo& li = it->second;
      os << "  " << nodes[i].name << " qlinear [" << li.n << " x " << li.k << "] w" << li.w_bits
         << " x" << li.in_bits << " group " << li.group << ": nt " << li.t.nt << " kt " << li.t.kt
         << " mt " << li.t.mt << " (" << li.ntiles << " x " << li.ktiles << " tiles)\n";
    } else if (auto at = cx.plan.attn.find(id); at != cx.plan.attn.end()) {
      const AttnInfo& ai = at->second;
      const isa::AttnDesc& d = cx.b.attentions[static_cast<size_t>(ai.desc)];
      os << "  " << nodes[i].name << " attention heads " << d.heads << "/" << d.kv_heads << " x "
         << d.head_dim << ": br " << ai.t.br << " bc " << ai.t.bc << ", append rows "
         << ai.append_mt << ", capacity " << d.capacity
         << (d.window > 0 ? " (ring of window + chunk)" : " (the cache)") << "\n";
    } else if (auto rt = cx.plan.rope_desc.find(id); rt != cx.plan.rope_desc.end()) {
      os << "  " << nodes[i].name << " rope: descriptor " << rt->second << "\n";
    }
  }
}

void print_places(const Context& cx, std::ostringstream& os) {
  os << "places\n";
  const auto& nodes = cx.g.nodes();
  for (size_t i = 0; i < cx.plan.loc.size() && i < nodes.size(); ++i) {
    const ValueLoc& v = cx.plan.loc[i];
    if (v.buf < 0) continue;
    os << "  %" << nodes[i].name << ": " << cx.b.buffers[static_cast<size_t>(v.buf)].name << " col "
       << v.col << " stride " << v.stride << " width " << v.width << " " << isa::dtype_name(v.type)
       << "\n";
  }
}

void print_buffers(const Context& cx, std::ostringstream& os) {
  os << "dram\n";
  for (const isa::Buffer& b : cx.b.buffers) {
    if (b.space != isa::Space::kDram) continue;
    os << "  " << b.name << ": " << isa::purpose_name(b.purpose) << " at " << b.offset << ", "
       << b.bytes << " bytes";
    if (b.slot_stride > 0) os << ", per slot (stride " << b.slot_stride << ")";
    if (b.purpose == isa::Purpose::kKv && b.shape.size() == 3)
      os << (b.shape[1] == cx.b.max_cache ? ", capacity the cache" : ", capacity a ring");
    os << "\n";
  }
}

}  // namespace

std::string plan_text(const Context& cx) {
  std::ostringstream os;
  os << "plan of graph '" << cx.g.name() << "' for target '" << cx.o.target.name << "': cache "
     << cx.o.max_cache << ", chunk " << cx.o.chunk << ", batch " << cx.o.batch << ", SRAM "
     << cx.plan.budget << " bytes per core\n";
  if ((cx.have & Context::kTiles) != 0) print_tiles(cx, os);
  if ((cx.have & Context::kMemory) != 0) {
    print_places(cx, os);
    print_buffers(cx, os);
    os << "regions: weights " << cx.b.dram.weights << ", kv " << cx.b.dram.kv << ", activations "
       << cx.b.dram.activations << ", scratch " << cx.b.dram.scratch << ", io " << cx.b.dram.io
       << ", reserve " << cx.b.dram.reserve << " bytes\n";
  }
  if ((cx.have & Context::kImage) != 0) {
    os << "image: " << cx.b.image.size() << " bytes, embedding " << cx.b.embed_rows << " rows"
       << (cx.b.image.empty() ? " (shapes only)" : "") << "\n";
  }
  return os.str();
}

}  // namespace qbc::npu
