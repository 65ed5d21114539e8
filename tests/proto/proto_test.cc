// Contract tests for proto/rdattn/v1: binary and JSON round trips (JSON is how YAML sweep files
// and the trainer's metric lines are read), strict JSON parsing, and the wire rules of
// CONVENTIONS.md checked on the descriptors themselves. No network: the gRPC part only checks
// that the generated services link and keep their shape.

#include <google/protobuf/descriptor.h>
#include <google/protobuf/util/json_util.h>
#include <google/protobuf/util/message_differencer.h>
#include <gtest/gtest.h>

#include <cctype>
#include <cstdint>
#include <deque>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "rdattn/v1/coordinator.grpc.pb.h"
#include "rdattn/v1/coordinator.pb.h"
#include "rdattn/v1/run_spec.pb.h"
#include "rdattn/v1/sweep.pb.h"

namespace rdattn {
namespace {

namespace pb = ::rdattn::v1;
using ::google::protobuf::Descriptor;
using ::google::protobuf::EnumDescriptor;
using ::google::protobuf::FileDescriptor;
using ::google::protobuf::Message;
using ::google::protobuf::MethodDescriptor;
using ::google::protobuf::ServiceDescriptor;
using ::google::protobuf::util::JsonParseOptions;
using ::google::protobuf::util::JsonPrintOptions;
using ::google::protobuf::util::JsonStringToMessage;
using ::google::protobuf::util::MessageDifferencer;
using ::google::protobuf::util::MessageToJsonString;

constexpr char kPackage[] = "rdattn.v1";

// --- fixtures -----------------------------------------------------------------------------

pb::RunSpec MakeRunSpec() {
  pb::RunSpec run;
  run.set_run_id("sw1-S-s3-rd");
  run.set_sweep_id("sw1");
  run.set_job_id("sw1-S-s3-rd");
  run.set_init_seed(18446744073709551615ULL);  // max uint64: JSON carries it as a string
  pb::ModelSpec* model = run.mutable_model();
  model->set_preset("S");
  model->set_arm("rd");
  model->mutable_shape()->set_blocks(8);
  model->mutable_shape()->set_key_norm_eps(1e-6);
  pb::DataSpec* data = run.mutable_data();
  data->add_train_shards("/data/edu_fineweb_train_*.bin");
  data->add_val_shards("/data/edu_fineweb_val_000000.bin");
  data->set_tokenizer("gpt2");
  data->set_data_seed(3);
  data->set_val_windows(10240);
  pb::OptimSpec* optim = run.mutable_optim();
  optim->set_peak_lr(6e-4);
  optim->set_min_lr_ratio(0.1);
  optim->set_warmup_steps(190);
  optim->set_beta1(0.9);
  optim->set_beta2(0.95);
  optim->set_eps(1e-8);
  optim->set_weight_decay(0.0);  // explicit zero: presence must survive every round trip
  optim->set_grad_clip(1.0);
  optim->set_lr_decay(pb::LR_DECAY_COSINE);
  pb::ScheduleSpec* schedule = run.mutable_schedule();
  schedule->set_total_tokens(2'000'000'000);
  schedule->set_global_batch_tokens(524'288);
  schedule->set_micro_batch_sequences(16);
  for (int64_t m : {250'000'000LL, 500'000'000LL, 1'000'000'000LL, 2'000'000'000LL}) {
    schedule->add_milestones_tokens(m);
  }
  pb::ParallelSpec* parallel = run.mutable_parallel();
  parallel->set_world_size(8);
  parallel->set_threads_per_rank(1);
  parallel->set_backend(pb::BACKEND_NCCL);
  parallel->set_device(pb::DEVICE_CUDA);
  parallel->set_precision(pb::PRECISION_BF16);
  run.mutable_checkpoint()->set_dir("/ckpt/sw1-S-s3-rd");
  run.mutable_checkpoint()->set_every_steps(200);
  run.mutable_checkpoint()->set_keep_last(2);
  run.mutable_metrics()->set_train_event_every_steps(10);
  run.set_recipe("paper");
  (*run.mutable_labels())["scale"] = "S";
  (*run.mutable_labels())["seed"] = "3";
  return run;
}

pb::SweepSpec MakeSweepSpec() {
  pb::SweepSpec sweep;
  sweep.set_name("paper-protocol");
  sweep.set_owner("alice");
  pb::ScaleSpec* s = sweep.add_scales();
  s->set_preset("S");
  s->set_peak_lr(6e-4);
  pb::ScaleSpec* m = sweep.add_scales();
  m->set_preset("M");
  m->set_peak_lr(3e-4);
  m->set_micro_batch_sequences(8);
  pb::ScaleSpec* tiny = sweep.add_scales();
  tiny->set_name("tiny-explicit");
  tiny->mutable_shape()->set_layers(4);
  tiny->mutable_shape()->set_width(64);
  tiny->mutable_shape()->set_heads(1);
  tiny->mutable_shape()->set_ffn_hidden(192);
  tiny->mutable_shape()->set_blocks(2);
  tiny->mutable_shape()->set_context(64);
  tiny->mutable_shape()->set_vocab_size(257);
  sweep.add_arms("block");
  sweep.add_arms("rd");
  for (uint64_t seed : {0, 1, 2, 3, 4}) {
    sweep.add_seeds(seed);
  }
  sweep.set_reference_arm("block");
  for (const char* arm : {"tied", "average", "frozen_v"}) {
    pb::ControlSpec* control = sweep.add_controls();
    control->set_arm(arm);
    control->set_parent_arm("rd");
    control->set_stop_at_tokens(500'000'000);
  }
  sweep.set_recipe("paper");
  sweep.mutable_data()->add_train_shards("/data/edu_fineweb_train_*.bin");
  sweep.mutable_data()->add_val_shards("/data/edu_fineweb_val_000000.bin");
  sweep.mutable_data()->set_tokenizer("gpt2");
  sweep.mutable_optim()->set_warmup_steps(190);
  sweep.mutable_schedule()->set_total_tokens(2'000'000'000);
  sweep.mutable_schedule()->add_milestones_tokens(500'000'000);
  sweep.mutable_parallel()->set_world_size(8);
  sweep.mutable_parallel()->set_precision(pb::PRECISION_BF16);
  sweep.mutable_checkpoint()->set_every_steps(250);
  sweep.set_priority(5);
  sweep.set_hardware_kind(pb::HARDWARE_KIND_GPU);
  sweep.set_max_attempts(3);
  (*sweep.mutable_labels())["project"] = "rd-attnres";
  return sweep;
}

pb::MetricEvent MakeEvalEvent() {
  pb::MetricEvent event;
  event.set_seq(42);
  event.set_job_id("sw1-S-s3-rd");
  event.set_kind(pb::MetricEvent::KIND_EVAL);
  event.mutable_wall_time()->set_seconds(1'716'163'200);
  event.mutable_wall_time()->set_nanos(500'000'000);
  event.set_attempt(2);
  event.set_step(954);
  event.set_tokens(500'170'752);
  event.set_milestone_tokens(500'000'000);
  event.set_val_nll(3.125);
  event.set_eval_tokens(10'485'760);
  event.set_tokens_per_second(1.5e6);
  event.set_init_param_checksum("sha256:0123abcd");
  for (double js : {0.0, 0.21, 0.25}) {
    event.add_js_nats(js);
  }
  event.set_js_mean_nats(0.1533333333333333);
  event.set_peak_memory_bytes(80LL << 30);
  event.set_hardware_kind(pb::HARDWARE_KIND_GPU);
  return event;
}

std::string Diff(const Message& a, const Message& b, bool* equal) {
  std::string report;
  MessageDifferencer differencer;
  differencer.ReportDifferencesToString(&report);
  *equal = differencer.Compare(a, b);
  return report;
}

void ExpectBinaryRoundTrip(const Message& original) {
  std::string wire;
  ASSERT_TRUE(original.SerializeToString(&wire));
  std::unique_ptr<Message> parsed(original.New());
  ASSERT_TRUE(parsed->ParseFromString(wire));
  bool equal = false;
  const std::string diff = Diff(original, *parsed, &equal);
  EXPECT_TRUE(equal) << original.GetTypeName() << " binary round trip differs:\n" << diff;
}

void ExpectJsonRoundTrip(const Message& original, const JsonPrintOptions& print_options) {
  std::string json;
  const auto print_status = MessageToJsonString(original, &json, print_options);
  ASSERT_TRUE(print_status.ok()) << print_status.ToString();
  std::unique_ptr<Message> parsed(original.New());
  const auto parse_status = JsonStringToMessage(json, parsed.get());  // default options
  ASSERT_TRUE(parse_status.ok()) << parse_status.ToString() << "\n" << json;
  bool equal = false;
  const std::string diff = Diff(original, *parsed, &equal);
  EXPECT_TRUE(equal) << original.GetTypeName() << " JSON round trip differs:\n"
                     << diff << "\nJSON: " << json;
}

// --- round trips --------------------------------------------------------------------------

TEST(ProtoRoundTripTest, RunSpecBinary) { ExpectBinaryRoundTrip(MakeRunSpec()); }

TEST(ProtoRoundTripTest, SweepSpecBinary) { ExpectBinaryRoundTrip(MakeSweepSpec()); }

TEST(ProtoRoundTripTest, MetricEventBinary) { ExpectBinaryRoundTrip(MakeEvalEvent()); }

TEST(ProtoRoundTripTest, RunSpecJson) {
  ExpectJsonRoundTrip(MakeRunSpec(), JsonPrintOptions());
  JsonPrintOptions snake;
  snake.preserve_proto_field_names = true;
  ExpectJsonRoundTrip(MakeRunSpec(), snake);
}

TEST(ProtoRoundTripTest, SweepSpecJson) {
  ExpectJsonRoundTrip(MakeSweepSpec(), JsonPrintOptions());
  JsonPrintOptions snake;
  snake.preserve_proto_field_names = true;
  ExpectJsonRoundTrip(MakeSweepSpec(), snake);
}

TEST(ProtoRoundTripTest, MetricEventJson) {
  ExpectJsonRoundTrip(MakeEvalEvent(), JsonPrintOptions());
}

TEST(ProtoRoundTripTest, ExplicitZeroOptionalSurvivesJson) {
  std::string json;
  ASSERT_TRUE(MessageToJsonString(MakeRunSpec(), &json).ok());
  pb::RunSpec parsed;
  ASSERT_TRUE(JsonStringToMessage(json, &parsed).ok());
  EXPECT_TRUE(parsed.optim().has_weight_decay());
  EXPECT_EQ(parsed.optim().weight_decay(), 0.0);
  EXPECT_FALSE(parsed.model().shape().has_layers());
}

// --- JSON as the YAML reader sees it -----------------------------------------------------

// A sweep as yaml-cpp -> JSON would hand it over: snake_case names, enum names, plain numbers.
TEST(ProtoJsonTest, ParsesSnakeCaseSweepFile) {
  const std::string json = R"json({
    "name": "cpu-demo",
    "scales": [{"name": "tiny", "preset": "tiny", "shape": {"layers": 4, "norm_eps": 1e-6},
                "world_size": 2}],
    "arms": ["block", "rd"],
    "seeds": [1, 2],
    "reference_arm": "block",
    "controls": [{"arm": "tied", "parent_arm": "rd", "stop_at_tokens": 65536}],
    "data": {"train_shards": ["/tmp/d/train_*.bin"], "val_shards": ["/tmp/d/val.bin"],
             "tokenizer": "byte", "val_windows": 32},
    "optim": {"peak_lr": 1e-3, "weight_decay": 0},
    "schedule": {"total_tokens": 131072, "global_batch_tokens": 4096,
                 "micro_batch_sequences": 8, "milestones_tokens": [65536, 131072]},
    "parallel": {"world_size": 1, "threads_per_rank": 1, "backend": "BACKEND_MPI",
                 "device": "DEVICE_CPU", "precision": "PRECISION_FP32"},
    "hardware_kind": "HARDWARE_KIND_CPU",
    "labels": {"purpose": "demo"}
  })json";
  pb::SweepSpec sweep;
  const auto status = JsonStringToMessage(json, &sweep);
  ASSERT_TRUE(status.ok()) << status.ToString();
  EXPECT_EQ(sweep.scales(0).shape().layers(), 4);
  EXPECT_TRUE(sweep.scales(0).shape().has_norm_eps());
  EXPECT_FALSE(sweep.scales(0).shape().has_width());
  EXPECT_EQ(sweep.scales(0).world_size(), 2);
  EXPECT_EQ(sweep.seeds_size(), 2);
  EXPECT_EQ(sweep.controls(0).stop_at_tokens(), 65536);
  EXPECT_TRUE(sweep.optim().has_weight_decay());
  EXPECT_FALSE(sweep.optim().has_grad_clip());
  EXPECT_EQ(sweep.schedule().milestones_tokens_size(), 2);
  EXPECT_EQ(sweep.parallel().backend(), pb::BACKEND_MPI);
  EXPECT_EQ(sweep.parallel().precision(), pb::PRECISION_FP32);
  EXPECT_EQ(sweep.hardware_kind(), pb::HARDWARE_KIND_CPU);
  EXPECT_EQ(sweep.labels().at("purpose"), "demo");
}

// A metric line as the trainer writes it (one JSON object per line, snake_case).
TEST(ProtoJsonTest, ParsesTrainerMetricLine) {
  const std::string line =
      R"({"seq": 7, "job_id": "j1", "kind": "KIND_TRAIN_STEP", "attempt": 1,)"
      R"( "wall_time": "2024-05-20T00:00:01.250Z", "step": 3, "tokens": 12288,)"
      R"( "train_loss": 5.5, "lr": 0.0006, "grad_norm": 1.25, "step_seconds": 0.5,)"
      R"( "js_nats": [0, 0.01], "init_param_checksum": "abc"})";
  pb::MetricEvent event;
  const auto status = JsonStringToMessage(line, &event);
  ASSERT_TRUE(status.ok()) << status.ToString();
  EXPECT_EQ(event.kind(), pb::MetricEvent::KIND_TRAIN_STEP);
  EXPECT_EQ(event.wall_time().seconds(), 1'716'163'201);
  EXPECT_EQ(event.wall_time().nanos(), 250'000'000);
  EXPECT_EQ(event.tokens(), 12288);
  EXPECT_EQ(event.js_nats_size(), 2);
}

TEST(ProtoJsonTest, RejectsUnknownFieldsByDefault) {
  const JsonParseOptions defaults;
  ASSERT_FALSE(defaults.ignore_unknown_fields);
  {
    pb::SweepSpec sweep;
    EXPECT_FALSE(JsonStringToMessage(R"({"name": "x", "seed": [1]})", &sweep).ok());
  }
  {
    pb::SweepSpec sweep;  // misspelled nested field
    EXPECT_FALSE(
        JsonStringToMessage(R"({"data": {"train_shard": ["a.bin"]}})", &sweep, defaults).ok());
  }
  {
    pb::RunSpec run;
    EXPECT_FALSE(JsonStringToMessage(R"({"model": {"arm": "rd", "layer": 4}})", &run).ok());
  }
  {
    pb::RunSpec run;  // unknown enum name
    EXPECT_FALSE(JsonStringToMessage(R"({"parallel": {"backend": "BACKEND_GLOO"}})", &run).ok());
  }
  {
    pb::RunSpec run;  // the accepted spelling parses (the control for the cases above)
    EXPECT_TRUE(
        JsonStringToMessage(R"({"model": {"arm": "rd", "shape": {"layers": 4}}})", &run).ok());
  }
}

// --- wire rules on the descriptors ---------------------------------------------------------

// Every file of package rdattn.v1 reachable from the service file.
std::vector<const FileDescriptor*> ContractFiles() {
  std::vector<const FileDescriptor*> files;
  std::set<const FileDescriptor*> seen;
  std::deque<const FileDescriptor*> queue = {pb::SubmitSweepRequest::descriptor()->file()};
  while (!queue.empty()) {
    const FileDescriptor* file = queue.front();
    queue.pop_front();
    if (file->package() != kPackage || !seen.insert(file).second) {
      continue;
    }
    files.push_back(file);
    for (int i = 0; i < file->dependency_count(); ++i) {
      queue.push_back(file->dependency(i));
    }
  }
  return files;
}

void CollectEnums(const Descriptor* message, std::vector<const EnumDescriptor*>* enums) {
  for (int i = 0; i < message->enum_type_count(); ++i) {
    enums->push_back(message->enum_type(i));
  }
  for (int i = 0; i < message->nested_type_count(); ++i) {
    CollectEnums(message->nested_type(i), enums);
  }
}

std::vector<const EnumDescriptor*> ContractEnums() {
  std::vector<const EnumDescriptor*> enums;
  for (const FileDescriptor* file : ContractFiles()) {
    for (int i = 0; i < file->enum_type_count(); ++i) {
      enums.push_back(file->enum_type(i));
    }
    for (int i = 0; i < file->message_type_count(); ++i) {
      CollectEnums(file->message_type(i), &enums);
    }
  }
  return enums;
}

// "HardwareKind" -> "HARDWARE_KIND".
std::string UpperSnake(const std::string& camel) {
  std::string out;
  for (char c : camel) {
    if (std::isupper(static_cast<unsigned char>(c)) && !out.empty()) {
      out += '_';
    }
    out += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  }
  return out;
}

bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

TEST(ProtoWireRulesTest, ContractFilesAreFound) {
  std::set<std::string> names;
  for (const FileDescriptor* file : ContractFiles()) {
    names.insert(file->name());
  }
  EXPECT_TRUE(names.count("rdattn/v1/run_spec.proto"));
  EXPECT_TRUE(names.count("rdattn/v1/sweep.proto"));
  EXPECT_TRUE(names.count("rdattn/v1/coordinator.proto"));
  for (const FileDescriptor* file : ContractFiles()) {
    EXPECT_EQ(file->syntax(), FileDescriptor::SYNTAX_PROTO3) << file->name();
  }
}

TEST(ProtoWireRulesTest, EveryEnumStartsAtUnspecified) {
  const std::vector<const EnumDescriptor*> enums = ContractEnums();
  ASSERT_GE(enums.size(), 10u);  // guards the walk itself
  for (const EnumDescriptor* e : enums) {
    SCOPED_TRACE(e->full_name());
    ASSERT_GT(e->value_count(), 0);
    // value(0) is the first declared value; proto3 requires it to be number 0.
    EXPECT_EQ(e->value(0)->number(), 0);
    EXPECT_TRUE(EndsWith(e->value(0)->name(), "_UNSPECIFIED")) << e->value(0)->name();
    // Values carry their enum's name as a prefix (HARDWARE_KIND_CPU), so that top-level
    // enum values of the package cannot collide.
    const std::string prefix = UpperSnake(e->name()) + "_";
    for (int i = 0; i < e->value_count(); ++i) {
      EXPECT_EQ(e->value(i)->name().rfind(prefix, 0), 0u) << e->value(i)->name();
    }
  }
}

TEST(ProtoWireRulesTest, EveryRpcHasItsOwnRequestAndResponse) {
  const FileDescriptor* file = pb::SubmitSweepRequest::descriptor()->file();
  std::set<std::string> used_types;
  int methods = 0;
  for (const char* service_name : {"SweepService", "WorkerService"}) {
    const ServiceDescriptor* service = file->FindServiceByName(service_name);
    ASSERT_NE(service, nullptr) << service_name;
    for (int i = 0; i < service->method_count(); ++i) {
      const MethodDescriptor* method = service->method(i);
      SCOPED_TRACE(method->full_name());
      ++methods;
      const std::string in = method->input_type()->full_name();
      const std::string out = method->output_type()->full_name();
      EXPECT_NE(in, out);
      EXPECT_NE(in, "google.protobuf.Empty");
      EXPECT_NE(out, "google.protobuf.Empty");
      EXPECT_EQ(method->input_type()->file()->package(), kPackage);
      EXPECT_EQ(method->output_type()->file()->package(), kPackage);
      EXPECT_EQ(method->input_type()->name(), method->name() + "Request");
      EXPECT_EQ(method->output_type()->name(), method->name() + "Response");
      EXPECT_TRUE(used_types.insert(in).second) << in << " used by two RPCs";
      EXPECT_TRUE(used_types.insert(out).second) << out << " used by two RPCs";
    }
  }
  EXPECT_EQ(methods, 11);
}

TEST(ProtoWireRulesTest, ServicesHaveTheContractedMethods) {
  const FileDescriptor* file = pb::SubmitSweepRequest::descriptor()->file();
  struct Expected {
    const char* service;
    const char* method;
    bool client_streaming;
    bool server_streaming;
  };
  const Expected expected[] = {
      {"SweepService", "SubmitSweep", false, false},
      {"SweepService", "GetSweep", false, false},
      {"SweepService", "ListSweeps", false, false},
      {"SweepService", "WatchSweep", false, true},
      {"SweepService", "CancelSweep", false, false},
      {"SweepService", "GetReport", false, false},
      {"WorkerService", "RegisterWorker", false, false},
      {"WorkerService", "LeaseJob", false, false},
      {"WorkerService", "Heartbeat", false, false},
      {"WorkerService", "ReportProgress", true, false},
      {"WorkerService", "CompleteJob", false, false},
  };
  for (const Expected& e : expected) {
    const ServiceDescriptor* service = file->FindServiceByName(e.service);
    ASSERT_NE(service, nullptr) << e.service;
    const MethodDescriptor* method = service->FindMethodByName(e.method);
    ASSERT_NE(method, nullptr) << e.service << "." << e.method;
    EXPECT_EQ(method->client_streaming(), e.client_streaming) << e.method;
    EXPECT_EQ(method->server_streaming(), e.server_streaming) << e.method;
  }
}

TEST(ProtoWireRulesTest, NoFieldIsEmpty) {
  for (const FileDescriptor* file : ContractFiles()) {
    std::deque<const Descriptor*> messages;
    for (int i = 0; i < file->message_type_count(); ++i) {
      messages.push_back(file->message_type(i));
    }
    while (!messages.empty()) {
      const Descriptor* message = messages.front();
      messages.pop_front();
      for (int i = 0; i < message->nested_type_count(); ++i) {
        messages.push_back(message->nested_type(i));
      }
      for (int i = 0; i < message->field_count(); ++i) {
        const auto* field = message->field(i);
        if (field->message_type() != nullptr) {
          EXPECT_NE(field->message_type()->full_name(), "google.protobuf.Empty")
              << field->full_name();
        }
      }
    }
  }
}

// --- generated gRPC code ------------------------------------------------------------------

TEST(ProtoGrpcTest, GeneratedServicesDefaultToUnimplemented) {
  pb::SweepService::Service sweep_service;
  pb::GetSweepRequest request;
  pb::GetSweepResponse response;
  EXPECT_EQ(sweep_service.GetSweep(nullptr, &request, &response).error_code(),
            grpc::StatusCode::UNIMPLEMENTED);
  pb::WorkerService::Service worker_service;
  pb::LeaseJobRequest lease_request;
  pb::LeaseJobResponse lease_response;
  EXPECT_EQ(worker_service.LeaseJob(nullptr, &lease_request, &lease_response).error_code(),
            grpc::StatusCode::UNIMPLEMENTED);
}

}  // namespace
}  // namespace rdattn
