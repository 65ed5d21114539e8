// Seed policies (docs/sweeps.md "Seed policy"): the proto side of coordinator/stats/sequential.h.
// The design is computed once at submission and stored with the sweep (Store::PutSequential);
// Core runs a look when every job of the current seeds has ended (EvaluateLook), and either
// stops or adds the next seeds' jobs in the same transaction, with a WatchEvent.seed_look.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "coordinator/stats/sequential.h"
#include "coordinator/stats/tables.h"
#include "rdattn/v1/sweep.pb.h"

namespace rdattn::coordinator {

namespace pb = ::rdattn::v1;

inline constexpr int kDefaultPolicySimulations = 200000;
inline constexpr double kDefaultPolicyAlpha = 0.05;
inline constexpr double kDefaultFutilityEffectSd = 1.0;
inline constexpr double kDefaultFutilityPower = 0.8;

// Every seed the policy may run, in order: initial, then `next` (or max(initial) + 1, + 2, ...),
// max in all.
std::vector<uint64_t> PolicySeeds(const pb::SeedPolicy& policy);
// Seeds at each planned look: |initial|, + step, ..., capped at max.
std::vector<int> PolicyLooks(const pb::SeedPolicy& policy);
// The plan with every default filled in (SeedPolicy's comments).
stats::SequentialPlan PlanFromPolicy(const pb::SeedPolicy& policy);
stats::SequentialBoundaries BoundariesFromDesign(const pb::SequentialDesign& design);

// The design of a policy that passed ExpandSweep's checks (about a second for the defaults).
// INVALID_ARGUMENT "seed_policy.<field>: ..." if the plan is unusable.
StatusOr<pb::SequentialState> DesignSeedPolicy(const pb::SeedPolicy& policy);

// The next look: every (scale, main arm) against the reference at the scale's last validation
// milestone, from the tables of the sweep's report input (BuildTables). `n_seeds`: seeds the
// sweep has now.
pb::SeedLook EvaluateLook(const pb::SeedPolicy& policy, const pb::SequentialState& state,
                          const stats::ReportTables& tables, int n_seeds);

}  // namespace rdattn::coordinator
