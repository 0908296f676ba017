// find_slow_ranks and absent_ranks (lattice/rank_health.h, Note [slow ranks]).
#include "lattice/rank_health.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <regex>
#include <set>

namespace lattice {

namespace {

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

std::string ms(double seconds) {
  char buf[32];
  std::snprintf(buf, sizeof buf, seconds < 0.010 ? "%.1f ms" : "%.0f ms", seconds * 1e3);
  return buf;
}

std::string times(double ratio) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1fx", ratio);
  return buf;
}

std::string percent(double share) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.0f %%", share * 100);
  return buf;
}

}  // namespace

std::vector<RankPhaseTimes> rank_phase_times(const std::map<std::string, double>& values) {
  std::map<int, RankPhaseTimes> by_rank;
  std::set<int> timed;
  const std::pair<const char*, double RankPhaseTimes::*> phases[] = {
      {"forward time", &RankPhaseTimes::forward},
      {"backward time", &RankPhaseTimes::backward},
      {"pipeline wait time", &RankPhaseTimes::pipeline_wait},
      {"data-parallel comm time", &RankPhaseTimes::dp_comm},
      {"optimizer time", &RankPhaseTimes::optimizer}};
  for (const auto& [key, value] : values) {
    int rank = -1, used = 0;
    if (std::sscanf(key.c_str(), "rank %d %n", &rank, &used) != 1 || used == 0 || rank < 0)
      continue;
    const std::string rest = key.substr(used);
    for (const auto& [name, member] : phases)
      if (rest == name) {
        RankPhaseTimes& r = by_rank[rank];
        r.rank = rank;
        r.*member = value;
        if (member == &RankPhaseTimes::forward) timed.insert(rank);
      }
  }
  std::vector<RankPhaseTimes> out;
  for (const auto& [rank, r] : by_rank)
    if (timed.count(rank)) out.push_back(r);
  return out;
}

std::vector<RankFinding> find_slow_ranks(int tp, int pp, int dp,
                                         const std::vector<RankPhaseTimes>& ranks) {
  std::vector<RankFinding> found;
  if (tp < 1 || pp < 1 || dp < 1) return found;
  const int world = tp * pp * dp;
  // Megatron's rank order (ParallelLayout::rank): rank = tp + TP * (dp + DP * pp).
  auto stage_of = [&](int rank) { return rank / (tp * dp); };
  std::map<int, std::vector<const RankPhaseTimes*>> by_stage;
  for (const RankPhaseTimes& r : ranks)
    if (r.rank >= 0 && r.rank < world) by_stage[stage_of(r.rank)].push_back(&r);

  for (const auto& [stage, members] : by_stage) {
    if (members.size() < 2) continue;
    for (const RankPhaseTimes* r : members) {
      std::vector<double> peers;
      double peers_dp_wait = 0;
      for (const RankPhaseTimes* o : members)
        if (o != r) {
          peers.push_back(o->compute());
          peers_dp_wait = std::max(peers_dp_wait, o->dp_comm);
        }
      const double ref = median(peers);
      const double mine = r->compute();
      if (!(mine > kSlowRatio * ref && mine - ref >= kSlowMinSeconds)) continue;
      RankFinding f;
      f.kind = RankFinding::kSlowRank;
      f.rank = r->rank;
      f.pp = stage;
      f.sentence = "rank " + std::to_string(r->rank) + " is slow: " + ms(mine) +
                   " of compute per iteration against " + ms(ref) + " on the " +
                   std::to_string(peers.size()) + " other rank" + (peers.size() > 1 ? "s" : "") +
                   " of pp " + std::to_string(stage) + " (" + times(mine / ref) + ")";
      if (dp > 1 && peers_dp_wait > 0)
        f.sentence += "; its data-parallel peers wait up to " + ms(peers_dp_wait) +
                      " per iteration in the gradient reduction";
      found.push_back(f);
    }
  }

  if (pp > 1 && by_stage.size() == static_cast<size_t>(pp)) {
    std::vector<double> compute(pp), wait_share(pp);
    std::vector<int> busiest(pp, -1);
    for (const auto& [stage, members] : by_stage) {
      std::vector<double> c, w;
      double most = -1;
      for (const RankPhaseTimes* r : members) {
        c.push_back(r->compute());
        const double total = r->compute() + r->pipeline_wait + r->dp_comm;
        w.push_back(total > 0 ? r->pipeline_wait / total : 0);
        if (r->compute() > most) most = r->compute(), busiest[stage] = r->rank;
      }
      compute[stage] = median(c);
      wait_share[stage] = median(w);
    }
    const int slowest = static_cast<int>(std::max_element(compute.begin(), compute.end()) -
                                         compute.begin());
    std::vector<double> others, others_wait;
    for (int s = 0; s < pp; s++)
      if (s != slowest) {
        others.push_back(compute[s]);
        others_wait.push_back(wait_share[s]);
      }
    const double ref = median(others), waited = median(others_wait);
    if (compute[slowest] > kStageRatio * ref && compute[slowest] - ref >= kSlowMinSeconds &&
        waited > kWaitShare) {
      RankFinding f;
      f.kind = RankFinding::kWaitedOnStage;
      f.rank = busiest[slowest];
      f.pp = slowest;
      f.sentence = "pp " + std::to_string(slowest) + " is the stage the others wait on: " +
                   ms(compute[slowest]) + " of compute per iteration against " + ms(ref) +
                   " on the other stages, which spend " + percent(waited) +
                   " of their iteration waiting for pipeline transfers";
      found.push_back(f);
    }
  }
  return found;
}

std::vector<RankFinding> absent_ranks(const std::string& error) {
  // "rank 1 did not arrive and did not answer: it is stopped (...)", "rank 2 has not arrived:
  // it ...", "rank 3 (pid 12 on this machine) has ended (killed, ...)", "rank 4 is stopped".
  static const std::regex absent(
      R"(rank (\d+)(?: \([^)]*\))? (did not arrive and did not answer: it [a-z ]*[a-z]|has not arrived|has ended|is stopped))");
  std::vector<RankFinding> found;
  std::set<int> named;
  for (auto it = std::sregex_iterator(error.begin(), error.end(), absent);
       it != std::sregex_iterator(); ++it) {
    const int rank = std::stoi((*it)[1].str());
    if (!named.insert(rank).second) continue;
    RankFinding f;
    f.kind = RankFinding::kAbsentRank;
    f.rank = rank;
    f.sentence = "rank " + std::to_string(rank) + " is the one the others waited for (it " +
                 (*it)[2].str() + "; the run's error has the communication watch's account)";
    found.push_back(f);
  }
  return found;
}

}  // namespace lattice
