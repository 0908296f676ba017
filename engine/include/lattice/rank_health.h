// Which rank is slow (issue 26, item 3): from every rank's phase times at one logged step (the
// run store's "rank R forward time" ... keys, each the mean per iteration over the log
// interval), the ranks much slower than the peers that do the same work, and the pipeline
// stage the other stages wait on; and, from a failed run's error, the rank the communication
// watch found absent. Shared by `lattice runs show` and the Studio's Dashboard; plain structs.
//
// Note [slow ranks]. Ranks of one pipeline stage run the same layers on micro-batches of the
// same shape, so their compute (forward + backward + optimizer: the phases a rank spends on its
// own work, not waiting) should match; a rank is slow when its compute is more than kSlowRatio
// times the median of its stage peers' and at least kSlowMinSeconds more. Its tensor-parallel
// peers then wait in the TP collectives (counted inside their forward and backward) and its
// data-parallel peers in the gradient reduction (their "data-parallel comm"), so the median of
// the peers, not their mean or maximum, is the reference: one slow rank cannot drag it. A stage
// the others wait on: the stages' compute (the median of each stage's ranks) where the slowest
// is more than kStageRatio times the median of the others while those spend more than
// kWaitShare of their iteration in pipeline wait. The ratios are above what a shared machine's
// noise gives a log interval's mean (two ranks of a DP 2 run oversubscribed on 2 cores differ
// by up to ~1.2x); the absolute floor keeps sub-millisecond phases of tiny models from being
// named.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace lattice {

// One rank's phase times at a logged step, seconds per iteration.
struct RankPhaseTimes {
  int rank = 0;
  double forward = 0, backward = 0, pipeline_wait = 0, dp_comm = 0, optimizer = 0;
  double compute() const { return forward + backward + optimizer; }
};

struct RankFinding {
  enum Kind { kSlowRank, kWaitedOnStage, kAbsentRank } kind = kSlowRank;
  int rank = -1;  // the slow or absent rank; the stage's rank with the most compute
  int pp = -1;    // its pipeline stage (-1 when the layout is not known)
  std::string sentence;
};

inline constexpr double kSlowRatio = 1.5;
inline constexpr double kSlowMinSeconds = 0.010;
inline constexpr double kStageRatio = 1.25;
inline constexpr double kWaitShare = 0.10;

// Every rank's phase times among a logged step's values, keyed as the run recorder writes
// them ("rank 3 forward time", "rank 3 backward time", ...), in rank order; ranks without a
// forward time are left out.
std::vector<RankPhaseTimes> rank_phase_times(const std::map<std::string, double>& values);

// The slow ranks and the waited-on stage of a tp x pp x dp run (Megatron's rank order) at one
// logged step, in rank order then the stage. Ranks outside the layout are ignored.
std::vector<RankFinding> find_slow_ranks(int tp, int pp, int dp,
                                         const std::vector<RankPhaseTimes>& ranks);

// The ranks a failed run's error names as absent, in the order named (the communication
// watch's "rank N did not arrive ...", "rank N has not arrived", "rank N (...) has ended",
// "rank N is stopped"), one finding each; none when the error names none.
std::vector<RankFinding> absent_ranks(const std::string& error);

}  // namespace lattice
