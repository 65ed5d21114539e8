// EventRelay against an in-process fake coordinator: events in order, partial lines held back,
// broken streams reopened without losing or repeating events within a stream; and the parsing
// of one events.jsonl line.
#include "worker/daemon/event_relay.h"

#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <fstream>
#include <mutex>
#include <string>
#include <vector>

#include "tests/worker/fake_coordinator.h"

namespace rdattn::worker {
namespace {

using std::chrono::milliseconds;
using testing::FakeCoordinator;

std::string TempDir() {
  std::string dir = ::testing::TempDir() + "/relay_XXXXXX";
  EXPECT_NE(::mkdtemp(dir.data()), nullptr);
  return dir;
}

void Append(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::app);
  out << text;
}

std::string Line(int seq, const std::string& kind) {
  return "{\"seq\":" + std::to_string(seq) + ",\"kind\":\"" + kind +
         "\",\"step\":" + std::to_string(seq * 10) + ",\"tokens\":\"" + std::to_string(seq * 4096) +
         "\",\"wall_time\":\"2025-01-02T03:04:05.5Z\"}\n";
}

EventRelay::Options RelayOptions(const std::string& path) {
  EventRelay::Options o;
  o.events_path = path;
  o.lease_id = "lease-1";
  o.job_id = "sw/S/s1/rd";
  o.run_id = "sw/S/s1/rd";
  o.attempt = 2;
  o.poll_interval = milliseconds(20);
  o.stream_idle_close = milliseconds(100);
  o.max_backoff = milliseconds(200);
  return o;
}

CoordinatorClient Client(const FakeCoordinator& fake, const std::string& token = "test-token") {
  return CoordinatorClient(grpc::CreateChannel(fake.address(), grpc::InsecureChannelCredentials()),
                           token);
}

TEST(ParseEventLineTest, ParsesTheTrainersJson) {
  auto e = ParseEventLine(
      "{\"seq\":3,\"kind\":\"KIND_EVAL\",\"job_id\":\"j\",\"attempt\":1,\"step\":7,\"tokens\":"
      "28672,"
      "\"val_nll\":\"NaN\",\"js_nats\":[0.1,0.2],\"wall_time\":\"2025-01-02T03:04:05Z\",\"future_"
      "field\":1}");
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  EXPECT_EQ(e->seq(), 3u);
  EXPECT_EQ(e->kind(), rdattn::v1::MetricEvent::KIND_EVAL);
  EXPECT_EQ(e->tokens(), 28672);
  EXPECT_TRUE(std::isnan(e->val_nll()));
  EXPECT_EQ(e->js_nats_size(), 2);
  EXPECT_EQ(e->wall_time().seconds(), 1735787045);
}

TEST(ParseEventLineTest, RejectsBadLines) {
  EXPECT_EQ(ParseEventLine("{\"seq\":").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseEventLine("{\"seq\":\"abc\"}").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseEventLine("[1]").status().code(), StatusCode::kInvalidArgument);
}

TEST(ParseEventLineTest, NewerKindsAndFieldsAreTolerated) {
  // An older worker relays a newer trainer's events: unknown fields and enum values are skipped.
  auto e = ParseEventLine("{\"seq\":4,\"kind\":\"KIND_FROM_THE_FUTURE\",\"new_field\":{\"a\":1}}");
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  EXPECT_EQ(e->seq(), 4u);
  EXPECT_EQ(e->kind(), rdattn::v1::MetricEvent::KIND_UNSPECIFIED);
}

TEST(EventRelayTest, RelaysInOrderAndHoldsPartialLines) {
  FakeCoordinator fake({});
  CoordinatorClient client = Client(fake);
  const std::string path = TempDir() + "/events.jsonl";
  EventRelay relay(RelayOptions(path), &client);
  relay.Start();
  Append(path, Line(1, "KIND_INIT") + Line(2, "KIND_TRAIN_STEP"));
  const std::string third = Line(3, "KIND_TRAIN_STEP");
  Append(path, third.substr(0, 20));  // a partial line: not sent yet
  ASSERT_TRUE(fake.WaitForStored(2, milliseconds(5000)));
  EXPECT_EQ(relay.progress().last_seq, 2u);
  Append(path, third.substr(20) + Line(4, "KIND_FINISHED").substr(0, 30));
  ASSERT_TRUE(fake.WaitForStored(3, milliseconds(5000)));
  Append(path, Line(4, "KIND_FINISHED").substr(30));
  ASSERT_TRUE(relay.Drain(std::chrono::steady_clock::now() + milliseconds(5000)).ok());

  const auto events = fake.stored_events();
  ASSERT_EQ(events.size(), 4u);
  for (size_t i = 0; i < events.size(); ++i) {
    EXPECT_EQ(events[i].seq(), i + 1);
    EXPECT_EQ(events[i].job_id(), "sw/S/s1/rd");  // filled in by the relay
    EXPECT_EQ(events[i].attempt(), 2);
  }
  EXPECT_EQ(events[3].kind(), rdattn::v1::MetricEvent::KIND_FINISHED);
  for (const auto& seqs : fake.stream_seqs()) {
    for (size_t i = 1; i < seqs.size(); ++i)
      EXPECT_LT(seqs[i - 1], seqs[i]) << "duplicate within a stream";
  }
  for (const auto& lease : fake.stream_leases()) EXPECT_EQ(lease, "lease-1");
  const RelayProgress p = relay.progress();
  EXPECT_EQ(p.last_seq, 4u);
  EXPECT_EQ(p.acked_seq, 4u);
  EXPECT_EQ(p.step, 40);
  EXPECT_EQ(p.tokens, 4 * 4096);
  EXPECT_TRUE(p.finished);
}

TEST(EventRelayTest, ReopensBrokenStreamsAndResendsTheRest) {
  FakeCoordinator::Config config;
  config.fail_streams = 2;  // the first two streams break after one event
  FakeCoordinator fake(config);
  CoordinatorClient client = Client(fake);
  const std::string path = TempDir() + "/events.jsonl";
  for (int seq = 1; seq <= 6; ++seq)
    Append(path, Line(seq, seq == 6 ? "KIND_FINISHED" : "KIND_TRAIN_STEP"));
  EventRelay relay(RelayOptions(path), &client);
  relay.Start();
  ASSERT_TRUE(relay.Drain(std::chrono::steady_clock::now() + milliseconds(10000)).ok());
  const auto events = fake.stored_events();
  ASSERT_EQ(events.size(), 6u);
  for (size_t i = 0; i < events.size(); ++i) EXPECT_EQ(events[i].seq(), i + 1);
  const auto streams = fake.stream_seqs();
  ASSERT_GE(streams.size(), 3u);
  for (const auto& seqs : streams) {
    for (size_t i = 1; i < seqs.size(); ++i) EXPECT_LT(seqs[i - 1], seqs[i]);
  }
}

TEST(EventRelayTest, SkipsBadLinesAndOldSeqs) {
  FakeCoordinator fake({});
  CoordinatorClient client = Client(fake);
  const std::string path = TempDir() + "/events.jsonl";
  Append(path,
         Line(1, "KIND_INIT") + "not json\n" + Line(1, "KIND_INIT") + Line(2, "KIND_FINISHED"));
  // The metrics hooks see each accepted event once, ids filled in, and each bad line.
  std::mutex mu;
  std::vector<rdattn::v1::MetricEvent> seen;
  int parse_errors = 0;
  EventRelay::Options options = RelayOptions(path);
  options.on_event = [&](const rdattn::v1::MetricEvent& e) {
    std::lock_guard<std::mutex> lock(mu);
    seen.push_back(e);
  };
  options.on_parse_error = [&] {
    std::lock_guard<std::mutex> lock(mu);
    ++parse_errors;
  };
  EventRelay relay(options, &client);
  relay.Start();
  ASSERT_TRUE(relay.Drain(std::chrono::steady_clock::now() + milliseconds(5000)).ok());
  EXPECT_EQ(fake.stored_events().size(), 2u);
  EXPECT_EQ(relay.progress().bad_lines, 1);
  std::lock_guard<std::mutex> lock(mu);
  EXPECT_EQ(parse_errors, 1);
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen[0].kind(), rdattn::v1::MetricEvent::KIND_INIT);
  EXPECT_EQ(seen[1].kind(), rdattn::v1::MetricEvent::KIND_FINISHED);
  EXPECT_EQ(seen[1].job_id(), "sw/S/s1/rd");
}

TEST(EventRelayTest, DrainGivesUpWhenTheCoordinatorRefuses) {
  FakeCoordinator fake({});
  CoordinatorClient client = Client(fake, "wrong-token");  // every stream: UNAUTHENTICATED
  const std::string path = TempDir() + "/events.jsonl";
  Append(path, Line(1, "KIND_INIT"));
  EventRelay relay(RelayOptions(path), &client);
  relay.Start();
  const auto start = std::chrono::steady_clock::now();
  const Status drained = relay.Drain(start + milliseconds(500));
  EXPECT_EQ(drained.code(), StatusCode::kDeadlineExceeded) << drained.ToString();
  EXPECT_LT(std::chrono::steady_clock::now() - start, milliseconds(4000));
  EXPECT_EQ(relay.progress().last_seq, 1u);
  EXPECT_EQ(relay.progress().acked_seq, 0u);
}

}  // namespace
}  // namespace rdattn::worker
