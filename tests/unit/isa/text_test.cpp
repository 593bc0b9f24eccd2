// The text form (docs/npu.md "Text form"): a golden bundle with nested loops, a ring DMA, tokens
// and the tables; every op prints every field; malformed bundles still print.
#include "qbc/isa/text.h"

#include <gtest/gtest.h>

#include "isa_bundles.h"
#include "test_support.h"

namespace qbc::isa {
namespace {

using namespace qbc::isa::testing;  // NOLINT(build/namespaces)
using qbc::testing::contains;

const Queue ld = Queue::kLoad, cmp = Queue::kCompute, st = Queue::kStore;

/// A bundle exercising the text form: two loops, one nested, a KV append through a ring,
/// multi-channel tokens, an attention and a rope table.
Bundle golden_bundle() {
  Bundle b = small_header();
  const Space D = Space::kDram, S = Space::kSram;
  const int32_t w =
      add_buffer(b, "blk.0.w", D, -1, Purpose::kWeights, DType::kI4, 0, 2048, {64, 64});
  const int32_t in = add_buffer(b, "in", D, -1, Purpose::kIo, DType::kF16, 2048, 2048, {16, 64});
  const int32_t kv =
      add_buffer(b, "blk.0.k_cache", D, -1, Purpose::kKv, DType::kI8, 4096, 4096, {64, 64});
  b.buffers[static_cast<size_t>(kv)].slot_stride = 4096;
  const int32_t x =
      add_buffer(b, "L0.x_codes", S, 0, Purpose::kSram, DType::kI8, 0, 1024, {16, 64});
  const int32_t wt =
      add_buffer(b, "L0.w", S, 0, Purpose::kSram, DType::kI4, 1024, 1024, {2, 16, 64});
  const int32_t acc =
      add_buffer(b, "L0.acc", S, 0, Purpose::kSram, DType::kI32, 2048, 4096, {16, 64});
  b.input = in;
  AttnDesc a;
  a.heads = 4;
  a.kv_heads = 2;
  a.head_dim = 16;
  a.capacity = 64;
  a.scale = 0.25;
  b.attentions.push_back(a);
  RopeDesc r;
  r.heads = 4;
  r.head_dim = 16;
  r.rotary_dim = 8;
  r.inv_freq = {1.0, 0.1, 0.01, 0.001};
  b.ropes.push_back(r);
  b.nodes = {"blk.0.attn.q_proj", "blk.0.attn.k_append"};
  b.passes = {"lower-projections", "npu-deps"};

  const Expr i0 = Expr::loop(0), i1 = Expr::loop(1);
  const uint8_t l2c = tok(Channel::kLoadToCompute), c2l = tok(Channel::kComputeToLoad);
  MatMul m;
  m.x = Ref{x, i1 * Expr(512)};
  m.w = Ref{wt, i0.mod(2) * Expr(512)};
  m.acc = Ref{acc, i0 * Expr(64)};
  m.rows = (seq() - i1 * Expr(8)).min(8);
  m.n = 16;
  m.kt = 64;
  m.ldx = 64;
  m.wtype = DType::kI4;
  m.accumulate = true;
  Dma append = dma(kv, 0, x, 0, seq(), 64, 64);
  append.ring_rows = 64;
  append.ring_stride = 64;
  append.ring_row0 = Expr::sym(Sym::kStart).mod(64);
  std::vector<Instr> code = {
      ins(dma(x, 0, in, 0, seq(), 64, 64), ld, 0, l2c),
      ins(Loop{0, 4, 4}, cmp),
      ins(dma(wt, i0.mod(2) * Expr(512), w, i0 * Expr(512), 16, 32, 32), ld, c2l, l2c, 0, 0),
      ins(Loop{1, seq().ceildiv(8), 1}, cmp),
      ins(m, cmp, l2c, 0, 0, 0),
      ins(Barrier{0, 1}, cmp, 0, c2l | tok(Channel::kComputeToStore), -1, 1),
      ins(append, st, tok(Channel::kComputeToStore), 0, 1),
  };
  Mode mode;
  mode.prefill.phase = Phase::kPrefill;
  mode.prefill.max_seq = 16;
  mode.prefill.cores = {CoreProgram{0, code}};
  mode.decode.phase = Phase::kDecode;
  mode.decode.cores = {CoreProgram{0, {code[0]}}};
  b.modes.push_back(mode);
  return b;
}

TEST(IsaText, GoldenBundle) {
  const std::string expected =
      R"(bundle target=test cores=2 sram_bytes=32768 dram_bytes=65536 dma_align=16
model hidden=64 vocab=64 max_cache=64 chunk=16 batch=1 embed_rows=0 input=%in output=-
image base=0 bytes=0
dram weights=0 kv=0 activations=0 scratch=0 io=0 reserve=0 total=0
debug nodes=2 passes=2

buffers (6)
  %blk.0.w       dram -      weights i4  offset=0    bytes=2048                  shape=[64, 64]
  %in            dram -      io      f16 offset=2048 bytes=2048                  shape=[16, 64]
  %blk.0.k_cache dram -      kv      i8  offset=4096 bytes=4096 slot_stride=4096 shape=[64, 64]
  %L0.x_codes    sram core=0 sram    i8  offset=0    bytes=1024                  shape=[16, 64]
  %L0.w          sram core=0 sram    i4  offset=1024 bytes=1024                  shape=[2, 16, 64]
  %L0.acc        sram core=0 sram    i32 offset=2048 bytes=4096                  shape=[16, 64]

attentions (1)
  #0 heads=4 kv_heads=2 head_dim=16 window=0 capacity=64 scale=0.25 softcap=0 k_bits=8 v_bits=8 p_bits=8 q_dynamic=false rotating=false k_rope=-1

ropes (1)
  #0 heads=4 head_dim=16 rotary_dim=8 theta=10000 attention_factor=1 dynamic_factor=0 original_max_positions=0 inv_freq=[1, 0.1, 0.01, 0.001] long_inv_freq=[]

mode 0 single cores_per_instance=1 instances=1
  prefill max_seq=16
    core 0 (7 instructions)
      0 ld   dma        dst=%L0.x_codes[+0] src=%in[+0] rows=seq row_bytes=64 dst_stride=64 src_stride=64   ; signal=ld>cmp
      1 -    loop       var=i0 trip=4 body=4
      2   ld   dma        dst=%L0.w[+ (i0 mod 2)*512] src=%blk.0.w[+ i0*512] rows=16 row_bytes=32 dst_stride=32 src_stride=32   ; blk.0.attn.q_proj  (lower-projections)  wait=cmp>ld signal=ld>cmp
      3   -    loop       var=i1 trip=ceil(seq, 8) body=1
      4     cmp  matmul     x=%L0.x_codes[+ i1*512] w=%L0.w[+ (i0 mod 2)*512] acc=%L0.acc[+ i0*64] rows=min(seq - i1*8, 8) n=16 kt=64 wtype=i4 accumulate=true   ; blk.0.attn.q_proj  (lower-projections)  wait=ld>cmp
      5   cmp  barrier    id=0 cores=1   ; (npu-deps)  signal=cmp>ld,cmp>st
      6 st   dma        dst=%blk.0.k_cache[+0] src=%L0.x_codes[+0] rows=seq row_bytes=64 dst_stride=64 src_stride=64 ring_rows=64 ring_stride=64 ring_row0=start mod 64   ; blk.0.attn.k_append  wait=cmp>st
  decode max_seq=1
    core 0 (1 instructions)
      0 ld   dma        dst=%L0.x_codes[+0] src=%in[+0] rows=seq row_bytes=64 dst_stride=64 src_stride=64   ; signal=ld>cmp
)";
  const Bundle b = golden_bundle();
  EXPECT_EQ(print_bundle(b), expected);
  // Stable: the same bundle prints the same text, and a program prints as in the bundle.
  EXPECT_EQ(print_bundle(b), print_bundle(golden_bundle()));
  const std::string prefill = print_program(b, b.modes[0].prefill);
  EXPECT_EQ(prefill.substr(0, 24), "prefill max_seq=16\n  cor");
  EXPECT_TRUE(contains(expected, "    core 0 (7 instructions)\n      0 ld   dma"));
}

TEST(IsaText, Options) {
  const Bundle b = golden_bundle();
  PrintOptions bare;
  bare.tables = false;
  bare.debug_info = false;
  bare.tokens = false;
  const std::string text = print_bundle(b, bare);
  EXPECT_EQ(text.rfind("mode 0 single", 0), 0u) << text;
  EXPECT_FALSE(contains(text, ";")) << text;
  PrintOptions tokens_only = bare;
  tokens_only.tokens = true;
  EXPECT_TRUE(
      contains(print_bundle(b, tokens_only), "barrier    id=0 cores=1   ; signal=cmp>ld,cmp>st"));
}

/// Checks that `in` prints as `mnemonic` with every one of `fields` ("name=").
void expect_fields(const Bundle& b, const Op& op, const std::string& mnemonic,
                   const std::vector<std::string>& fields) {
  Instr in;
  in.op = op;
  const std::string text = print_instr(b, in);
  EXPECT_EQ(text.rfind(mnemonic + " ", 0), 0u) << text;
  for (const std::string& f : fields) {
    EXPECT_TRUE(contains(" " + text, " " + f + "=")) << mnemonic << " lacks " << f << ": " << text;
  }
}

TEST(IsaText, EveryOpPrintsItsFields) {
  Bundle b = small_bundle();
  const Ref r{kAcc, Expr::loop(2) * Expr(16)};
  const Expr e = seq() - 1;
  {
    Loop l{2, e, 3};
    expect_fields(b, l, "loop", {"var", "trip", "body"});
  }
  {
    Dma d = dma(kX, 0, kIn, 16, e, 128, 256);
    d.src_stride = 512;
    d.ring_rows = 8;
    d.ring_stride = 128;
    d.ring_row0 = e;
    expect_fields(b, d, "dma",
                  {"dst", "src", "rows", "row_bytes", "dst_stride", "src_stride", "ring_rows",
                   "ring_stride", "ring_row0"});
  }
  expect_fields(b, Barrier{3, 2}, "barrier", {"id", "cores"});
  {
    Quantize q{r, r, r, r, e, 64, 16, QuantMode::kStaticAffine, 0.5f, 3};
    expect_fields(b, q, "quantize",
                  {"x", "codes", "scale", "zero", "rows", "k", "bits", "mode", "static_scale",
                   "static_zero"});
  }
  {
    MatMul m{r, r, r, r, r, e, 16, 64, 128, 32, DType::kI16, DType::kI4, DType::kI64, true};
    expect_fields(b, m, "matmul",
                  {"x", "xzero", "w", "wzero", "acc", "rows", "n", "kt", "ldx", "group", "xtype",
                   "wtype", "acctype", "accumulate"});
  }
  {
    Requant q{r, r, r, r, r, r, e, 16, 2, 4, 32, DType::kI64, DType::kF32, false, true};
    expect_fields(b, q, "requant",
                  {"acc", "xscale", "wscale", "fsum", "bias", "y", "rows", "n", "gt", "ws_stride",
                   "ldy", "acctype", "ytype", "first"});
    q.last = false;
    q.first = true;
    expect_fields(b, q, "requant", {"fsum", "last"});
  }
  {
    RmsNorm n{r, r, r, e, 64, 16, 1e-6, 1.0};
    expect_fields(b, n, "rms_norm",
                  {"x", "weight", "y", "rows", "width", "group", "eps", "unit_offset"});
  }
  {
    Rope p{r, r, e, e, e, 0};
    expect_fields(b, p, "rope", {"x", "y", "rows", "pos0", "freq_pos", "rope"});
  }
  {
    Eltwise el{EltOp::kGelu, r, r, r, e, 64, 2.0f, DType::kF32};
    expect_fields(b, el, "eltwise", {"op", "a", "b", "y", "rows", "width", "factor", "type"});
  }
  {
    KvQuant k{r, r, r, r, r, e, e, 0};
    expect_fields(b, k, "kv_quant",
                  {"k", "v", "kcodes", "vcodes", "params", "rows", "pos0", "attn"});
  }
  {
    QueryPrep q{r, r, r, r, e, 1, 0};
    expect_fields(b, q, "query_prep", {"q", "params", "qcodes", "mq", "rows", "kv_head", "attn"});
  }
  {
    QkScores s{r, r, r, r, r, r, r, e, e, e, 128, 1, MaxMode::kUpdate, 0};
    expect_fields(b, s, "qk_scores",
                  {"qcodes", "mq", "q", "kcodes", "params", "scores", "rowmax", "rows", "qpos0",
                   "kpos0", "bc", "kv_head", "max", "attn"});
  }
  {
    ExpAccum x{r, r, r, r, r, e, 128, true, 0};
    expect_fields(b, x, "exp_accum",
                  {"scores", "rowmax", "vcodes", "esum", "acc", "rows", "bc", "first", "attn"});
  }
  {
    Merge m{MergeOp::kMax, r, r, 4, 64, 128};
    expect_fields(b, m, "merge", {"op", "parts", "out", "parts_count", "count", "part_stride"});
  }
  {
    Fill fl{r, e, DType::kI64, -1.5};
    expect_fields(b, fl, "fill", {"y", "count", "type", "value"});
  }
  {
    AttnOut o{r, r, r, r, e, 1, 0};
    expect_fields(b, o, "attn_out", {"acc", "esum", "params", "y", "rows", "kv_head", "attn"});
  }
  EXPECT_EQ(print_instr(b, Instr{}), "loop       var=i0 trip=0 body=0");
}

TEST(IsaText, MalformedBundlesStillPrint) {
  Bundle b = small_bundle();
  std::vector<Instr>& code = b.modes[0].prefill.cores[0].code;
  std::get<MatMul>(code[4].op).w.buffer = 99;
  std::get<MatMul>(code[4].op).x.buffer = -1;
  code[4].node = 7;
  code.push_back(ins(Loop{0, 2, 9}, cmp));  // a body that leaves the stream
  const std::string text = print_bundle(b);
  EXPECT_TRUE(contains(text, "x=- xzero=%xz[+0] w=%#99[+0]")) << text;
  EXPECT_TRUE(contains(text, "; node#7  (test)")) << text;
  EXPECT_TRUE(contains(text, "7 -    loop       var=i0 trip=2 body=9")) << text;
}

}  // namespace
}  // namespace qbc::isa
