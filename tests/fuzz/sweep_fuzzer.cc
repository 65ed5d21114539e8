// libFuzzer target: sweep files, the text a user hands to `rdattn validate` / `rdattn submit`.
// The input is read as YAML, as JSON and as a text proto (ParseSweepYaml, ParseSweepJson,
// ParseSweepTextProto); a sweep that parses is validated and expanded (ExpandSweep), and every
// job's RunSpec is parsed again (ParseRunSpec), as a worker does at lease time.
// Properties beyond "no crash, no leak, no sanitizer report": every rejection is
// INVALID_ARGUMENT made of field errors (non-empty path and reason); an accepted sweep's jobs all
// parse.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "proto/contract/contract.h"
#include "tests/fuzz/rejection.h"

namespace {

namespace pb = ::rdattn::v1;
using rdattn::FieldErrorsOr;
using rdattn::fuzz::CheckRejection;

// Sweeps that expand to more runs than this are not expanded: ExpandSweep checks one RunSpec per
// (scale, seed, arm), so a 4 KB input could ask for 10^5 of them and the run would time out on
// size alone, which is not what this target looks for.
constexpr int64_t kMaxRuns = 64;

int64_t Runs(const pb::SweepSpec& spec) {
  const int64_t arms = std::max(spec.arms_size(), 1) + spec.controls_size();
  return int64_t{spec.scales_size()} * std::max(spec.seeds_size(), 1) * arms;
}

void Check(const FieldErrorsOr<pb::SweepSpec>& spec) {
  if (!spec.ok()) {
    CheckRejection(spec);
    return;
  }
  if (Runs(*spec) > kMaxRuns) return;
  auto jobs = rdattn::contract::ExpandSweep(*spec, "fz");
  if (!jobs.ok()) {
    CheckRejection(jobs);
    return;
  }
  FUZZ_CHECK(!jobs->empty(), "an accepted sweep has jobs");
  for (const pb::JobSpec& job : *jobs) {
    auto cfg = rdattn::contract::ParseRunSpec(job.run());
    FUZZ_CHECK(cfg.ok(), job.job_id() + ": " + cfg.status().ToString());
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  Check(rdattn::contract::ParseSweepYaml(text));
  Check(rdattn::contract::ParseSweepJson(text));
  Check(rdattn::contract::ParseSweepTextProto(text));
  return 0;
}
