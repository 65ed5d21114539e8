// The small parts of the contract library: Status <-> grpc::Status (with field errors as
// google.rpc.BadRequest details), the RunSpec <-> RunConfig bridge through protobuf's JSON mapping
// and the sweep defaults. Sweep parsing is in sweep_parse.cc, validation and expansion in
// sweep_expand.cc.
#include "proto/contract/contract.h"

#include <google/protobuf/util/json_util.h>

#include <utility>

#include "google/rpc/error_details.pb.h"
#include "google/rpc/status.pb.h"

namespace rdattn::contract {
namespace {

namespace gp = ::google::protobuf;

// Protobuf's JSON printer with proto field names (what ParseRunConfig names in its errors).
bool PrintJson(const gp::Message& message, std::string* out) {
  gp::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;
  return gp::util::MessageToJsonString(message, out, options).ok();
}

FieldErrorsOr<nlohmann::json> RunSpecJsonChecked(const pb::RunSpec& spec) {
  std::string text;
  if (!PrintJson(spec, &text)) {
    return std::vector<FieldError>{
        {"RunSpec", "cannot be printed as JSON (invalid UTF-8 in a string?)"}};
  }
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) {
    return std::vector<FieldError>{{"RunSpec", "its JSON form does not parse (invalid UTF-8?)"}};
  }
  return j;
}

}  // namespace

// --- Status ------------------------------------------------------------------------------------

grpc::Status ToGrpcStatus(const Status& status) {
  if (status.ok()) return grpc::Status::OK;
  const auto code = static_cast<grpc::StatusCode>(static_cast<int>(status.code()));
  if (status.field_errors().empty()) return grpc::Status(code, status.message());
  // AIP-193: one google.rpc.BadRequest.FieldViolation per field error, in a google.rpc.Status
  // whose code and message are the call's own (gRPC sends it as grpc-status-details-bin).
  google::rpc::BadRequest bad_request;
  for (const FieldError& e : status.field_errors()) {
    google::rpc::BadRequest::FieldViolation* v = bad_request.add_field_violations();
    v->set_field(e.path);
    v->set_description(e.reason);
  }
  google::rpc::Status details;
  details.set_code(static_cast<int>(code));
  details.set_message(status.message());
  details.add_details()->PackFrom(bad_request);
  return grpc::Status(code, status.message(), details.SerializeAsString());
}

namespace {

// The field violations of every google.rpc.BadRequest in serialized google.rpc.Status details
// (grpc::Status::error_details()); empty when there are none or the bytes do not parse.
std::vector<FieldError> FieldErrorsOfDetails(const std::string& details_bytes) {
  std::vector<FieldError> out;
  google::rpc::Status details;
  if (details_bytes.empty() || !details.ParseFromString(details_bytes)) return out;
  for (const gp::Any& any : details.details()) {
    google::rpc::BadRequest bad_request;
    if (!any.Is<google::rpc::BadRequest>() || !any.UnpackTo(&bad_request)) continue;
    for (const google::rpc::BadRequest::FieldViolation& v : bad_request.field_violations()) {
      out.push_back(FieldError{v.field(), v.description()});
    }
  }
  return out;
}

}  // namespace

Status FromGrpcStatus(const grpc::Status& status) {
  if (status.ok()) return Status::Ok();
  const int code = static_cast<int>(status.error_code());
  const bool known = code > 0 && code <= static_cast<int>(StatusCode::kUnauthenticated);
  return Status(known ? static_cast<StatusCode>(code) : StatusCode::kUnknown,
                status.error_message(), FieldErrorsOfDetails(status.error_details()));
}

// --- RunSpec <-> RunConfig ---------------------------------------------------------------------

nlohmann::json RunSpecToJson(const pb::RunSpec& spec) {
  auto j = RunSpecJsonChecked(spec);
  return j.ok() ? std::move(j).value() : nlohmann::json();
}

FieldErrorsOr<RunConfig> ParseRunSpec(const pb::RunSpec& spec) {
  FieldErrorsOr<nlohmann::json> j = RunSpecJsonChecked(spec);
  if (!j.ok()) return j.errors();
  return ParseRunConfig(*j);
}

StatusOr<pb::RunSpec> RunSpecFromConfig(const RunConfig& cfg) {
  const std::string text =
      RunSpecJson(cfg).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  pb::RunSpec spec;
  const auto status = gp::util::JsonStringToMessage(text, &spec);
  if (!status.ok()) {
    return InternalError("RunSpecJson does not parse as rdattn.v1.RunSpec: " +
                         std::string(status.message()));
  }
  return spec;
}

// --- Sweep defaults ----------------------------------------------------------------------------

int MaxAttempts(const pb::SweepSpec& spec) {
  return spec.max_attempts() > 0 ? spec.max_attempts() : kDefaultMaxAttempts;
}

std::string ReferenceArm(const pb::SweepSpec& spec) {
  return spec.reference_arm().empty() ? std::string(kDefaultReferenceArm) : spec.reference_arm();
}

std::string ScaleName(const pb::ScaleSpec& scale) {
  return scale.name().empty() ? scale.preset() : scale.name();
}

}  // namespace rdattn::contract
