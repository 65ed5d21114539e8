// The contract library: the hand-written code that both sides of the wire need (CONVENTIONS
// "proto/"). Status conversion, the RunSpec <-> RunConfig bridge, and sweep parsing, validation
// and expansion. The coordinator validates a sweep with ExpandSweep at submission; the client
// calls the same function offline in `rdattn validate`.
#pragma once

#include <grpcpp/support/status.h>

#include <string>
#include <string_view>
#include <vector>

#include "common/field_error.h"
#include "common/status.h"
#include "rdattn/v1/run_spec.pb.h"
#include "rdattn/v1/sweep.pb.h"
#include "runspec/run_config.h"

namespace rdattn::contract {

namespace pb = ::rdattn::v1;

// 1:1 code mapping (absl, gRPC and rdattn::StatusCode share the numbers). A status with field
// errors (FieldErrorStatus) also carries them in the gRPC status details, as AIP-193 says: a
// serialized google.rpc.Status (the same code and message) whose details hold one Any of
// google.rpc.BadRequest with a FieldViolation {field: path, description: reason} per field
// error, in order. FromGrpcStatus reads them back into Status::field_errors(); details that do
// not parse, or hold no BadRequest, leave them empty (the code and message are kept).
grpc::Status ToGrpcStatus(const Status& status);
Status FromGrpcStatus(const grpc::Status& status);

// RunSpec (proto) -> the JSON ParseRunConfig reads, and the parse itself. The one validation
// function of the trainer, applied to the proto.
nlohmann::json RunSpecToJson(const pb::RunSpec& spec);
FieldErrorsOr<RunConfig> ParseRunSpec(const pb::RunSpec& spec);
// RunConfig -> RunSpec (via RunSpecJson), e.g. to hand a resolved config to a worker.
StatusOr<pb::RunSpec> RunSpecFromConfig(const RunConfig& cfg);

// Sweep files: YAML (yaml-cpp) or JSON, in protobuf's JSON mapping of rdattn.v1.SweepSpec.
// Unknown fields are errors that name the field; all problems are reported at once, as
// FieldErrors (a syntax error's path is its place: "line 3, column 5").
FieldErrorsOr<pb::SweepSpec> ParseSweepYaml(std::string_view yaml_text);
FieldErrorsOr<pb::SweepSpec> ParseSweepJson(std::string_view json_text);
// Addition: the protobuf text format (.textproto), which ARCHITECTURE.md also allows. Enum
// values by their full names; errors at "line N, column M".
FieldErrorsOr<pb::SweepSpec> ParseSweepTextProto(std::string_view text);

// Validates a sweep and expands it into jobs: one per (scale, seed, arm), plus one per
// (scale, seed, control). Every job's RunSpec is validated with ParseRunSpec. Errors name the
// field in the sweep ("scales[1].shape.width: …", "arms[2]: unknown arm 'x'; valid: …",
// "seeds: must not be empty", "seeds[3]: duplicate seed 7") and are all reported at once, as
// FieldErrors (status() joins them into one INVALID_ARGUMENT). Job ids are deterministic:
// "<sweep_id>/<scale>/s<seed>/<arm>"; the pair group is "<sweep_id>/<scale>/s<seed>". In every job:
// run.init_seed = run.data.data_seed = seed; run.run_id = run.job_id = job id; run.sweep_id =
// sweep_id; checkpoint.dir empty unless the sweep sets one (then "<dir>/<job id>"); controls get
// schedule.stop_at_tokens.
//
// Additions to the lead's contract (docs/sweeps.md): an empty sweep_id gives ids without the
// "<sweep_id>/" prefix (the offline `rdattn validate`); JobSpec.run is the *resolved* RunSpec
// (RunSpecFromConfig of the parsed config: every default and recipe value explicit), so the
// coordinator and the client read total tokens, milestones and world size from it directly.
FieldErrorsOr<std::vector<pb::JobSpec>> ExpandSweep(const pb::SweepSpec& spec,
                                                    const std::string& sweep_id);

// --- Sweep defaults, shared by ExpandSweep, the coordinator and the client -------------------

// Attempts per job when SweepSpec.max_attempts is 0.
inline constexpr int kDefaultMaxAttempts = 3;
// The reference arm when SweepSpec.reference_arm is empty.
inline constexpr std::string_view kDefaultReferenceArm = "block";

// SweepSpec.max_attempts with its default applied (values below 0 are ExpandSweep errors).
int MaxAttempts(const pb::SweepSpec& spec);
// SweepSpec.reference_arm with its default applied.
std::string ReferenceArm(const pb::SweepSpec& spec);
// ScaleSpec.name, or its preset when the name is empty.
std::string ScaleName(const pb::ScaleSpec& scale);

// A seed policy look in one line: "look 1 at n = 3: continue, adding seeds 4, 5 [tiny rd: t =
// -2.100 (continue)]" or "look 2 at n = 5: stop (every comparison crossed a boundary) [...]".
// Without `with_comparisons`, the part before " [".
std::string DescribeSeedLook(const pb::SeedLook& look, bool with_comparisons = true);

}  // namespace rdattn::contract
