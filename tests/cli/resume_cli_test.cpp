// Resume after a kill (docs/architecture.md, "Resume after a kill"): a `qbc compile` killed
// during calibration (SIGKILL, through the test hook QBC_TEST_KILL_AFTER_CALIB_BLOCK and by a
// real kill -9 from outside) and started again with the same command resumes from its last
// finished calibration block, says so, and writes the same MXQ bytes as a run that was never
// interrupted; a changed input starts over; --no-resume ignores and removes the checkpoints;
// Ctrl-C keeps them in the named folder.
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
