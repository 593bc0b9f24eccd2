// phaseImages: the second weight images of bit.prefill / bit.decode (docs/quantization.md
// "Precision per phase"). For every linear quantize_rtn will give one (quant::second_image:
// the decoder-block linears whose main image has another width), the round-to-nearest
// integers of its float weight at the phase's width, group and zero points, into
// ctx.second_images_chosen. It runs after the equivalence transforms and searchWeightScale
// (whose folds are exact: the float model is the final one) and before hessianQuant, which
// replaces each float weight by its dequantized integers: rounded later, the second image
// would be a re-quantization of the main one (measured: an 8-bit prefill image of a
// GPTQ-quantized 4-bit model then scored like the 4-bit one).
//   %y = linear(%x, @W)  ==>  second_images_chosen["y"] = RTN(W; bits, group, zero points)
#include "qbc/quant/quantize.h"
#include "qbc/quant/weight_passes.h"
#include "qbc/support/logging.h"

namespace qbc::quant {
namespace {

class PhaseImages final : public Pass {
 public:
  std::string name() const override { return "phaseImages"; }

  StatusOr<bool> run(PassContext& ctx) override {
    const ir::Graph& g = *ctx.graph;
    const config::CompileOptions& o = *ctx.options;
    std::vector<float> w;
    int made = 0;
    for (const ir::Node& n : g.nodes()) {
      if (n.op != ir::Op::kLinear) continue;
      const ir::Weight* wt = g.find_weight(n.operands[1].weight);
      if (wt == nullptr || wt->type.rank() != 2)
        return internal_error(ir::describe(n), ": no [out, in] weight");
      const int64_t rows = wt->type.dims[0], cols = wt->type.dims[1];
      const LinearBits bits = linear_bits(n.name, n.part == ir::Part::kHead, o);
      const std::optional<SecondImage> s = second_image(n, bits.weight, cols, o);
      if (!s) continue;
      QBC_RETURN_IF_ERROR(ctx.weights->reader()(*wt, &w).with_context(ir::describe(n)));
      StatusOr<FixedWeights> f = round_second_image(w, rows, cols, *s, o);
      if (!f.ok())
        return f.status().with_context(ir::describe(n), ", its ", ir::image_phase_name(s->phase),
                                       " image");
      ctx.second_images_chosen[n.name] = std::move(f).value();
      ++made;
    }
    log("quant").info("phaseImages: {} second weight images rounded", made);
    return made > 0;
  }
};

}  // namespace

std::unique_ptr<Pass> make_phase_images() { return std::make_unique<PhaseImages>(); }

}  // namespace qbc::quant
