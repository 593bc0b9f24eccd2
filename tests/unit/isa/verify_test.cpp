// isa::verify (docs/npu.md "Verifier"): the small bundle verifies, and breaking one thing
// fails with exactly the invariant that protects it, the message naming where and what.
#include "qbc/isa/verify.h"

#include <gtest/gtest.h>

#include <functional>

#include "isa_bundles.h"
#include "test_support.h"

namespace qbc::isa {
namespace {

using namespace qbc::isa::testing;  // NOLINT(build/namespaces)
using qbc::testing::contains;

const Queue ld = Queue::kLoad, cmp = Queue::kCompute, st = Queue::kStore;

std::vector<Instr>& prefill(Bundle& b) { return b.modes[0].prefill.cores[0].code; }
std::vector<Instr>& decode(Bundle& b) { return b.modes[0].decode.cores[0].code; }

/// Breaks small_bundle() with `edit` (applied to both programs when `both`) and checks that
/// verify fails with `invariant` ("V3 (alignment): ") and a message holding every part.
void expect_broken(const std::function<void(Bundle&, std::vector<Instr>&)>& edit,
                   const std::string& invariant, const std::vector<std::string>& parts,
                   bool both = true) {
  Bundle b = small_bundle();
  edit(b, prefill(b));
  if (both) edit(b, decode(b));
  const Status st = verify(b);
  ASSERT_FALSE(st.ok()) << "expected " << invariant;
  EXPECT_EQ(st.message().rfind(invariant, 0), 0u) << st.message();
  const bool input =
      invariant[1] == '1' || invariant[1] == '2' || invariant[1] == '3' || invariant[1] == '8';
  EXPECT_EQ(st.code(), input ? Code::kInvalidArgument : Code::kFailedPrecondition);
  for (const std::string& p : parts) EXPECT_TRUE(contains(st.message(), p)) << st.message();
}

TEST(IsaVerify, SmallBundleVerifies) {
  const Bundle b = small_bundle();
  QBC_ASSERT_OK(verify(b));
  QBC_ASSERT_OK(verify_program(b, b.modes[0].prefill, 1));
  QBC_ASSERT_OK(verify_program(b, b.modes[0].decode, 4));
  const ProgramSize size = program_size(b.modes[0].prefill);
  EXPECT_EQ(size.instructions, 7);
  EXPECT_GE(size.bytes, 7 * static_cast<int64_t>(sizeof(Instr)));
}

// V1 ------------------------------------------------------------------------------------

TEST(IsaVerify, V1SramBufferOfAMissingCore) {
  expect_broken([](Bundle& b, auto&) { b.buffers[kX].core = 5; },
                "V1 (well-formed): ", {"buffer #4 'x'", "core 5", "[0, 2)"});
}

TEST(IsaVerify, V1DramToDramDma) {
  expect_broken([](Bundle&, auto& c) { std::get<Dma>(c[0].op).dst.buffer = kOut; },
                "V1 (well-formed): ",
                {"mode 0 (single) prefill core 0 #0 ld dma (node 'embed_in', pass 'test')",
                 "DRAM to DRAM", "%in to %out"});
}

TEST(IsaVerify, V1DmaOnTheComputeQueue) {
  expect_broken(
      [](Bundle&, auto& c) {
        c[0].queue = cmp;
        c[0].signal = 0;
      },
      "V1 (well-formed): ", {"#0 cmp dma", "runs on queue ld, not cmp"});
}

TEST(IsaVerify, V1DivisionByARuntimeValue) {
  expect_broken(
      [](Bundle&, auto& c) {
        std::get<Quantize>(c[3].op).rows = seq().floordiv(Expr::sym(Sym::kStart));
      },
      "V1 (well-formed): ",
      {"#3 cmp quantize", "rows seq/start", "divides by something other than a positive constant"});
  // A constant zero divisor is refused too (the runtime must never divide by zero).
  expect_broken([](Bundle&, auto& c) { std::get<Quantize>(c[3].op).rows = seq().mod(0); },
                "V1 (well-formed): ", {"rows seq mod 0"});
}

TEST(IsaVerify, V1LoopBodyLeavesTheStream) {
  expect_broken(
      [](Bundle&, auto& c) {
        c.insert(c.begin() + 5, ins(Loop{0, 2, 5}, cmp));
      },
      "V1 (well-formed): ", {"loop #5 has a body of 5 instructions", "stream of 8"});
}

TEST(IsaVerify, V1LoopVariableOutsideItsLoop) {
  expect_broken([](Bundle&, auto& c) { std::get<Quantize>(c[3].op).rows = Expr::loop(3); },
                "V1 (well-formed): ", {"#3 cmp quantize", "reads i3, which no enclosing loop"});
}

TEST(IsaVerify, V1ComputeReadsDram) {
  expect_broken([](Bundle&, auto& c) { std::get<MatMul>(c[4].op).w.buffer = kW; },
                "V1 (well-formed): ", {"#4 cmp matmul", "w %W is not in the SRAM"});
}

TEST(IsaVerify, V1DmaIntoAnotherCoresSram) {
  expect_broken(
      [](Bundle& b, auto& c) {
        if (b.buffers.size() == 12) {
          add_buffer(b, "other", Space::kSram, 1, Purpose::kSram, DType::kI8, 0, 256, {256});
        }
        std::get<Dma>(c[2].op).dst.buffer = 12;
      },
      "V1 (well-formed): ", {"#2 ld dma", "SRAM side other is on core 1", "core 0"});
}

TEST(IsaVerify, V1TokenOnTheWrongQueue) {
  expect_broken([](Bundle&, auto& c) { c[3].wait |= tok(Channel::kComputeToLoad); },
                "V1 (well-formed): ", {"#3 cmp quantize", "waits on cmp>ld but runs on queue cmp"});
}

TEST(IsaVerify, V1TableIndicesInRange) {
  expect_broken([](Bundle&, auto& c) { c[4].node = 9; },
                "V1 (well-formed): ", {"#4 cmp matmul", "node 9 is not in the node table of 3"});
  expect_broken(
      [](Bundle&, auto& c) {
        QueryPrep q;
        q.q = Ref{kX, 0};
        q.params = Ref{kXs, 0};
        q.qcodes = Ref{kAcc, 0};
        q.mq = Ref{kXz, 0};
        q.attn = 3;
        c.push_back(ins(q, cmp));
      },
      "V1 (well-formed): ", {"#7 cmp query_prep", "attention 3 is not in the table of 0"});
  expect_broken([](Bundle&, auto& c) { std::get<MatMul>(c[4].op).acc.buffer = 40; },
                "V1 (well-formed): ", {"acc names buffer #40, not in the table of 12"});
}

// Qwen3-VL's DeepStack inputs are DRAM io buffers of their own, each once.
TEST(IsaVerify, V1DeepStackInputsAreDistinctDramIoBuffers) {
  Bundle good = small_bundle();
  add_buffer(good, "ds", Space::kDram, -1, Purpose::kIo, DType::kF16, 16384, 2048, {16, 64});
  good.deepstack = {12};
  good.dram.io += 2048;
  QBC_ASSERT_OK(verify(good));
  expect_broken([](Bundle& b, auto&) { b.deepstack = {40}; },
                "V1 (well-formed): ", {"deepstack input 0", "buffer #40 does not exist"});
  expect_broken([](Bundle& b, auto&) { b.deepstack = {kX}; },
                "V1 (well-formed): ", {"deepstack input 0", "is not an io buffer in DRAM"});
  expect_broken([](Bundle& b, auto&) { b.deepstack = {kIn}; },
                "V1 (well-formed): ", {"deepstack input 0", "is also another io buffer"});
  expect_broken(
      [](Bundle& b, auto&) {
        add_buffer(b, "ds", Space::kDram, -1, Purpose::kIo, DType::kF16, 16384, 2048, {16, 64});
        b.deepstack = {12, 12};
      },
      "V1 (well-formed): ", {"deepstack input 1", "is also deepstack input 0"}, false);
}

// V2 ------------------------------------------------------------------------------------

TEST(IsaVerify, V2AccessOutsideItsBuffer) {
  // x holds 8 rows: the prefill's 16-row load overruns it, the decode's 1-row load does not.
  expect_broken([](Bundle& b, auto&) { b.buffers[kX].bytes = 1024; }, "V2 (bounds): ",
                {"mode 0 (single) prefill core 0 #0 ld dma (node 'embed_in', pass 'test')",
                 "writes %x[+0] = bytes [0, 2048) outside x (1024 bytes)", "seq=16"});
}

TEST(IsaVerify, V2BufferOutsideItsSpace) {
  expect_broken([](Bundle& b, auto&) { b.buffers[kY].offset = 30720; }, "V2 (bounds): ",
                {"buffer %y [30720, +4096) ends past the SRAM of core 0 (32768 bytes)"});
  expect_broken(
      [](Bundle& b, auto&) {
        b.buffers[kOut].slot_stride = 53248;
        b.modes[0].instances = 2;
      },
      "V2 (bounds): ", {"buffer %out [12288, +4096) x 2 slots of 53248", "DRAM (65536 bytes)"});
}

// A DeepStack io buffer holds the chunk's fp16 rows of the hidden size.
TEST(IsaVerify, V2DeepStackBufferHoldsTheChunk) {
  expect_broken(
      [](Bundle& b, auto&) {
        add_buffer(b, "ds", Space::kDram, -1, Purpose::kIo, DType::kF16, 16384, 1024, {8, 64});
        b.deepstack = {12};
        b.dram.io += 1024;
      },
      "V2 (bounds): ",
      {"deepstack (fp16 [chunk, hidden], aligned rows) buffer", "1024 bytes", "2048"}, false);
}

// V3 ------------------------------------------------------------------------------------

TEST(IsaVerify, V3UnalignedDmaAddress) {
  expect_broken(
      [](Bundle&, auto& c) {
        Dma& d = std::get<Dma>(c[2].op);
        d.src.offset = 8;
        d.row_bytes = 248;
      },
      "V3 (alignment): ",
      {"#2 ld dma", "src address 4104 (WS at 4096 + 8", "not a multiple of dma_align 16"});
}

TEST(IsaVerify, V3UnalignedStride) {
  // The DRAM-side stride only matters when more than one row moves: the prefill's load of
  // 16 rows. The SRAM side is dense and may have any stride.
  expect_broken(
      [](Bundle&, auto& c) {
        Dma& d = std::get<Dma>(c[0].op);
        d.src_stride = 120;
        d.row_bytes = 120;
      },
      "V3 (alignment): ", {"#0 ld dma", "src_stride 120 (rows 16)"});
  Bundle b = small_bundle();
  for (Instr& in : b.modes[0].prefill.cores[0].code) {
    if (Dma* d = std::get_if<Dma>(&in.op); d != nullptr && in.queue == Queue::kLoad) {
      d->dst_stride = d->row_bytes;  // dense SRAM rows: allowed whatever their size
    }
  }
  QBC_ASSERT_OK(verify(b));
}

// V4 ------------------------------------------------------------------------------------

TEST(IsaVerify, V4LiveSramBuffersOverlap) {
  expect_broken(
      [](Bundle& b, auto&) { b.buffers[kXq].offset = 1024; }, "V4 (no overlap): ",
      {"mode 0 (single) prefill core 0", "x [0, 2048) and xq [1024, 2048)", "#0..#3 and #3..#4"});
}

TEST(IsaVerify, V4SramMayBeReusedOnceDead) {
  // The weight tile w is dead after #4 and y first written at #5: y may take w's bytes.
  Bundle b = small_bundle();
  b.buffers[kY].offset = b.buffers[kWt].offset;
  QBC_ASSERT_OK(verify(b));
}

TEST(IsaVerify, V4LoopCarriedBufferIsLiveOverTheWholeLoop) {
  // Inside the loop acc is read (accumulated) before it is written: its value crosses
  // iterations, so a temporary later in the body cannot share its bytes, although their
  // instruction ranges do not meet.
  const auto build = [](bool accumulate) {
    Bundle b = small_bundle();
    for (auto* code : {&prefill(b), &decode(b)}) {
      std::vector<Instr>& c = *code;
      std::get<MatMul>(c[4].op).accumulate = accumulate;
      Eltwise e;
      e.op = EltOp::kScale;
      e.a = Ref{kX, 0};
      e.y = Ref{kY, 0};
      e.rows = seq();
      e.width = 64;
      c.insert(c.begin() + 5, ins(e, cmp));
      c.insert(c.begin() + 4, ins(Loop{0, 2, 2}, cmp));
      c.erase(c.begin() + 7, c.end());  // #4 loop { #5 matmul, #6 eltwise -> y }
    }
    b.buffers[kY].offset = b.buffers[kAcc].offset;
    b.buffers[kY].bytes = 2048;
    return b;
  };
  QBC_ASSERT_OK(verify(build(false)));
  const Status st = verify(build(true));
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.message().rfind("V4 (no overlap): ", 0), 0u) << st.message();
  EXPECT_TRUE(contains(st.message(), "acc [8448, 12544) and y [8448, 10496)")) << st.message();
}

TEST(IsaVerify, V4DramRegionsOverlap) {
  expect_broken([](Bundle& b, auto&) { b.buffers[kOut].offset = 9216; }, "V4 (no overlap): ",
                {"DRAM regions overlap: %in [8192, 10240) and %out [9216, 13312)"});
}

// V5 ------------------------------------------------------------------------------------

TEST(IsaVerify, V5UnorderedConflictOnOneCore) {
  // Without the ld>cmp pair of the weight load, the matmul may read w before it arrives.
  expect_broken(
      [](Bundle&, auto& c) {
        c[1].signal = 0;
        c[4].wait = 0;
      },
      "V5 (ordered conflicts): ",
      {"mode 0 (single) prefill at start=0 seq=1 slot=0", "core 0 #4 cmp matmul", "reads %w",
       "core 0 #1 ld dma (node 'blk.0.q_proj', pass 'test') earlier wrote %w bytes [0, 4096)",
       "no token or barrier"});
}

TEST(IsaVerify, V5ConflictAcrossThousandsOfInstructionsIsStillFound) {
  // The replay drops records every queue still to run is ordered after (every 4096
  // instructions): 5000 unrelated compute instructions between the unordered weight load and
  // the matmul that reads it must not hide the conflict.
  expect_broken(
      [](Bundle& b, auto& c) {
        int32_t pad = -1;
        for (size_t i = 0; i < b.buffers.size(); ++i)
          if (b.buffers[i].name == "pad") pad = static_cast<int32_t>(i);
        if (pad < 0)
          pad = add_buffer(b, "pad", Space::kSram, 0, Purpose::kSram, DType::kF32, 16640, 64, {16});
        c[1].signal = 0;
        c[4].wait = 0;
        std::vector<Instr> fill(5000, ins(Fill{Ref{pad, 0}, Expr(16), DType::kF32, 0.0}, cmp));
        c.insert(c.begin() + 4, fill.begin(), fill.end());
      },
      "V5 (ordered conflicts): ", {"core 0 #5004 cmp matmul", "reads %w", "core 0 #1 ld dma"});
}

TEST(IsaVerify, V5WritingWeightsIsRefused) {
  expect_broken([](Bundle&, auto& c) { std::get<Dma>(c[6].op).dst.buffer = kW; },
                "V5 (ordered conflicts): ", {"#6 st dma", "writes %W, a read-only weights buffer"});
}

/// Two cores exchanging 256 bytes through DRAM: core 0 stores its partial, core 1 loads it,
/// ordered by barrier 0 (with its tokens) when `barrier`.
Bundle exchange(bool barrier) {
  Bundle b = small_header();
  const int32_t part =
      add_buffer(b, "part", Space::kDram, -1, Purpose::kScratch, DType::kF32, 16384, 256, {64});
  const int32_t p0 =
      add_buffer(b, "p0", Space::kSram, 0, Purpose::kSram, DType::kF32, 0, 256, {64});
  const int32_t p1 =
      add_buffer(b, "p1", Space::kSram, 1, Purpose::kSram, DType::kF32, 0, 256, {64});
  const uint8_t s2c = barrier ? tok(Channel::kStoreToCompute) : 0;
  const uint8_t c2l = barrier ? tok(Channel::kComputeToLoad) : 0;
  std::vector<Instr> c0 = {ins(dma(part, 0, p0, 0, 1, 256, 256), st, 0, s2c)};
  std::vector<Instr> c1 = {ins(dma(p1, 0, part, 0, 1, 256, 256), ld, c2l, 0)};
  if (barrier) {
    c0.push_back(ins(Barrier{0, 2}, cmp, s2c, 0));
    c1.insert(c1.begin(), ins(Barrier{0, 2}, cmp, 0, c2l));
  }
  add_two_core_mode(b, c0, c1);
  return b;
}

TEST(IsaVerify, V5CrossCoreExchangeNeedsABarrier) {
  QBC_ASSERT_OK(verify(exchange(true)));
  const Status st = verify(exchange(false));
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.message().rfind("V5 (ordered conflicts): ", 0), 0u) << st.message();
  EXPECT_TRUE(contains(st.message(), "mode 0 (global4) prefill")) << st.message();
  EXPECT_TRUE(contains(st.message(), "core 1 #0 ld dma")) << st.message();
  EXPECT_TRUE(contains(st.message(), "core 0 #0 st dma earlier wrote %part bytes [0, 256)"))
      << st.message();
}

TEST(IsaVerify, V5ColumnStripesOfOneRowBlockDoNotConflict) {
  // Two cores store interleaved 32-byte column stripes of the same four 64-byte rows (an
  // output split by channels): no byte is written twice, so no barrier is needed. Shifted
  // by 16 bytes the stripes overlap.
  const auto build = [](int64_t second) {
    Bundle b = exchange(false);
    for (Program* p : {&b.modes[0].prefill, &b.modes[0].decode}) {
      for (int c = 0; c < 2; ++c) {
        Dma d = dma(0, c == 0 ? 0 : second, 1 + c, 0, 4, 32, 32);
        d.dst_stride = 64;
        p->cores[static_cast<size_t>(c)].code = {ins(d, st)};
      }
    }
    return b;
  };
  QBC_ASSERT_OK(verify(build(32)));
  const Status st = verify(build(16));
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.message().rfind("V5 (ordered conflicts): ", 0), 0u) << st.message();
  EXPECT_TRUE(contains(st.message(),
                       "core 1 #0 st dma writes %part bytes [16, 240), and core 0 #0 st dma "
                       "earlier wrote %part bytes [0, 224)"))
      << st.message();
}

TEST(IsaVerify, V5RingAppendsOfDisjointRowsDoNotConflict) {
  // Two cores append 2 rows each into a 4-row ring (KV cache): core 0 at ring rows
  // start + 0.., core 1 at start + 2.. (wrapping past the end when start is large). Disjoint;
  // with core 1 at start + 1 the rows overlap.
  const auto build = [](int64_t second) {
    Bundle b = exchange(false);
    for (Program* p : {&b.modes[0].prefill, &b.modes[0].decode}) {
      for (int c = 0; c < 2; ++c) {
        Dma d = dma(0, 0, 1 + c, 0, 2, 16, 16);
        d.ring_rows = 4;
        d.ring_stride = 64;
        d.ring_row0 = Expr::sym(Sym::kStart) + Expr(c == 0 ? 0 : second);
        p->cores[static_cast<size_t>(c)].code = {ins(d, st)};
      }
    }
    return b;
  };
  QBC_ASSERT_OK(verify(build(2)));
  const Status st = verify(build(1));
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.message().rfind("V5 (ordered conflicts): ", 0), 0u) << st.message();
}

TEST(IsaVerify, V5BarrierWithoutTheTokensToItsQueue) {
  // The barrier is on the compute queue: without st>cmp, core 0's store may still be running.
  Bundle b = exchange(true);
  for (Program* p : {&b.modes[0].prefill, &b.modes[0].decode}) {
    p->cores[0].code[0].signal = 0;
    p->cores[0].code[1].wait = 0;
  }
  const Status st = verify(b);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.message().rfind("V5 (ordered conflicts): ", 0), 0u) << st.message();
}

// V6 ------------------------------------------------------------------------------------

TEST(IsaVerify, V6WaitThatNoSignalMeets) {
  expect_broken([](Bundle&, auto& c) { c[3].wait |= tok(Channel::kStoreToCompute); },
                "V6 (deadlock-free replay): ",
                {"at start=0 seq=1 slot=0: deadlock",
                 "core 0 #3 cmp quantize (node 'blk.0.q_proj', pass 'test') waits on st>cmp",
                 "core 0 #6 st dma (node 'logits_out', pass 'test') waits on cmp>st"});
}

TEST(IsaVerify, V6TokensLeftAtTheEnd) {
  expect_broken([](Bundle&, auto& c) { c[6].signal |= tok(Channel::kStoreToLoad); },
                "V6 (deadlock-free replay): ", {"core 0 ends with 1 token(s) on st>ld"});
}

TEST(IsaVerify, V6TokensInsideALoopMustBalancePerIteration) {
  // A loop whose body signals twice and waits once leaves trip tokens behind.
  expect_broken(
      [](Bundle&, auto& c) {
        Eltwise e;
        e.op = EltOp::kScale;
        e.a = Ref{kX, 0};
        e.y = Ref{kX, 0};
        e.rows = seq();
        e.width = 64;
        c.push_back(ins(Loop{1, 2, 1}, cmp));
        c.push_back(ins(e, cmp, 0, tok(Channel::kComputeToStore)));
      },
      "V6 (deadlock-free replay): ", {"ends with 2 token(s) on cmp>st"});
}

// V7 ------------------------------------------------------------------------------------

TEST(IsaVerify, V7BarrierCountsEveryStream) {
  Bundle b = exchange(true);
  for (Program* p : {&b.modes[0].prefill, &b.modes[0].decode}) {
    std::get<Barrier>(p->cores[1].code[0].op).cores = 1;
  }
  const Status st = verify(b);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.message().rfind("V7 (barriers): ", 0), 0u) << st.message();
  EXPECT_TRUE(
      contains(st.message(),
               "core 1 #0 cmp barrier: barrier 0 counts 1 cores, but the program has 2 streams"))
      << st.message();
}

TEST(IsaVerify, V7SameBarrierSequenceOnEveryCore) {
  Bundle b = exchange(true);
  for (Program* p : {&b.modes[0].prefill, &b.modes[0].decode}) {
    std::get<Barrier>(p->cores[1].code[0].op).id = 1;
  }
  const Status st = verify(b);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.message().rfind("V7 (barriers): ", 0), 0u) << st.message();
  EXPECT_TRUE(
      contains(st.message(), "barrier 0 of core 0 is id 0 at #1 in 0 loops, of core 1 id 1 at #0"))
      << st.message();
}

// V8 ------------------------------------------------------------------------------------

TEST(IsaVerify, V8FieldOutOfRange) {
  expect_broken([](Bundle&, auto& c) { std::get<Quantize>(c[3].op).bits = 3; },
                "V8 (sizes): ", {"#3 cmp quantize", "bits 3 is not 4, 8 or 16"});
  expect_broken([](Bundle&, auto& c) { std::get<MatMul>(c[4].op).kt = 0; },
                "V8 (sizes): ", {"#4 cmp matmul", "kt 0 outside [1, 2^40]"});
  expect_broken([](Bundle& b, auto&) { b.dma_align = 0; },
                "V8 (sizes): ", {"bundle header: dma_align 0"});
  expect_broken(
      [](Bundle&, auto& c) {
        Fill f;
        f.y = Ref{kAcc, 0};
        f.count = 16;
        f.type = DType::kI8;
        c.push_back(ins(f, cmp));
      },
      "V8 (sizes): ", {"#7 cmp fill", "type i8 is not f32 or i64"});
  expect_broken(
      [](Bundle&, auto& c) {
        RmsNorm n;
        n.x = Ref{kX, 0};
        n.weight = Ref{kWst, 0};
        n.y = Ref{kX, 0};
        n.width = 64;
        n.group = 48;
        c.push_back(ins(n, cmp));
      },
      "V8 (sizes): ", {"#7 cmp rms_norm", "width 64 is not a multiple of group 48"});
  expect_broken(
      [](Bundle&, auto& c) {
        AvgPool p;
        p.x = Ref{kX, 0};
        p.y = Ref{kX, 0};
        p.width = 4;
        p.grid_w = 6;
        p.kernel = 4;
        c.push_back(ins(p, cmp));
      },
      "V8 (sizes): ", {"#7 cmp avg_pool", "grid_w must be a multiple of kernel"});
}

// The KV4 fields of an attention (kv4_fields_problem), one broken rule each.
TEST(IsaVerify, V8Kv4AttentionFields) {
  const auto kv4 = [](int64_t group, bool token, bool hadamard, bool asym, int32_t k_bits) {
    return [=](Bundle& b, auto&) {
      AttnDesc a{4, 2, 16, 0, 64, 0.25, 0.0, k_bits, 4, 8, false, false, -1};
      a.k_group = group;
      a.k_token_scale = token;
      a.qk_hadamard = hadamard;
      a.k_asym = asym;
      a.v_token_scale = true;
      b.attentions.push_back(a);
    };
  };
  expect_broken(kv4(5, true, false, false, 4),
                "V8 (sizes): ", {"attention #0", "k_group 5 is not 0 or a divisor of head_dim 16"});
  expect_broken(kv4(4, false, false, false, 4), "V8 (sizes): ",
                {"attention #0", "k_group, qk_hadamard and k_asym need k_token_scale"});
  expect_broken(kv4(0, false, false, true, 4),
                "V8 (sizes): ", {"attention #0", "need k_token_scale"});
  expect_broken(kv4(0, false, true, false, 4),
                "V8 (sizes): ", {"attention #0", "need k_token_scale"});
  expect_broken(kv4(0, true, false, true, 8),
                "V8 (sizes): ", {"attention #0", "k_asym with 8-bit keys (4 only)"});
  // head_dim 12 in groups of 6: a Hadamard block that is not a power of two
  expect_broken(
      [](Bundle& b, auto&) {
        AttnDesc a{4, 2, 12, 0, 64, 0.25, 0.0, 4, 4, 8, false, false, -1};
        a.k_token_scale = a.qk_hadamard = true;
        a.k_group = 6;
        b.attentions.push_back(a);
      },
      "V8 (sizes): ", {"attention #0", "qk_hadamard over blocks of 6, not a power of two"});
}

TEST(IsaVerify, V8NegativeRowCount) {
  // seq - 2 rows is fine for the prefill's 16 rows but negative for one token.
  expect_broken([](Bundle&, auto& c) { std::get<Quantize>(c[3].op).rows = seq() - 2; },
                "V8 (sizes): ", {"#3 cmp quantize", "rows seq - 2 = -1 is negative", "seq=1"});
}

TEST(IsaVerify, V8LoopNestTooDeep) {
  expect_broken(
      [](Bundle&, auto& c) {
        for (int d = 0; d < 9; ++d) {
          c.insert(c.begin() + 3 + d, ins(Loop{d, 1, 9 - d}, cmp));
        }
      },
      "V8 (sizes): ", {"nested 9 loops deep, more than 8"});
}

TEST(IsaVerify, V8ExpressionOverflow) {
  expect_broken(
      [](Bundle&, auto& c) {
        Expr big = seq();
        for (int k = 0; k < 7; ++k) big = big * Expr(int64_t{1} << 20);
        std::get<Dma>(c[0].op).src.offset = big;
      },
      "V8 (sizes): ", {"#0 ld dma", "src offset", "overflows int64"});
}

// V10 -----------------------------------------------------------------------------------

/// small_bundle() as a feature bundle: its `in` buffer is the input "patches" (16 rows of 64
/// fp16 values, 128 bytes apart), `out` the fp32 feature output, and the decode program empty.
Bundle feature_bundle() {
  Bundle b = small_bundle();
  b.kind = BundleKind::kFeatures;
  b.feature_inputs = {FeatureInput{"patches", kIn, 64, 128}};
  b.input = -1;
  b.output_stride = 256;
  b.output_rows = 16;
  decode(b).clear();
  return b;
}

void expect_feature_broken(const std::function<void(Bundle&)>& edit,
                           const std::vector<std::string>& parts) {
  Bundle b = feature_bundle();
  edit(b);
  const Status st = verify(b);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.message().rfind("V10 (feature interface): ", 0), 0u) << st.message();
  EXPECT_EQ(st.code(), Code::kInvalidArgument);
  for (const std::string& p : parts) EXPECT_TRUE(contains(st.message(), p)) << st.message();
}

TEST(IsaVerify, FeatureBundleVerifies) { QBC_ASSERT_OK(verify(feature_bundle())); }

TEST(IsaVerify, V10DecodeCodeInAFeatureBundle) {
  expect_feature_broken([](Bundle& b) { decode(b) = small_code(); },
                        {"mode 0 (single)", "decode program has 7 instructions on core 0"});
}

TEST(IsaVerify, V10FeatureInputSmallerThanItsRows) {
  expect_feature_broken(
      [](Bundle& b) { b.feature_inputs[0].stride = 256; },
      {"feature input 'patches'", "holds 2048 bytes", "less than the 3968", "of 16 rows"});
}

TEST(IsaVerify, V10FeatureOutputRowsNotADivisorOfTheInputRows) {
  expect_feature_broken([](Bundle& b) { b.output_rows = 5; },
                        {"feature output: 5 rows per call", "16 input rows"});
  expect_feature_broken([](Bundle& b) { b.output_rows = 0; }, {"feature output: 0 rows"});
}

TEST(IsaVerify, V10FeatureOutputSmallerThanItsRows) {
  // Four output rows of 1024 bytes need 3 * 1024 + 4 * vocab bytes.
  expect_feature_broken(
      [](Bundle& b) {
        b.output_rows = 4;
        b.output_stride = 1024 * 4;
      },
      {"feature output", "of 4 rows"});
}

TEST(IsaVerify, V10FeatureInputNamedTwice) {
  expect_feature_broken(
      [](Bundle& b) {
        b.feature_inputs.push_back(FeatureInput{"patches", kOut, 64, 128});
      },
      {"feature input 'patches' is named twice"});
}

TEST(IsaVerify, V10FeatureBundleWithADecoderInput) {
  expect_feature_broken([](Bundle& b) { b.input = kIn; }, {"inputs_embeds"});
}

TEST(IsaVerify, V10CausalAttentionInAFeatureBundle) {
  expect_feature_broken(
      [](Bundle& b) {
        b.attentions.push_back(AttnDesc{4, 2, 16, 0, 16, 0.25, 0.0, 8, 8, 8});
      },
      {"attention descriptor 0 is causal in a feature bundle"});
}

TEST(IsaVerify, V10BidirectionalAttentionInADecoder) {
  expect_broken(
      [](Bundle& b, auto&) {
        AttnDesc a{4, 2, 16, 0, 64, 0.25, 0.0, 8, 8, 8};
        a.bidirectional = true;
        b.attentions.push_back(a);
      },
      "V10 (feature interface): ", {"bidirectional in a decoder bundle"});
}

/// small_bundle with a span program: a copy of its prefill (it has no qk_scores).
Bundle span_bundle() {
  Bundle b = small_bundle();
  b.modes[0].span = b.modes[0].prefill;
  b.modes[0].span.phase = Phase::kSpan;
  return b;
}

TEST(IsaVerify, SpanProgramVerifies) {
  const Bundle b = span_bundle();
  ASSERT_TRUE(b.modes[0].has_span());
  EXPECT_EQ(b.modes[0].programs().size(), 3u);
  QBC_ASSERT_OK(verify(b));
}

TEST(IsaVerify, V10SpanProgramInAFeatureBundle) {
  expect_feature_broken(
      [](Bundle& b) {
        b.modes[0].span = b.modes[0].prefill;
        b.modes[0].span.phase = Phase::kSpan;
      },
      {"mode 0 (single): a span program in a feature bundle"});
}

TEST(IsaVerify, V10SpanProgramOfAnotherMaxSeq) {
  Bundle b = span_bundle();
  b.modes[0].span.max_seq = b.modes[0].prefill.max_seq + 1;
  const Status st = verify(b);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.message().rfind("V10 (feature interface): ", 0), 0u) << st.message();
  EXPECT_TRUE(contains(st.message(), "is not the prefill's")) << st.message();
}

TEST(IsaVerify, V10SpanProgramInOneModeOnly) {
  Bundle b = span_bundle();
  b.modes.push_back(b.modes[0]);
  QBC_ASSERT_OK(verify(b));
  b.modes[1].span.cores.clear();  // mode 1 would run its images causally
  const Status st = verify(b);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.message().rfind("V10 (feature interface): ", 0), 0u) << st.message();
  EXPECT_TRUE(contains(st.message(), "mode 1 (single): no span program, mode 0 has one"))
      << st.message();
}

TEST(IsaVerify, SpanProgramOfTheWrongPhaseOrStreams) {
  Bundle b = span_bundle();
  b.modes[0].span.phase = Phase::kPrefill;
  EXPECT_FALSE(verify(b).ok());
  b = span_bundle();
  b.modes[0].span.cores.push_back(b.modes[0].span.cores[0]);
  const Status st = verify(b);
  ASSERT_FALSE(st.ok());
  EXPECT_TRUE(contains(st.message(), "span: 2 streams")) << st.message();
}

TEST(IsaVerify, V10DecoderWithFeatureInputs) {
  expect_broken(
      [](Bundle& b, auto&) {
        b.feature_inputs = {FeatureInput{"patches", kIn, 64, 128}};
      },
      "V10 (feature interface): ", {"a decoder bundle has 1 feature inputs"});
}

}  // namespace
}  // namespace qbc::isa
