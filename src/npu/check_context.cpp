// check-context (docs/npu.md "Passes", V9 and P10): the same graph compiled for twice the
// cache has the same plan but for the growing KV buffers (P10: tiles, stage SRAM, buffer
// sizes), the same SRAM allocations and the same instruction streams' lengths; only DRAM
// sizes and trip counts change. A check: it changes nothing, and a difference is a bug of the
// backend (an internal error).
#include <memory>
#include <string>
#include <vector>

#include "backend.h"
#include "passes.h"
#include "qbc/isa/text.h"

namespace qbc::npu {
namespace {

std::vector<const isa::Buffer*> sram_buffers(const isa::Bundle& x) {
  std::vector<const isa::Buffer*> v;
  for (const isa::Buffer& buf : x.buffers) {
    if (buf.space == isa::Space::kSram) v.push_back(&buf);
  }
  return v;
}

Status same_sram(const isa::Bundle& a, const isa::Bundle& c, const std::string& where) {
  const auto sa = sram_buffers(a), sc = sram_buffers(c);
  if (sa.size() != sc.size()) {
    return internal_error(where, sa.size(), " SRAM buffers vs ", sc.size());
  }
  for (size_t i = 0; i < sa.size(); ++i) {
    if (sa[i]->name != sc[i]->name || sa[i]->offset != sc[i]->offset ||
        sa[i]->bytes != sc[i]->bytes || sa[i]->core != sc[i]->core) {
      return internal_error(where, "SRAM buffer '", sa[i]->name, "' is ", sa[i]->bytes,
                            " bytes at ", sa[i]->offset, ", but '", sc[i]->name, "' ", sc[i]->bytes,
                            " bytes at ", sc[i]->offset);
    }
  }
  return ok_status();
}

Status same_lengths(const isa::Bundle& a, const isa::Bundle& c, const std::string& where) {
  for (size_t m = 0; m < a.modes.size(); ++m) {
    const std::vector<const isa::Program*> progs_a = a.modes[m].programs();
    const std::vector<const isa::Program*> progs_c = c.modes[m].programs();
    if (progs_a.size() != progs_c.size())
      return internal_error(where, isa::scheme_name(a.modes[m].scheme), ": ", progs_a.size(),
                            " programs vs ", progs_c.size());
    for (size_t ph = 0; ph < progs_a.size(); ++ph) {
      const isa::Program& pa = *progs_a[ph];
      const isa::Program& pc = *progs_c[ph];
      for (size_t k = 0; k < pa.cores.size(); ++k) {
        const std::vector<isa::Instr>& ca = pa.cores[k].code;
        const std::vector<isa::Instr>& cc = pc.cores[k].code;
        if (ca.size() == cc.size()) continue;
        size_t i = 0;
        while (i < ca.size() && i < cc.size() && ca[i].op.index() == cc[i].op.index() &&
               ca[i].node == cc[i].node)
          ++i;
        return internal_error(
            where, isa::scheme_name(a.modes[m].scheme), " ", isa::phase_name(pa.phase), " core ", k,
            " has ", ca.size(), " instructions vs ", cc.size(), "; first difference at #", i, ": ",
            i < ca.size() ? isa::print_instr(a, ca[i]) : std::string("(end)"), " vs ",
            i < cc.size() ? isa::print_instr(c, cc[i]) : std::string("(end)"));
      }
    }
  }
  return ok_status();
}

/// check-context: P10 and V9 by a second compile at twice the cache.
class CheckContext final : public pass::Pass<Context> {
 public:
  std::string name() const override { return "check-context"; }
  pass::ResourceSet needs() const override { return Context::kTokens; }
  StatusOr<bool> run(Context& cx) override {
    Options probe = cx.o;
    probe.max_cache = cx.o.max_cache * 2;
    QBC_ASSIGN_OR_RETURN(const Compiled longer, cx.probe(probe));
    const isa::Bundle& other = longer.bundle;
    if (Status s = verify_plan_context(cx.plan, longer.plan); !s.ok()) {
      return internal_error("cache ", cx.o.max_cache, " vs ", probe.max_cache, ": ", s.message());
    }
    const std::string where = "V9 (SRAM independent of the context): cache " +
                              std::to_string(cx.o.max_cache) + " vs " +
                              std::to_string(probe.max_cache) + ": ";
    QBC_RETURN_IF_ERROR(same_sram(cx.b, other, where));
    QBC_RETURN_IF_ERROR(same_lengths(cx.b, other, where));
    return false;  // a check: the bundle is unchanged
  }
};

}  // namespace

PassPtr make_check_context() { return std::make_unique<CheckContext>(); }

}  // namespace qbc::npu
