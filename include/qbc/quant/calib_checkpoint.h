// Checkpoints of block-by-block calibration (collect_stats_blockwise): after each finished
// block (a BlockRunner segment) its statistics, and the residual stream the next block reads,
// go to the run's CheckpointDir. A run started again on the same inputs loads the finished
// blocks and carries on from the first unfinished one, with the same statistics bit for bit.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "qbc/quant/calibrate.h"
#include "qbc/quant/checkpoint.h"
#include "qbc/support/status.h"

namespace qbc::quant {

/// Where one calibration run checkpoints (null dir: nowhere).
struct CalibCheckpoint {
  const CheckpointDir* dir = nullptr;
  std::string run;  ///< The pass ("calibrate", "calibrateScales"): names its files.
};

/// The key a run's checkpoints are made for: the folder's fingerprint, the run, and the
/// calibration samples as the run embedded them (a digest of every sample's input rows and
/// length, and `extra`: BlockRunner::deepstack_digest()), so other calibration data never
/// reuses them.
std::string calib_run_key(const CalibCheckpoint& c, const std::vector<std::vector<float>>& stream,
                          const std::vector<int64_t>& seqs, const std::string& extra = "");

/// What earlier runs finished: blocks [0, next) with their statistics, and the stream after
/// block next - 1 (empty when next is 0 or every block is done).
struct CalibProgress {
  size_t next = 0;
  CalibStats stats;
  std::vector<std::vector<float>> stream;
};

/// The longest prefix of finished blocks of `c` whose checkpoints hold for `key`, out of
/// `segments` blocks over `samples` samples. Missing or damaged files just shorten it.
CalibProgress load_calib_progress(const CalibCheckpoint& c, const std::string& key, size_t segments,
                                  size_t samples);

/// Saves block `segment` as finished: its statistics (`block_stats`, the nodes it observed)
/// and, unless it is the last block, `stream` (the next block's input). The statistics go
/// first, so a kill between the two writes costs one block, never a wrong resume.
/// QBC_TEST_KILL_AFTER_CALIB_BLOCK=RUN:N (tests) kills the process with SIGKILL once block N
/// (0-based) of run RUN is saved.
Status save_calib_block(const CalibCheckpoint& c, const std::string& key, size_t segment,
                        size_t segments, const CalibStats& block_stats,
                        const std::vector<std::vector<float>>& stream);

}  // namespace qbc::quant
