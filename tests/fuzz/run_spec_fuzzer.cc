// libFuzzer target: a RunSpec in JSON, as `rdattn-train --spec` reads it and as the coordinator
// stores it. The text goes (1) through protobuf's JSON mapping into rdattn.v1.RunSpec and then
// contract::ParseRunSpec, and (2) straight into ParseRunConfigText (runspec/run_config.h).
// Properties beyond "no crash, no leak, no sanitizer report": every rejection is
// INVALID_ARGUMENT made of field errors (non-empty path and reason); an accepted config is
// written back as a RunSpec (RunSpecFromConfig) that parses to the same resolved config and
// fingerprint, and its learning rate is finite at every boundary step.
#include <google/protobuf/util/json_util.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>

#include "proto/contract/contract.h"
#include "runspec/run_config.h"
#include "tests/fuzz/rejection.h"
#include "worker/trainer/lr_schedule.h"

namespace {

namespace pb = ::rdattn::v1;
using rdattn::FieldErrorsOr;
using rdattn::RunConfig;
using rdattn::fuzz::CheckRejection;

void CheckAccepted(const RunConfig& cfg) {
  auto spec = rdattn::contract::RunSpecFromConfig(cfg);
  FUZZ_CHECK(spec.ok(), spec.status().ToString());
  auto again = rdattn::contract::ParseRunSpec(*spec);
  FUZZ_CHECK(again.ok(), "the written-back RunSpec does not parse: " + again.status().ToString());
  FUZZ_CHECK(rdattn::ResolvedConfigJson(*again) == rdattn::ResolvedConfigJson(cfg),
             "resolved config changed: " + rdattn::ResolvedConfigJson(cfg).dump() + " -> " +
                 rdattn::ResolvedConfigJson(*again).dump());
  FUZZ_CHECK(rdattn::NumericFingerprint(*again) == rdattn::NumericFingerprint(cfg),
             "fingerprint changed");
  const int64_t total = cfg.schedule.total_steps;
  for (int64_t step : {int64_t{0}, cfg.optim.warmup_steps - 1, cfg.optim.warmup_steps, total / 2,
                       total - 1, total}) {
    const double lr = rdattn::trainer::LearningRate(cfg.optim, cfg.schedule, step);
    FUZZ_CHECK(std::isfinite(lr) && lr >= 0,
               "lr " + std::to_string(lr) + " at step " + std::to_string(step));
  }
}

void Check(const FieldErrorsOr<RunConfig>& cfg) {
  if (cfg.ok()) {
    CheckAccepted(*cfg);
  } else {
    CheckRejection(cfg);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  pb::RunSpec spec;
  if (google::protobuf::util::JsonStringToMessage(text, &spec).ok()) {
    Check(rdattn::contract::ParseRunSpec(spec));
  }
  Check(rdattn::ParseRunConfigText(text));
  return 0;
}
