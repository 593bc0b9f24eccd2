// Codes kept, proven on the MXQ: a random model packed by the test packer (GPTQ v1 int4 groups
// of 32 with zero points, compressed-tensors int8 per channel) compiles in-process, and the
// weight image of the MXQ file, read back through the layout docs/npu.md gives for fill-weights
// (per channel tile: its K tiles' dense code blocks, int4 two per byte low nibble first, then
// the scale and zero-point blocks per K tile, then the bias block), holds exactly the packed
// codes, scales and zero points.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>

#include "compile_fixture.h"
#include "prequant_packer.h"
#include "qbc/frontend/random_model.h"
#include "qbc/mxq/model_file.h"
#include "qbc/numerics/fp16.h"

namespace qbc {
namespace {

namespace fs = std::filesystem;
using testing::TestPacked;
using testing::TestPackFormat;
using testing::TestPackScheme;

int64_t align_up(int64_t x, int64_t a) { return (x + a - 1) / a * a; }
int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// One linear's codes, scales and zero points as the MXQ's weight image holds them.
struct ImageLinear {
  std::vector<int32_t> codes;  // [n * k]
  std::vector<float> scales;   // [n * groups]
  std::vector<int32_t> zeros;  // [n * groups]
};

// Reads linear `node` ([n, k], `bits`, `group` inputs per scale or 0) back from the image.
ImageLinear read_linear(const isa::Bundle& b, const std::string& node, int64_t n, int64_t k,
                        int bits, int64_t group, bool zero) {
  ImageLinear out;
  const auto buf = std::find_if(b.buffers.begin(), b.buffers.end(),
                                [&](const isa::Buffer& x) { return x.name == node + ".w"; });
  EXPECT_NE(buf, b.buffers.end()) << node;
  if (buf == b.buffers.end()) return out;
  // The tile sizes: the widest matmul of this node in any program.
  int64_t nt = 0, kt = 0;
  bool compact = false;  // fp16 scales and packed 4-bit zero points (docs/numerics.md)
  for (const isa::Mode& m : b.modes) {
    for (const isa::Program* p : {&m.prefill, &m.decode}) {
      for (const isa::CoreProgram& c : p->cores) {
        for (const isa::Instr& in : c.code) {
          if (const auto* rq = std::get_if<isa::Requant>(&in.op);
              rq != nullptr && in.node >= 0 && b.nodes[static_cast<size_t>(in.node)] == node) {
            compact = b.buffers[static_cast<size_t>(rq->wscale.buffer)].dtype == isa::DType::kF16;
          }
          const auto* mm = std::get_if<isa::MatMul>(&in.op);
          if (mm == nullptr || in.node < 0 || b.nodes[static_cast<size_t>(in.node)] != node) {
            continue;
          }
          nt = std::max(nt, mm->n);
          kt = std::max(kt, mm->kt);
        }
      }
    }
  }
  EXPECT_GT(nt, 0) << node;
  if (nt == 0) return out;
  const int64_t A = b.dma_align;
  const int64_t ntiles = cdiv(n, nt), ktiles = cdiv(k, kt);
  const int64_t groups = group > 0 ? cdiv(k, group) : 1;
  const int64_t gt = group > 0 ? kt / group : 1;
  const int64_t w_bytes =
      align_up(nt * isa::dtype_bytes(bits == 4 ? isa::DType::kI4 : isa::DType::kI8, kt), A);
  const int64_t sblk = align_up(nt * gt * (compact ? 2 : 4), A);
  const int64_t zblk = align_up(compact ? (nt * gt + 1) / 2 : nt * gt * 4, A);
  const int64_t sblocks = group > 0 ? ktiles : 1;
  const uint8_t* img = b.image_data() + (buf->offset - b.image_base);
  out.codes.assign(static_cast<size_t>(n * k), 0);
  out.scales.assign(static_cast<size_t>(n * groups), 0.f);
  out.zeros.assign(static_cast<size_t>(n * groups), 0);
  int64_t at = 0;
  for (int64_t t = 0; t < ntiles; ++t) {
    for (int64_t kk = 0; kk < ktiles; ++kk, at += w_bytes) {
      const int64_t k0 = kk * kt, kn = std::min(kt, k - k0);
      const int64_t row = bits == 4 ? (kn + 1) / 2 : kn;
      for (int64_t j = 0; j < nt && t * nt + j < n; ++j) {
        for (int64_t i = 0; i < kn; ++i) {
          int32_t q;
          if (bits == 8) {
            q = static_cast<int8_t>(img[at + j * row + i]);
          } else {
            const uint8_t byte = img[at + j * row + i / 2];
            const int32_t nib = i % 2 == 0 ? byte & 0xF : byte >> 4;
            q = nib >= 8 ? nib - 16 : nib;
          }
          out.codes[static_cast<size_t>((t * nt + j) * k + k0 + i)] = q;
        }
      }
    }
    for (int64_t s = 0; s < sblocks; ++s) {
      const int64_t gtk = group > 0 ? cdiv(std::min(kt, k - s * kt), group) : 1;
      for (int64_t j = 0; j < nt && t * nt + j < n; ++j) {
        for (int64_t g = 0; g < gtk; ++g) {
          const size_t dst = static_cast<size_t>((t * nt + j) * groups + s * gt + g);
          const int64_t e = j * gtk + g;
          if (compact) {
            uint16_t h;
            std::memcpy(&h, img + at + 2 * e, 2);
            out.scales[dst] = numerics::fp16_from_bits(h);
            if (zero) {
              const uint8_t byte = img[at + sblk + e / 2];
              const int32_t nib = e % 2 == 0 ? byte & 0xF : byte >> 4;
              out.zeros[dst] = nib >= 8 ? nib - 16 : nib;
            }
          } else {
            std::memcpy(&out.scales[dst], img + at + 4 * e, 4);
            if (zero) std::memcpy(&out.zeros[dst], img + at + sblk + 4 * e, 4);
          }
        }
      }
      at += zero ? sblk + zblk : sblk;
    }
    at += align_up(nt * 4, A);  // the bias block
  }
  return out;
}

void check_codes_in_mxq(const std::string& name, const TestPackScheme& scheme) {
  const frontend::RandomModelOptions o =
      testing::small_llama_options(testing::temp_dir() / name, 3, 128);
  QBC_ASSERT_OK(frontend::write_random_model(o));
  const std::map<std::string, TestPacked> truth =
      testing::test_pack_model(o.output_dir, scheme, testing::test_quantization_config(scheme));
  ASSERT_EQ(truth.size(), 14u);
  const testing::CompiledMxq c = testing::compile_stories260k(name, {}, o.output_dir.string());
  ASSERT_TRUE(c.error.empty()) << c.error;
  auto m = mxq::load_model(c.path.string());
  ASSERT_TRUE(m.ok()) << m.status().message();
  EXPECT_NE(m->meta.weights_json().find("\"kept\":14"), std::string::npos)
      << m->meta.weights_json();
  const bool ct = testing::test_pack_is_ct(scheme.format);
  const int32_t shift = ct ? 0 : 1 << (scheme.bits - 1);
  const int stored_bits = scheme.bits <= 4 ? 4 : 8;
  for (const auto& [module, t] : truth) {
    SCOPED_TRACE(module);
    const ImageLinear got = read_linear(*m->bundle, testing::linear_node_of(module), t.out, t.in,
                                        stored_bits, scheme.group, !scheme.symmetric);
    std::vector<int32_t> codes = t.codes, zeros = t.zeros;
    for (int32_t& q : codes) q -= shift;
    for (int32_t& z : zeros) z -= shift;
    EXPECT_EQ(got.codes, codes);
    EXPECT_EQ(got.scales, t.scales);
    if (!scheme.symmetric) {
      EXPECT_EQ(got.zeros, zeros);
    }
  }
}

TEST(PrequantMxqTest, GptqInt4GroupsWithZeroPointsAreTheMxqsCodes) {
  check_codes_in_mxq("gptq_w4", {TestPackFormat::kGptqV1, 4, 32, false, false});
}

TEST(PrequantMxqTest, CompressedTensorsInt8PerChannelAreTheMxqsCodes) {
  check_codes_in_mxq("ct_w8", {TestPackFormat::kCtInt, 8, 0, true, false});
}

}  // namespace
}  // namespace qbc
