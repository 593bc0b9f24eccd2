// Resume after a kill (docs/architecture.md, "Resume after a kill"): a `qbc compile` killed
// during calibration (SIGKILL, through the test hook QBC_TEST_KILL_AFTER_CALIB_BLOCK and by a
// real kill -9 from outside) and started again with the same command resumes from its last
// finished calibration block, says so, and writes the same MXQ bytes as a run that was never
// interrupted (also when killed mid-way through a deeper model); a changed input (configuration
// key, calibration data, model file) starts over; --no-resume ignores and removes the
// checkpoints; Ctrl-C keeps them in the named folder.
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "test_support.h"

extern char** environ;

namespace qbc {
namespace {

namespace fs = std::filesystem;
using testing::contains;
using testing::run_qbc;
using testing::shell_quote;

/// The compile every test runs: the built-in tiny random model, random calibration.
const char* kFlags =
    " --preset llm --use-random-calib --set calibration.numSamples=4"
    " --set calibration.seqLength=32";

/// A tiny random model, made once per test binary.
const fs::path& tiny_model() {
  static const fs::path dir = [] {
    const fs::path d = testing::temp_dir() / "tiny";
    const auto r = run_qbc("random-model --tiny -o " + shell_quote(d));
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return d;
  }();
  return dir;
}

std::string compile_args(const fs::path& out, const std::string& extra = "") {
  return "compile " + shell_quote(tiny_model()) + kFlags + extra + " -o " + shell_quote(out);
}

/// `compile MODEL` with the test flags and `extra`, to `out`.
std::string compile_model_args(const fs::path& model, const fs::path& out,
                               const std::string& extra = "") {
  return "compile " + shell_quote(model) + kFlags + extra + " -o " + shell_quote(out);
}

/// The MXQ of an uninterrupted compile (no checkpoints), with `extra` flags.
std::string reference_mxq(const std::string& extra = "") {
  const fs::path out = testing::temp_dir() / "q.mxq";
  const auto r = run_qbc(compile_args(out, " --no-resume" + extra));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return testing::read_file(out);
}

std::string listing(const fs::path& dir) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  std::string out;
  for (const std::string& n : names) out += n + " ";
  return out;
}

/// Compiles to DIR/q.mxq with the hook killing it (SIGKILL) after calibration block `block`.
testing::RunResult killed_after(const fs::path& out, const std::string& block,
                                const std::string& extra = "") {
  return testing::run_command("QBC_TEST_KILL_AFTER_CALIB_BLOCK=" + block + " " +
                              shell_quote(testing::qbc_binary()) + " " + compile_args(out, extra));
}

TEST(ResumeCli, KilledAfterACalibrationBlockResumesToTheSameBytes) {
  const std::string reference = reference_mxq();
  ASSERT_FALSE(reference.empty());
  const fs::path dir = testing::temp_dir() / "out";
  fs::create_directories(dir);
  const fs::path out = dir / "q.mxq";
  const auto killed = killed_after(out, "calibrate:1");
  ASSERT_NE(killed.exit_code, 0) << killed.err;
  EXPECT_FALSE(fs::exists(out));
  // What the kill leaves: one named folder, the finished blocks in it.
  EXPECT_EQ(listing(dir), "q.mxq.qbc-resume ") << killed.err;
  EXPECT_TRUE(fs::exists(dir / "q.mxq.qbc-resume" / "calibrate.block-0001.ckpt"));
  EXPECT_FALSE(fs::exists(dir / "q.mxq.qbc-resume" / "calibrate.block-0002.ckpt"));

  const auto resumed = run_qbc(compile_args(out));
  ASSERT_EQ(resumed.exit_code, 0) << resumed.err;
  EXPECT_TRUE(contains(resumed.err, "resuming: calibration blocks 1-2 of ")) << resumed.err;
  EXPECT_TRUE(contains(resumed.err, "(calibrate) from " + (dir / "q.mxq.qbc-resume").string()))
      << resumed.err;
  // The scale-migration statistics were finished too (they come first in --preset llm).
  EXPECT_TRUE(contains(resumed.err, "(calibrateScales) from ")) << resumed.err;
  EXPECT_TRUE(testing::read_file(out) == reference) << "resumed MXQ differs from the reference";
  EXPECT_EQ(listing(dir), "q.mxq ");  // the checkpoints are removed after success
}

TEST(ResumeCli, KilledDuringTheScaleStatisticsResumesThereToo) {
  const std::string reference = reference_mxq();
  const fs::path dir = testing::temp_dir() / "out";
  fs::create_directories(dir);
  const fs::path out = dir / "q.mxq";
  ASSERT_NE(killed_after(out, "calibrateScales:0").exit_code, 0);
  const auto resumed = run_qbc(compile_args(out));
  ASSERT_EQ(resumed.exit_code, 0) << resumed.err;
  EXPECT_TRUE(contains(resumed.err, "resuming: calibration blocks 1-1 of ")) << resumed.err;
  EXPECT_FALSE(contains(resumed.err, "(calibrate) from")) << resumed.err;
  EXPECT_TRUE(testing::read_file(out) == reference);
}

TEST(ResumeCli, DamagedCheckpointIsRedoneNotTrusted) {
  const std::string reference = reference_mxq();
  const fs::path dir = testing::temp_dir() / "out";
  fs::create_directories(dir);
  const fs::path out = dir / "q.mxq";
  ASSERT_NE(killed_after(out, "calibrate:1").exit_code, 0);
  const fs::path block = dir / "q.mxq.qbc-resume" / "calibrate.block-0001.ckpt";
  std::string bytes = testing::read_file(block);
  ASSERT_GT(bytes.size(), 200u);
  bytes[bytes.size() - 100] ^= 0x10;
  testing::write_file(block, bytes);
  const auto resumed = run_qbc(compile_args(out));
  ASSERT_EQ(resumed.exit_code, 0) << resumed.err;
  EXPECT_TRUE(contains(resumed.err, "ignored checkpoint " + block.string())) << resumed.err;
  // Only the stream after the last saved block is kept, so the calibrate pass starts over;
  // the scale statistics, undamaged, are still resumed.
  EXPECT_FALSE(contains(resumed.err, "(calibrate) from")) << resumed.err;
  EXPECT_TRUE(contains(resumed.err, "(calibrateScales) from")) << resumed.err;
  EXPECT_TRUE(testing::read_file(out) == reference);
}

TEST(ResumeCli, ChangedConfigurationStartsOverAndRemovesTheStaleCheckpoints) {
  const std::string reference = reference_mxq(" --set seed=7");
  const fs::path dir = testing::temp_dir() / "out";
  fs::create_directories(dir);
  const fs::path out = dir / "q.mxq";
  ASSERT_NE(killed_after(out, "calibrate:1").exit_code, 0);
  const auto changed = run_qbc(compile_args(out, " --set seed=7"));
  ASSERT_EQ(changed.exit_code, 0) << changed.err;
  EXPECT_TRUE(
      contains(changed.err, "removed stale checkpoints in " + (dir / "q.mxq.qbc-resume").string()))
      << changed.err;
  EXPECT_FALSE(contains(changed.err, "resuming")) << changed.err;
  EXPECT_TRUE(testing::read_file(out) == reference);
  EXPECT_EQ(listing(dir), "q.mxq ");
}

TEST(ResumeCli, BackendOnlyKeyKeepsTheCalibration) {
  const fs::path dir = testing::temp_dir() / "out";
  fs::create_directories(dir);
  const fs::path out = dir / "q.mxq";
  ASSERT_NE(killed_after(out, "calibrate:1").exit_code, 0);
  const auto r = run_qbc(compile_args(out, " --set splitParts=2"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(contains(r.err, "resuming: calibration blocks 1-2 of ")) << r.err;
  EXPECT_FALSE(contains(r.err, "stale")) << r.err;
}

TEST(ResumeCli, NoResumeIgnoresAndRemovesTheCheckpoints) {
  const std::string reference = reference_mxq();
  const fs::path dir = testing::temp_dir() / "out";
  fs::create_directories(dir);
  const fs::path out = dir / "q.mxq";
  ASSERT_NE(killed_after(out, "calibrate:1").exit_code, 0);
  const auto r = run_qbc(compile_args(out, " --no-resume"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(contains(r.err, "--no-resume: removed the checkpoints in ")) << r.err;
  EXPECT_FALSE(contains(r.err, "resuming")) << r.err;
  EXPECT_TRUE(testing::read_file(out) == reference);
  EXPECT_EQ(listing(dir), "q.mxq ");
  // --no-resume writes none: the kill hook, which fires once a block is saved, never does.
  fs::remove(out);
  EXPECT_EQ(killed_after(out, "calibrate:1", " --no-resume").exit_code, 0);
  EXPECT_FALSE(fs::exists(dir / "q.mxq.qbc-resume"));
  EXPECT_TRUE(testing::read_file(out) == reference);
}

/// `qbc ARGS` with the hook killing it (SIGKILL) after calibration block `block`.
testing::RunResult killed_running(const std::string& args, const std::string& block) {
  return testing::run_command("QBC_TEST_KILL_AFTER_CALIB_BLOCK=" + block + " " +
                              shell_quote(testing::qbc_binary()) + " " + args);
}

// A model of 8 decoder blocks (9 calibration blocks with the head) killed in the middle of
// its calibration, with the two-pass histogram observer (mode 2: a max pass, then a histogram
// over that max, per block): the resumed run loads blocks 0-4 of `calibrate` and all of
// `calibrateScales`, runs blocks 5-8, and writes the bytes of an uninterrupted run.
TEST(ResumeCli, KilledInTheMiddleOfADeeperModelResumesToTheSameBytes) {
  const fs::path model = testing::temp_dir() / "deep";
  const auto made = run_qbc("random-model --tiny --layers 8 -o " + shell_quote(model));
  ASSERT_EQ(made.exit_code, 0) << made.err;
  const std::string mode = " --set calibration.mode=2";
  const fs::path ref = testing::temp_dir() / "ref.mxq";
  const auto r = run_qbc(compile_model_args(model, ref, mode + " --no-resume"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const fs::path dir = testing::temp_dir() / "out";
  fs::create_directories(dir);
  const fs::path out = dir / "q.mxq";
  ASSERT_NE(killed_running(compile_model_args(model, out, mode), "calibrate:4").exit_code, 0);
  EXPECT_TRUE(fs::exists(dir / "q.mxq.qbc-resume" / "calibrate.block-0004.ckpt"));
  const auto resumed = run_qbc(compile_model_args(model, out, mode));
  ASSERT_EQ(resumed.exit_code, 0) << resumed.err;
  EXPECT_TRUE(contains(resumed.err, "resuming: calibration blocks 1-5 of 9 (calibrate)"))
      << resumed.err;
  EXPECT_TRUE(contains(resumed.err, "resuming: calibration blocks 1-9 of 9 (calibrateScales)"))
      << resumed.err;
  EXPECT_TRUE(testing::read_file(out) == testing::read_file(ref))
      << "resumed MXQ differs from the reference";
  EXPECT_EQ(listing(dir), "q.mxq ");
}

// Other calibration samples at the same --calib path (so the same configuration): the
// checkpoints, keyed on the embedded samples, are not used; the result is the new data's.
TEST(ResumeCli, ChangedCalibrationDataIsCalibratedAgain) {
  QBC_REQUIRE_SHARED(hf, "models/stories260k/hf");
  QBC_REQUIRE_SHARED(calib_text, "data/tinystories/calib.clean.txt");
  QBC_REQUIRE_SHARED(eval_text, "data/tinystories/eval.clean.txt");
  const fs::path calib = testing::temp_dir() / "calib";
  const auto prepare = [&](const fs::path& text) {
    const auto p = run_qbc("calib prepare " + shell_quote(hf) + " --text " + shell_quote(text) +
                           " --num-samples 4 --seq-len 32 --force -o " + shell_quote(calib));
    ASSERT_EQ(p.exit_code, 0) << p.err;
  };
  const std::string args = " --preset llm_fast --calib " + shell_quote(calib);
  const auto compile = [&](const fs::path& out, const std::string& extra = "") {
    return "compile " + shell_quote(hf) + args + extra + " -o " + shell_quote(out);
  };
  const fs::path dir = testing::temp_dir() / "out";
  fs::create_directories(dir);
  const fs::path out = dir / "q.mxq";
  prepare(calib_text);
  ASSERT_FALSE(HasFatalFailure());
  ASSERT_NE(killed_running(compile(out), "calibrate:2").exit_code, 0);
  ASSERT_TRUE(fs::exists(dir / "q.mxq.qbc-resume" / "calibrate.block-0002.ckpt"));
  prepare(eval_text);
  ASSERT_FALSE(HasFatalFailure());
  const fs::path ref = testing::temp_dir() / "ref.mxq";
  const auto r = run_qbc(compile(ref, " --no-resume"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto again = run_qbc(compile(out));
  ASSERT_EQ(again.exit_code, 0) << again.err;
  EXPECT_FALSE(contains(again.err, "resuming")) << again.err;
  EXPECT_TRUE(testing::read_file(out) == testing::read_file(ref))
      << "the MXQ is not the one of the new calibration data";
  EXPECT_EQ(listing(dir), "q.mxq ");
}

// The model's weights rewritten in place (another seed): another fingerprint, so the folder
// is stale, emptied, and the compile starts over on the new weights.
TEST(ResumeCli, ChangedModelFileStartsOver) {
  const fs::path model = testing::temp_dir() / "model";
  const auto write = [&](const char* seed) {
    const auto m = run_qbc("random-model --tiny --force --seed " + std::string(seed) + " -o " +
                           shell_quote(model));
    ASSERT_EQ(m.exit_code, 0) << m.err;
  };
  write("0");
  ASSERT_FALSE(HasFatalFailure());
  const fs::path dir = testing::temp_dir() / "out";
  fs::create_directories(dir);
  const fs::path out = dir / "q.mxq";
  ASSERT_NE(killed_running(compile_model_args(model, out), "calibrate:1").exit_code, 0);
  write("1");
  ASSERT_FALSE(HasFatalFailure());
  const fs::path ref = testing::temp_dir() / "ref.mxq";
  const auto r = run_qbc(compile_model_args(model, ref, " --no-resume"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto again = run_qbc(compile_model_args(model, out));
  ASSERT_EQ(again.exit_code, 0) << again.err;
  EXPECT_TRUE(
      contains(again.err, "removed stale checkpoints in " + (dir / "q.mxq.qbc-resume").string()))
      << again.err;
  EXPECT_FALSE(contains(again.err, "resuming")) << again.err;
  EXPECT_TRUE(testing::read_file(out) == testing::read_file(ref));
  EXPECT_EQ(listing(dir), "q.mxq ");
}

/// Starts `qbc ARGS` (stderr to `err`) with SIGINT at its default action.
pid_t spawn_qbc(const std::string& args, const fs::path& err) {
  const std::string cmd = "exec " + shell_quote(testing::qbc_binary()) + " " + args +
                          " </dev/null >/dev/null 2>" + shell_quote(err);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t defaults, none;
  sigemptyset(&defaults);
  sigaddset(&defaults, SIGINT);
  sigemptyset(&none);
  posix_spawnattr_setsigdefault(&attr, &defaults);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK);
  std::vector<char*> argv = {const_cast<char*>("/bin/sh"), const_cast<char*>("-c"),
                             const_cast<char*>(cmd.c_str()), nullptr};
  pid_t pid = -1;
  const int rc = posix_spawn(&pid, "/bin/sh", nullptr, &attr, argv.data(), environ);
  posix_spawnattr_destroy(&attr);
  return rc == 0 ? pid : -1;
}

/// Polls until `file` exists or the process ends; true when it appeared while it ran.
bool wait_for_file(pid_t pid, const fs::path& file) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::minutes(5);
  while (std::chrono::steady_clock::now() < end) {
    std::error_code ec;
    if (fs::exists(file, ec)) return true;
    int status = 0;
    if (waitpid(pid, &status, WNOHANG) == pid) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return false;
}

int wait_exit(pid_t pid) {
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

/// A longer calibration, so that a signal lands in the middle of it.
const char* kLongerCalibration = " --set calibration.numSamples=16 --set calibration.seqLength=128";

TEST(ResumeCli, RealSigkillDuringCalibrationResumesToTheSameBytes) {
  const std::string reference = reference_mxq(kLongerCalibration);
  const fs::path dir = testing::temp_dir() / "out";
  fs::create_directories(dir);
  const fs::path out = dir / "q.mxq";
  const pid_t pid = spawn_qbc(compile_args(out, kLongerCalibration), dir.parent_path() / "err");
  ASSERT_GT(pid, 0);
  const bool seen = wait_for_file(pid, dir / "q.mxq.qbc-resume" / "calibrate.block-0000.ckpt");
  kill(pid, SIGKILL);
  const int code = wait_exit(pid);
  ASSERT_TRUE(seen) << "the compile ended before its first calibrate block was checkpointed";
  ASSERT_EQ(code, 128 + SIGKILL);
  const auto resumed = run_qbc(compile_args(out, kLongerCalibration));
  ASSERT_EQ(resumed.exit_code, 0) << resumed.err;
  EXPECT_TRUE(contains(resumed.err, "resuming: calibration blocks 1-")) << resumed.err;
  EXPECT_TRUE(testing::read_file(out) == reference);
  EXPECT_EQ(listing(dir), "q.mxq ");
}

TEST(ResumeCli, CtrlCKeepsTheNamedCheckpointFolderAndSaysSo) {
  const fs::path dir = testing::temp_dir() / "out";
  fs::create_directories(dir);
  const fs::path out = dir / "q.mxq";
  const fs::path err = dir.parent_path() / "err";
  const pid_t pid = spawn_qbc(compile_args(out, kLongerCalibration), err);
  ASSERT_GT(pid, 0);
  const bool seen = wait_for_file(pid, dir / "q.mxq.qbc-resume" / "calibrate.block-0000.ckpt");
  kill(pid, SIGINT);
  const int code = wait_exit(pid);
  ASSERT_TRUE(seen) << testing::read_file(err);
  EXPECT_EQ(code, 130);
  const std::string text = testing::read_file(err);
  EXPECT_TRUE(contains(text, "qbc: interrupted\n")) << text;
  EXPECT_TRUE(contains(
      text, "kept the checkpoints of the finished work in " + (dir / "q.mxq.qbc-resume").string()))
      << text;
  EXPECT_EQ(listing(dir), "q.mxq.qbc-resume ");  // no work files, no partial MXQ
  EXPECT_FALSE(fs::exists(dir / "q.mxq.qbc-resume" / "work"));
}

}  // namespace
}  // namespace qbc
