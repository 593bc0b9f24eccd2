// The text form read back (qbc/isa/text_parser.h): every op with every optional field set,
// expressions of every operator, the tables and the notes print, parse and print to the same
// text; malformed text is refused with the line, the column and the token. The round trip
// over the backend's programs of real models is tests/unit/npu/program_text_test.cpp.
#include "qbc/isa/text_parser.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "isa_bundles.h"
#include "qbc/isa/text.h"
#include "test_support.h"

namespace qbc::isa {
namespace {

using namespace qbc::isa::testing;  // NOLINT(build/namespaces)
using qbc::testing::contains;

const Queue ld = Queue::kLoad, cmp = Queue::kCompute, st = Queue::kStore;

/// Every op of the instruction set, each with its optional fields away from their defaults,
/// inside two nested loops whose variables the expressions read.
std::vector<Instr> every_op(int32_t d, int32_t s) {
  const Expr i0 = Expr::loop(0), i1 = Expr::loop(1);
  const Expr start = Expr::sym(Sym::kStart), slot = Expr::sym(Sym::kSlot);
  std::vector<Instr> code;
  code.push_back(ins(Loop{0, seq().ceildiv(16), 18}, cmp));
  code.push_back(ins(Loop{1, Expr(4), 16}, cmp));
  Dma ring = dma(d, slot * 64 + (start + i0).mod(64) * 8, s, i1 * 16, Expr(2), 8, 16);
  ring.ring_rows = 64;
  ring.ring_stride = 8;
  ring.ring_row0 = start - (i0 - i1);
  ring.src_stride = 32;
  code.push_back(ins(ring, st, tok(Channel::kComputeToStore), 0, 0, 0));
  code.push_back(ins(Barrier{3, 2}, cmp));
  Quantize q{Ref{s, 0},
             Ref{s, 64},
             Ref{s, 128},
             Ref{s, 192},
             seq().min(16) - i0 * 16,
             64,
             16,
             QuantMode::kStaticAffine,
             0.125f,
             -3};
  code.push_back(ins(q, cmp, 0, tok(Channel::kComputeToLoad) | tok(Channel::kComputeToStore), 1));
  MatMul m{Ref{s, 0}, Ref{s, 8}, Ref{s, 16}, Ref{s, 24},  Ref{s, 32}, Expr(3),     16,
           64,        96,        32,         DType::kI16, DType::kI4, DType::kI64, true};
  code.push_back(ins(m, cmp, 0, 0, 1, 1));
  Requant r{Ref{s, 0}, Ref{s, 8}, Ref{s, 16}, Ref{s, 24},  Ref{s, 32},  Ref{}, Expr(2), 16,
            2,         4,         0,          DType::kI64, DType::kF32, false, false};
  code.push_back(ins(r, cmp));
  code.push_back(ins(RmsNorm{Ref{s, 0}, Ref{d, 0}, Ref{s, 4}, Expr(1), 64, 16, 1e-6, 1.0}, cmp));
  code.push_back(ins(LayerNorm{Ref{s, 0}, Ref{d, 0}, Ref{s, 4}, seq(), 64, 1e-5}, cmp));
  code.push_back(ins(Rope{Ref{s, 0}, Ref{s, 0}, seq(), start, start + seq() - 1, 0}, cmp));
  code.push_back(ins(
      Eltwise{EltOp::kSoftcap, Ref{s, 0}, Ref{}, Ref{s, 2}, Expr(1), 32, 30.0f, DType::kF32}, cmp));
  code.push_back(
      ins(Eltwise{EltOp::kSilu, Ref{s, 0}, Ref{s, 1}, Ref{s, 2}, Expr(1), 32, 0.5f}, cmp));
  code.push_back(
      ins(KvQuant{Ref{s, 0}, Ref{s, 1}, Ref{s, 2}, Ref{s, 3}, Ref{s, 4}, seq(), start, 0}, cmp));
  code.push_back(ins(QueryPrep{Ref{s, 0}, Ref{s, 1}, Ref{s, 2}, Ref{s, 3}, Expr(1), 1, 0}, cmp));
  code.push_back(ins(QkScores{Ref{s, 0}, Ref{s, 1}, Ref{s, 2}, Ref{s, 3}, Ref{s, 4}, Ref{s, 5},
                              Ref{s, 6}, Expr(1), start, i0 * 32, 32, 1, MaxMode::kUpdate, 0},
                     cmp));
  code.push_back(ins(
      ExpAccum{Ref{s, 0}, Ref{s, 1}, Ref{s, 2}, Ref{s, 3}, Ref{s, 4}, Expr(1), 32, true, 0}, cmp));
  code.push_back(ins(Merge{MergeOp::kMax, Ref{s, 0}, Ref{s, 8}, 4, 2, 3}, cmp));
  code.push_back(ins(AttnOut{Ref{s, 0}, Ref{s, 1}, Ref{s, 2}, Ref{s, 3}, Expr(2), 1, 0}, cmp));
  code.push_back(
      ins(Fill{Ref{s, 0}, Expr(8), DType::kF32, -std::numeric_limits<double>::infinity()}, cmp, 0,
          0, -1, 0));
  code.push_back(ins(dma(d, 0, s, 0, Expr(1), 16, 0), ld));
  return code;
}

/// small_bundle() with two more buffers and, as mode 0, every_op() on core 0 of four.
Bundle every_op_bundle() {
  Bundle b = small_bundle();
  const int32_t d = add_buffer(b, "blk.0.k_cache", Space::kDram, -1, Purpose::kKv, DType::kI8, 4096,
                               8192, {64, 64});
  b.buffers[static_cast<size_t>(d)].slot_stride = 4096;
  const int32_t s =
      add_buffer(b, "L0.x", Space::kSram, 0, Purpose::kSram, DType::kF16, 0, 1024, {});
  b.attentions.push_back(AttnDesc{4, 2, 16, 8, 64, 0.25, 50.0, 4, 8, 16, true, true, 0});
  RopeDesc rope;
  rope.heads = 4;
  rope.head_dim = 16;
  rope.rotary_dim = 8;
  rope.inv_freq = {1.0, 0.1, 0.01, 0.001};
  rope.long_inv_freq = {0.5, 0.05, 0.005, 0.0005};
  rope.dynamic_factor = 2.0;
  rope.original_max_positions = 32;
  b.ropes.push_back(rope);
  b.nodes.push_back("blk.0.attn");
  b.passes.push_back("npu-deps");
  b.dram = DramPlan{4352, 8192, 0, 0, 64, 1024};
  Mode m;
  m.scheme = Scheme::kGlobal4;
  m.cores_per_instance = 4;
  m.instances = 2;
  m.prefill.phase = Phase::kPrefill;
  m.prefill.max_seq = 16;
  m.prefill.cores.push_back({0, every_op(d, s)});
  m.prefill.cores.push_back({1, {ins(Barrier{0, 4}, cmp)}});
  m.decode.cores.push_back({0, small_code()});
  b.modes.insert(b.modes.begin(), m);
  return b;
}

TEST(TextParser, EveryOpPrintsParsesAndPrintsTheSame) {
  const std::string text = print_bundle(every_op_bundle());
  for (const char* op :
       {"loop", "dma", "barrier", "quantize", "matmul", "requant", "rms_norm", "rope", "eltwise",
        "kv_quant", "query_prep", "qk_scores", "exp_accum", "merge", "attn_out", "fill"}) {
    EXPECT_TRUE(contains(text, std::string(" ") + op + " ")) << "no " << op << " in\n" << text;
  }
  auto parsed = parse_bundle(text, "every.npu");
  QBC_ASSERT_OK(parsed);
  EXPECT_EQ(print_bundle(*parsed), text);
  // The fields themselves, not only their text.
  const std::vector<Instr>& code = parsed->modes[0].prefill.cores[0].code;
  const auto& q = std::get<Quantize>(code[4].op);
  EXPECT_EQ(q.static_zero, -3);
  EXPECT_EQ(q.static_scale, 0.125f);
  EXPECT_EQ(code[4].signal, tok(Channel::kComputeToLoad) | tok(Channel::kComputeToStore));
  EXPECT_EQ(parsed->nodes[static_cast<size_t>(code[4].node)], "blk.0.q_proj");
  EXPECT_EQ(std::get<MatMul>(code[5].op).ldx, 96);
  EXPECT_TRUE(std::isinf(std::get<Fill>(code[18].op).value));
  Env env;
  env.sym[static_cast<int>(Sym::kStart)] = 70;
  env.sym[static_cast<int>(Sym::kSlot)] = 1;
  env.loop = {3, 2};
  const Dma& ring = std::get<Dma>(code[2].op);
  EXPECT_EQ(ring.dst.offset.eval(env), 64 + (73 % 64) * 8);
  EXPECT_EQ(ring.ring_row0.eval(env), 70 - (3 - 2));
  EXPECT_EQ(parsed->buffers[13].slot_stride, 0);
  EXPECT_EQ(parsed->buffers[12].slot_stride, 4096);
  EXPECT_EQ(parsed->ropes[0].long_inv_freq, (std::vector<double>{0.5, 0.05, 0.005, 0.0005}));
  EXPECT_EQ(parsed->image_size(), 4352);
}

// The KV4 rules of an attention (docs/npu.md "KV4 cache records") print and parse; an
// attention without them prints none of their keys.
TEST(TextParser, Kv4AttentionFieldsRoundTrip) {
  Bundle b = every_op_bundle();
  AttnDesc a{4, 2, 16, 0, 64, 0.25, 0.0, 4, 4, 8, true, false, -1};
  a.k_token_scale = true;
  a.qk_hadamard = true;
  a.k_group = 4;
  a.k_asym = true;
  a.v_token_scale = true;
  b.attentions.push_back(a);
  const std::string text = print_bundle(b);
  EXPECT_TRUE(contains(text,
                       " k_token_scale=true qk_hadamard=true k_group=4 k_asym=true "
                       "v_token_scale=true\n"))
      << text;
  EXPECT_FALSE(contains(print_bundle(every_op_bundle()), "k_token_scale"));
  auto parsed = parse_bundle(text, "kv4.npu");
  QBC_ASSERT_OK(parsed);
  const AttnDesc& p = parsed->attentions.back();
  EXPECT_TRUE(p.k_token_scale && p.qk_hadamard && p.k_asym && p.v_token_scale);
  EXPECT_EQ(p.k_group, 4);
  EXPECT_FALSE(parsed->attentions.front().token_fields());
  EXPECT_EQ(p.key_record(), 8 + 4 * 2 + 4 * 2);  // 16 int4 codes, 4 groups of t and z
  EXPECT_EQ(p.value_record(), 8 + 1);
}

TEST(TextParser, BidirectionalAttentionRoundTrips) {
  Bundle b = every_op_bundle();
  ASSERT_FALSE(b.attentions.empty());
  EXPECT_FALSE(contains(print_bundle(b), "bidirectional"));  // printed only when set
  b.attentions[0].bidirectional = true;
  const std::string text = print_bundle(b);
  EXPECT_TRUE(contains(text, " k_rope=") && contains(text, " bidirectional=true\n")) << text;
  auto parsed = parse_bundle(text, "bidi.npu");
  QBC_ASSERT_OK(parsed);
  EXPECT_TRUE(parsed->attentions[0].bidirectional);
  EXPECT_EQ(print_bundle(*parsed), text);
}

TEST(TextParser, WithoutNotesAndTokens) {
  PrintOptions opts;
  opts.debug_info = false;
  opts.tokens = false;
  const std::string text = print_bundle(every_op_bundle(), opts);
  auto parsed = parse_bundle(text);
  QBC_ASSERT_OK(parsed);
  EXPECT_EQ(print_bundle(*parsed, opts), text);
  for (const Instr& in : parsed->modes[0].prefill.cores[0].code) {
    EXPECT_EQ(in.wait | in.signal, 0);
    EXPECT_EQ(in.node, -1);
  }
}

/// The text of every_op_bundle with the first `from` replaced by `to`.
std::string edited(const std::string& from, const std::string& to) {
  std::string text = print_bundle(every_op_bundle());
  const size_t at = text.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  return at == std::string::npos ? text : text.replace(at, from.size(), to);
}

/// The line of the text of every_op_bundle holding `needle` (1-based).
int line_of(const std::string& needle) {
  const std::string text = print_bundle(every_op_bundle());
  const size_t at = text.find(needle);
  return 1 + static_cast<int>(std::count(text.begin(), text.begin() + at, '\n'));
}

TEST(TextParser, MalformedTextNamesLineColumnAndToken) {
  struct Case {
    std::string from, to, want;
  };
  const int matmul = line_of(" matmul  ");
  const Case cases[] = {
      {" matmul  ", " matmull ", ":" + std::to_string(matmul) + ":"},
      {" matmul  ", " matmull ", "unknown instruction 'matmull' (found 'matmull')"},
      {"kt=64", "kt=6x4", "expected an integer (found '6x4"},
      {"kt=64", "kz=64", "unknown field 'kz' of matmul"},
      {"xtype=i16", "xtype=i17", "unknown xtype value (found 'i17')"},
      {"%L0.x[+8]", "%L9.x[+8]", "unknown buffer %L9.x"},
      {"bundle target=", "bundel target=", "every.npu:1:1: expected 'bundle'"},
      {"shape=[64, 64]", "shape=[64; 64]", "expected ','"},
      {"ceil(seq, 16)", "ceil(seq 16)", "expected ','"},
      {"signal=", "signal=c>q,", "unknown token channel 'c>q'"},
      {"prefill max_seq=16", "prefill max_seq=sixteen", "expected an integer (found 'sixteen')"},
      {"(20 instructions)", "(21 instructions)", "expected an integer (found 'core')"},
  };
  for (const Case& c : cases) {
    auto parsed = parse_bundle(edited(c.from, c.to), "every.npu");
    ASSERT_FALSE(parsed.ok()) << c.to;
    EXPECT_EQ(parsed.status().code(), Code::kInvalidArgument);
    EXPECT_TRUE(contains(parsed.status().message(), c.want))
        << c.to << ": " << parsed.status().message();
    EXPECT_TRUE(contains(parsed.status().message(), "every.npu:")) << parsed.status().message();
  }
}

TEST(TextParser, ErrorColumnPointsAtTheToken) {
  const std::string text = edited("kt=64", "kt=6x4");
  const int line = line_of(" matmul  ");
  const std::string bad = text.substr(0, text.find("kt=6x4"));
  const size_t col = bad.size() - bad.rfind('\n') - 1 + 3 + 1;  // after "kt=", 1-based
  auto parsed = parse_bundle(text, "f");
  ASSERT_FALSE(parsed.ok());
  EXPECT_TRUE(contains(parsed.status().message(),
                       "f:" + std::to_string(line) + ":" + std::to_string(col) + ": "))
      << parsed.status().message();
}

}  // namespace
}  // namespace qbc::isa
