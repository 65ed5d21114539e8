// Store round trip: write sweeps, jobs, attempts, events and workers, reopen the file, read back
// equal. WAL mode, idempotent metric events, paging, schema version.
#include "coordinator/store.h"

#include <google/protobuf/util/message_differencer.h>
#include <gtest/gtest.h>
#include <sqlite3.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>

#include "tests/coordinator/test_util.h"

namespace rdattn::coordinator {
namespace {

using google::protobuf::util::MessageDifferencer;

SweepRow MakeSweep(const std::string& id, const std::string& owner) {
  SweepRow s;
  s.id = id;
  s.request_id = "req-" + id;
  s.owner = owner;
  s.spec.set_name("sweep " + id);
  s.spec.set_owner(owner);
  s.spec.add_arms("block");
  s.spec.add_arms("rd");
  s.spec.add_seeds(1);
  s.spec.set_priority(3);
  s.state = SweepState::kPending;
  s.max_attempts = 2;
  s.create_us = 1'000'000;
  s.update_us = 1'000'001;
  return s;
}

JobRow MakeJob(const std::string& sweep, const std::string& arm) {
  JobRow j;
  j.id = sweep + "/S/s1/" + arm;
  j.sweep_id = sweep;
  j.pair_group = sweep + "/S/s1";
  j.spec.set_job_id(j.id);
  j.spec.set_sweep_id(sweep);
  j.spec.set_pair_group(j.pair_group);
  j.spec.set_scale("S");
  j.spec.set_arm(arm);
  j.spec.set_seed(1);
  j.spec.mutable_run()->set_init_seed(1);
  j.spec.mutable_run()->mutable_parallel()->set_world_size(2);
  j.max_attempts = 2;
  j.priority = 3;
  j.world_size = 2;
  j.preferred_kind = HardwareKind::kGpu;
  j.create_us = 1'000'000;
  j.update_us = 1'000'000;
  return j;
}

void ExpectJobsEqual(const JobRow& a, const JobRow& b) {
  EXPECT_EQ(a.seq, b.seq);
  EXPECT_EQ(a.id, b.id);
  EXPECT_EQ(a.sweep_id, b.sweep_id);
  EXPECT_EQ(a.pair_group, b.pair_group);
  EXPECT_TRUE(MessageDifferencer::Equals(a.spec, b.spec));
  EXPECT_EQ(a.state, b.state);
  EXPECT_EQ(a.attempts, b.attempts);
  EXPECT_EQ(a.preemptions, b.preemptions);
  EXPECT_EQ(a.max_attempts, b.max_attempts);
  EXPECT_EQ(a.priority, b.priority);
  EXPECT_EQ(a.world_size, b.world_size);
  EXPECT_EQ(a.preferred_kind, b.preferred_kind);
  EXPECT_EQ(a.cancel_requested, b.cancel_requested);
  EXPECT_EQ(a.worker_id, b.worker_id);
  EXPECT_EQ(a.worker_kind, b.worker_kind);
  EXPECT_EQ(a.lease_id, b.lease_id);
  EXPECT_EQ(a.lease_expiry_us, b.lease_expiry_us);
  EXPECT_EQ(a.step, b.step);
  EXPECT_EQ(a.tokens, b.tokens);
  EXPECT_EQ(a.last_train_loss, b.last_train_loss);
  EXPECT_EQ(a.last_val_nll, b.last_val_nll);
  EXPECT_EQ(a.tokens_per_second, b.tokens_per_second);
  EXPECT_EQ(a.init_checksum, b.init_checksum);
  EXPECT_EQ(a.last_checkpoint, b.last_checkpoint);
  EXPECT_EQ(a.failure_reason, b.failure_reason);
  EXPECT_EQ(a.create_us, b.create_us);
  EXPECT_EQ(a.start_us, b.start_us);
  EXPECT_EQ(a.end_us, b.end_us);
  EXPECT_EQ(a.update_us, b.update_us);
}

EventRow Metric(const std::string& sweep, const std::string& job, int attempt, uint64_t seq,
                double loss) {
  EventRow e;
  e.sweep_id = sweep;
  e.job_id = job;
  e.kind = EventKind::kMetric;
  e.attempt = attempt;
  e.metric_seq = static_cast<int64_t>(seq);
  e.metric_kind = pb::MetricEvent::KIND_TRAIN_STEP;
  e.time_us = 2'000'000 + static_cast<int64_t>(seq);
  pb::MetricEvent* m = e.event.mutable_metric_event();
  m->set_seq(seq);
  m->set_job_id(job);
  m->set_attempt(attempt);
  m->set_kind(pb::MetricEvent::KIND_TRAIN_STEP);
  m->set_train_loss(loss);
  return e;
}

TEST(StoreTest, RoundTripAcrossReopen) {
  testing::TempDir dir;
  const std::string path = dir.File("coord.db");
  SweepRow sweep = MakeSweep("sw-00000001", "alice");
  JobRow block = MakeJob(sweep.id, "block");
  JobRow rd = MakeJob(sweep.id, "rd");
  AttemptRow attempt;
  std::vector<EventRow> events;
  WorkerRow worker;
  {
    StatusOr<std::unique_ptr<Store>> opened = Store::Open(path);
    ASSERT_TRUE(opened.ok()) << opened.status().ToString();
    Store& store = **opened;
    StatusOr<std::string> mode = store.JournalMode();
    ASSERT_TRUE(mode.ok());
    EXPECT_EQ(*mode, "wal");
    ASSERT_TRUE(store
                    .Transaction([&]() -> Status {
                      RDATTN_RETURN_IF_ERROR(store.InsertSweep(sweep));
                      RDATTN_RETURN_IF_ERROR(store.InsertJob(block));
                      return store.InsertJob(rd);
                    })
                    .ok());
    EXPECT_GT(sweep.seq, 0);
    EXPECT_GT(rd.seq, block.seq);

    // Lease rd and record progress on it.
    rd.state = JobState::kRunning;
    rd.attempts = 1;
    rd.worker_id = "wk-1";
    rd.worker_kind = HardwareKind::kGpu;
    rd.lease_id = "ls-abc";
    rd.lease_expiry_us = 9'000'000;
    rd.step = 12;
    rd.tokens = 12 * 512;
    rd.last_train_loss = 3.25;
    rd.last_val_nll = 3.5;
    rd.tokens_per_second = 1234.5;
    rd.init_checksum = "fnv1a:0123";
    rd.last_checkpoint = "/ckpt/rd/step12.pt";
    rd.start_us = 1'500'000;
    rd.update_us = 1'600'000;
    ASSERT_TRUE(store.UpdateJob(rd).ok());
    attempt.job_id = rd.id;
    attempt.attempt = 1;
    attempt.lease_id = rd.lease_id;
    attempt.worker_id = "wk-1";
    attempt.worker_kind = HardwareKind::kGpu;
    attempt.lease_us = 1'400'000;
    attempt.start_us = 1'500'000;
    ASSERT_TRUE(store.InsertAttempt(attempt).ok());
    attempt.end_us = 1'700'000;
    attempt.outcome = "FAILED";
    attempt.exit_code = 3;
    attempt.stderr_tail = "boom\n";
    ASSERT_TRUE(store.UpdateAttempt(attempt).ok());

    sweep.state = SweepState::kRunning;
    sweep.update_us = 1'500'000;
    ASSERT_TRUE(store.UpdateSweep(sweep).ok());

    EventRow change;
    change.sweep_id = sweep.id;
    change.job_id = rd.id;
    change.kind = EventKind::kJobStateChange;
    change.time_us = 1'500'000;
    change.event.mutable_job_state_change()->set_job_id(rd.id);
    change.event.mutable_job_state_change()->set_to_state(pb::JOB_STATE_RUNNING);
    events.push_back(change);
    events.push_back(Metric(sweep.id, rd.id, 1, 1, 4.0));
    events.push_back(Metric(sweep.id, rd.id, 1, 2, 3.5));
    for (EventRow& e : events) {
      StatusOr<bool> stored = store.AppendEvent(e);
      ASSERT_TRUE(stored.ok()) << stored.status().ToString();
      EXPECT_TRUE(*stored);
      EXPECT_EQ(e.event.seq(), static_cast<uint64_t>(e.seq));
    }
    // The same (job, attempt, seq) again is not stored twice.
    EventRow dup = Metric(sweep.id, rd.id, 1, 2, 99.0);
    StatusOr<bool> again = store.AppendEvent(dup);
    ASSERT_TRUE(again.ok());
    EXPECT_FALSE(*again);
    // ... but the same seq of another attempt is.
    EventRow next_attempt = Metric(sweep.id, rd.id, 2, 2, 3.0);
    ASSERT_TRUE(*store.AppendEvent(next_attempt));
    events.push_back(next_attempt);

    worker.id = "wk-1";
    worker.hostname = "node-7";
    worker.kind = HardwareKind::kGpu;
    worker.slots = 8;
    worker.free_slots = 6;
    worker.registration.set_device_name("NVIDIA H200");
    (*worker.registration.mutable_labels())["zone"] = "a";
    worker.registered_us = 1'000'000;
    worker.last_seen_us = 1'800'000;
    ASSERT_TRUE(store.UpsertWorker(worker).ok());
  }

  // Reopen and read everything back.
  StatusOr<std::unique_ptr<Store>> reopened = Store::Open(path);
  ASSERT_TRUE(reopened.ok()) << reopened.status().ToString();
  Store& store = **reopened;
  EXPECT_EQ(*store.JournalMode(), "wal");

  StatusOr<SweepRow> s = store.GetSweep(sweep.id);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->seq, sweep.seq);
  EXPECT_EQ(s->request_id, sweep.request_id);
  EXPECT_EQ(s->owner, "alice");
  EXPECT_EQ(s->state, SweepState::kRunning);
  EXPECT_EQ(s->max_attempts, 2);
  EXPECT_EQ(s->update_us, 1'500'000);
  EXPECT_TRUE(MessageDifferencer::Equals(s->spec, sweep.spec));
  StatusOr<std::optional<SweepRow>> by_req = store.FindSweepByRequestId(sweep.request_id);
  ASSERT_TRUE(by_req.ok() && by_req->has_value());
  EXPECT_EQ((*by_req)->id, sweep.id);

  StatusOr<std::vector<JobRow>> jobs = store.ListJobs(sweep.id);
  ASSERT_TRUE(jobs.ok());
  ASSERT_EQ(jobs->size(), 2u);
  ExpectJobsEqual((*jobs)[0], block);
  ExpectJobsEqual((*jobs)[1], rd);
  StatusOr<std::optional<JobRow>> by_lease = store.FindJobByLease("ls-abc");
  ASSERT_TRUE(by_lease.ok() && by_lease->has_value());
  EXPECT_EQ((*by_lease)->id, rd.id);

  StatusOr<AttemptRow> a = store.GetAttempt(rd.id, 1);
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->outcome, "FAILED");
  EXPECT_EQ(a->exit_code, 3);
  EXPECT_EQ(a->stderr_tail, "boom\n");
  EXPECT_EQ(a->worker_kind, HardwareKind::kGpu);
  EXPECT_EQ(a->end_us, 1'700'000);

  StatusOr<std::vector<EventRow>> read = store.ReadEvents(sweep.id, 0, 100);
  ASSERT_TRUE(read.ok());
  ASSERT_EQ(read->size(), events.size());
  for (size_t i = 0; i < events.size(); ++i) {
    EXPECT_EQ((*read)[i].seq, events[i].seq);
    EXPECT_TRUE(MessageDifferencer::Equals((*read)[i].event, events[i].event))
        << (*read)[i].event.DebugString() << " vs " << events[i].event.DebugString();
  }
  EXPECT_EQ((*read)[2].event.metric_event().train_loss(), 3.5);  // the duplicate did not overwrite
  StatusOr<std::vector<EventRow>> after = store.ReadEvents(sweep.id, events[1].seq, 100);
  ASSERT_TRUE(after.ok());
  EXPECT_EQ(after->size(), events.size() - 2);
  EXPECT_EQ(*store.MaxMetricSeq(rd.id, 1), 2);
  EXPECT_EQ(*store.LastSweepEventSeq(sweep.id), events.back().seq);
  EXPECT_EQ(*store.LastEventSeq(), events.back().seq);

  StatusOr<std::optional<WorkerRow>> w = store.GetWorker("wk-1");
  ASSERT_TRUE(w.ok() && w->has_value());
  EXPECT_EQ((*w)->hostname, "node-7");
  EXPECT_EQ((*w)->free_slots, 6);
  EXPECT_TRUE(MessageDifferencer::Equals((*w)->registration, worker.registration));
  // What the scheduler's liveness is rebuilt from.
  EXPECT_EQ((*w)->kind, HardwareKind::kGpu);
  EXPECT_EQ((*w)->last_seen_us, 1'800'000);

  StatusOr<SweepFacts> facts = store.GetSweepFacts(sweep.id);
  ASSERT_TRUE(facts.ok());
  EXPECT_EQ(facts->total, 2);
  EXPECT_EQ(facts->pending, 1);
  EXPECT_EQ(facts->running, 1);
  EXPECT_TRUE(facts->any_started);

  StatusOr<std::vector<PendingJob>> pending = store.ListPending();
  ASSERT_TRUE(pending.ok());
  ASSERT_EQ(pending->size(), 1u);
  EXPECT_EQ((*pending)[0].job_id, block.id);
  EXPECT_EQ((*pending)[0].world_size, 2);
  EXPECT_EQ((*pending)[0].preferred_kind, HardwareKind::kGpu);
  StatusOr<std::map<std::string, std::set<HardwareKind>>> kinds = store.ActiveGroupKinds();
  ASSERT_TRUE(kinds.ok());
  EXPECT_EQ((*kinds)[block.pair_group], std::set<HardwareKind>{HardwareKind::kGpu});

  StatusOr<std::vector<JobRow>> expired = store.ListExpiredLeases(9'000'001);
  ASSERT_TRUE(expired.ok());
  ASSERT_EQ(expired->size(), 1u);
  EXPECT_EQ((*expired)[0].id, rd.id);
  EXPECT_TRUE(store.ListExpiredLeases(9'000'000)->empty());
}

TEST(StoreTest, NotFoundAndDuplicates) {
  testing::TempDir dir;
  StatusOr<std::unique_ptr<Store>> opened = Store::Open(dir.File("c.db"));
  ASSERT_TRUE(opened.ok());
  Store& store = **opened;
  EXPECT_EQ(store.GetSweep("sw-missing").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(store.GetJob("nope").status().code(), StatusCode::kNotFound);
  EXPECT_FALSE(store.FindJobByLease("")->has_value());
  SweepRow a = MakeSweep("sw-a", "alice");
  ASSERT_TRUE(store.InsertSweep(a).ok());
  SweepRow same_request = MakeSweep("sw-b", "bob");
  same_request.request_id = a.request_id;
  EXPECT_EQ(store.InsertSweep(same_request).code(), StatusCode::kAlreadyExists);
}

TEST(StoreTest, TransactionRollsBackOnError) {
  testing::TempDir dir;
  StatusOr<std::unique_ptr<Store>> opened = Store::Open(dir.File("c.db"));
  ASSERT_TRUE(opened.ok());
  Store& store = **opened;
  SweepRow s = MakeSweep("sw-r", "alice");
  Status st = store.Transaction([&]() -> Status {
    RDATTN_RETURN_IF_ERROR(store.InsertSweep(s));
    return InvalidArgumentError("changed my mind");
  });
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(store.GetSweep("sw-r").status().code(), StatusCode::kNotFound);
}

TEST(StoreTest, ListSweepsNewestFirstFilteredAndPaged) {
  testing::TempDir dir;
  StatusOr<std::unique_ptr<Store>> opened = Store::Open(dir.File("c.db"));
  ASSERT_TRUE(opened.ok());
  Store& store = **opened;
  for (int i = 0; i < 5; ++i) {
    SweepRow s = MakeSweep("sw-" + std::to_string(i), i % 2 == 0 ? "alice" : "bob");
    if (i == 3) s.state = SweepState::kSucceeded;
    ASSERT_TRUE(store.InsertSweep(s).ok());
  }
  SweepFilter all;
  StatusOr<std::vector<SweepRow>> rows = store.ListSweeps(all);
  ASSERT_TRUE(rows.ok());
  ASSERT_EQ(rows->size(), 5u);
  EXPECT_EQ((*rows)[0].id, "sw-4");
  EXPECT_EQ((*rows)[4].id, "sw-0");

  SweepFilter alice;
  alice.owner = "alice";
  EXPECT_EQ(store.ListSweeps(alice)->size(), 3u);

  SweepFilter done;
  done.states = {SweepState::kSucceeded, SweepState::kFailed};
  rows = store.ListSweeps(done);
  ASSERT_EQ(rows->size(), 1u);
  EXPECT_EQ((*rows)[0].id, "sw-3");

  SweepFilter page;
  page.limit = 2;
  rows = store.ListSweeps(page);
  ASSERT_EQ(rows->size(), 2u);
  page.before_seq = rows->back().seq;
  rows = store.ListSweeps(page);
  ASSERT_EQ(rows->size(), 2u);
  EXPECT_EQ((*rows)[0].id, "sw-2");
}

TEST(StoreTest, RefusesANewerSchema) {
  testing::TempDir dir;
  const std::string path = dir.File("c.db");
  { ASSERT_TRUE(Store::Open(path).ok()); }
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(db, "PRAGMA user_version = 99", nullptr, nullptr, nullptr), SQLITE_OK);
  sqlite3_close(db);
  StatusOr<std::unique_ptr<Store>> opened = Store::Open(path);
  EXPECT_EQ(opened.status().code(), StatusCode::kFailedPrecondition);
}

// --- issue 24: verified results, epochs, WAL check, one coordinator per store ----------------

std::unique_ptr<Store> OpenOk(const std::string& path, const StoreOptions& o = {}) {
  StatusOr<std::unique_ptr<Store>> s = Store::Open(path, o);
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  return s.ok() ? std::move(s).value() : nullptr;
}

// Runs `sql` on the file with a plain SQLite connection (what a bit flip on disk or a careless
// hand edit does: SQLite's own checks see nothing wrong).
void RawExec(const std::string& path, const std::string& sql) {
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  char* err = nullptr;
  EXPECT_EQ(sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &err), SQLITE_OK)
      << (err ? err : "") << " in " << sql;
  sqlite3_free(err);
  sqlite3_close(db);
}

// The value with its lowest mantissa bit flipped, as SQL text that keeps every digit.
std::string FlippedSql(double v) {
  uint64_t bits;
  std::memcpy(&bits, &v, sizeof bits);
  bits ^= 1;
  double out;
  std::memcpy(&out, &bits, sizeof out);
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.17g", out);
  return buf;
}

// A store holding sweep sw-1 with job sw-1/S/s1/rd at val NLL 3.2407233715057373, and its EVAL
// event; closed.
void WriteResult(const std::string& path) {
  std::unique_ptr<Store> store = OpenOk(path);
  SweepRow sweep = MakeSweep("sw-1", "alice");
  ASSERT_TRUE(store->InsertSweep(sweep).ok());
  JobRow job = MakeJob("sw-1", "rd");
  job.last_val_nll = 3.2407233715057373;
  job.last_train_loss = 2.5;
  job.tokens_per_second = -0.0;  // stored as the integer 0
  ASSERT_TRUE(store->InsertJob(job).ok());
  EventRow e;
  e.sweep_id = "sw-1";
  e.job_id = job.id;
  e.kind = EventKind::kMetric;
  e.attempt = 1;
  e.metric_seq = 7;
  e.metric_kind = pb::MetricEvent::KIND_EVAL;
  e.time_us = 5;
  e.event.mutable_metric_event()->set_kind(pb::MetricEvent::KIND_EVAL);
  e.event.mutable_metric_event()->set_val_nll(3.2407233715057373);
  ASSERT_TRUE(*store->AppendEvent(e));
}

TEST(StoreTest, ResultsReadBackThroughTheirChecksums) {
  testing::TempDir dir;
  const std::string path = dir.File("c.db");
  WriteResult(path);
  std::unique_ptr<Store> store = OpenOk(path);
  StatusOr<std::vector<JobRow>> jobs = store->ListJobs("sw-1");
  ASSERT_TRUE(jobs.ok()) << jobs.status().ToString();
  EXPECT_EQ((*jobs)[0].last_val_nll, 3.2407233715057373);
  StatusOr<std::vector<EventRow>> events =
      store->ReadMetricEvents("sw-1", pb::MetricEvent::KIND_EVAL);
  ASSERT_TRUE(events.ok()) << events.status().ToString();
  EXPECT_EQ((*events)[0].event.metric_event().val_nll(), 3.2407233715057373);
  StatusOr<std::vector<PendingJob>> pending = store->ListPending();
  ASSERT_TRUE(pending.ok());
  EXPECT_EQ(pending->size(), 1u);
  EXPECT_EQ(store->checksum_failures(), 0);
}

TEST(StoreTest, AFlippedValNllIsDataLossNamingJobAndFieldNeverTheNumber) {
  testing::TempDir dir;
  const std::string path = dir.File("c.db");
  WriteResult(path);
  RawExec(path, "UPDATE jobs SET last_val_nll = " + FlippedSql(3.2407233715057373));
  std::unique_ptr<Store> store = OpenOk(path);
  for (StatusOr<std::vector<JobRow>> got :
       {store->ListJobs("sw-1"),
        StatusOr<std::vector<JobRow>>(store->GetJob("sw-1/S/s1/rd").status())}) {
    ASSERT_EQ(got.status().code(), StatusCode::kDataLoss);
    const std::string msg(got.status().message());
    EXPECT_NE(msg.find("sweep sw-1"), std::string::npos) << msg;
    EXPECT_NE(msg.find("job sw-1/S/s1/rd"), std::string::npos) << msg;
    EXPECT_NE(msg.find("last_val_nll"), std::string::npos) << msg;
    EXPECT_EQ(msg.find("3.24"), std::string::npos) << msg;
  }
  // The metrics leave the damaged job out and count it.
  const int64_t before = store->checksum_failures();
  EXPECT_GE(before, 2);
  StatusOr<std::map<JobState, int64_t>> counts = store->CountJobsByState();
  ASSERT_TRUE(counts.ok());
  EXPECT_TRUE(counts->empty());
  EXPECT_EQ(store->checksum_failures(), before + 1);
  StatusOr<std::map<std::string, std::map<JobState, int64_t>>> sweep_jobs =
      store->CountSweepJobs(0);
  ASSERT_TRUE(sweep_jobs.ok());
  EXPECT_TRUE((*sweep_jobs)["sw-1"].empty());
  // The scheduler never sees it (it would fail every LeaseJob), and the look is counted.
  const int64_t scheduled = store->checksum_failures();
  StatusOr<std::vector<PendingJob>> pending = store->ListPending();
  ASSERT_TRUE(pending.ok());
  EXPECT_TRUE(pending->empty());
  EXPECT_EQ(store->checksum_failures(), scheduled + 1);
}

TEST(StoreTest, AFlippedBitInAnEventBlobIsDataLoss) {
  testing::TempDir dir;
  const std::string path = dir.File("c.db");
  WriteResult(path);
  // Flip the lowest bit of the val NLL's 8 bytes inside the stored blob.
  {
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
    sqlite3_stmt* st = nullptr;
    ASSERT_EQ(sqlite3_prepare_v2(db, "SELECT seq, blob FROM events", -1, &st, nullptr), SQLITE_OK);
    ASSERT_EQ(sqlite3_step(st), SQLITE_ROW);
    const int64_t seq = sqlite3_column_int64(st, 0);
    std::string blob(static_cast<const char*>(sqlite3_column_blob(st, 1)),
                     sqlite3_column_bytes(st, 1));
    sqlite3_finalize(st);
    const double v = 3.2407233715057373;
    const size_t at = blob.find(std::string(reinterpret_cast<const char*>(&v), 8));
    ASSERT_NE(at, std::string::npos);
    blob[at] ^= 1;
    ASSERT_EQ(
        sqlite3_prepare_v2(db, "UPDATE events SET blob = ?1 WHERE seq = ?2", -1, &st, nullptr),
        SQLITE_OK);
    sqlite3_bind_blob(st, 1, blob.data(), static_cast<int>(blob.size()), SQLITE_TRANSIENT);
    sqlite3_bind_int64(st, 2, seq);
    ASSERT_EQ(sqlite3_step(st), SQLITE_DONE);
    sqlite3_finalize(st);
    sqlite3_close(db);
  }
  std::unique_ptr<Store> store = OpenOk(path);
  for (const Status& st :
       {store->ReadMetricEvents("sw-1", pb::MetricEvent::KIND_EVAL).status(),
        store->ReadEvents("sw-1", 0, 10).status(),
        store->ReadJobMetricEvents("sw-1/S/s1/rd", pb::MetricEvent::KIND_EVAL).status()}) {
    ASSERT_EQ(st.code(), StatusCode::kDataLoss);
    const std::string msg(st.message());
    EXPECT_NE(msg.find("job sw-1/S/s1/rd"), std::string::npos) << msg;
    EXPECT_NE(msg.find("val_nll"), std::string::npos) << msg;
    EXPECT_EQ(msg.find("3.24"), std::string::npos) << msg;
  }
  EXPECT_EQ(store->checksum_failures(), 3);
}

TEST(StoreTest, Version1FilesGetChecksumsAtMigration) {
  testing::TempDir dir;
  const std::string path = dir.File("c.db");
  WriteResult(path);
  // Back to what a version 1 file has: no checksum columns, no meta table, and none of the
  // other columns that version 2 adds.
  std::vector<std::pair<std::string, std::string>> added;
  {
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
    const std::set<std::string> v1_jobs = {"seq",
                                           "id",
                                           "sweep_id",
                                           "pair_group",
                                           "scale",
                                           "arm",
                                           "seed",
                                           "spec",
                                           "state",
                                           "attempts",
                                           "preemptions",
                                           "max_attempts",
                                           "priority",
                                           "world_size",
                                           "hardware_pref",
                                           "cancel_requested",
                                           "worker_id",
                                           "worker_kind",
                                           "lease_id",
                                           "lease_expiry_us",
                                           "step",
                                           "tokens",
                                           "last_train_loss",
                                           "last_val_nll",
                                           "tokens_per_second",
                                           "init_checksum",
                                           "last_checkpoint",
                                           "failure_reason",
                                           "create_us",
                                           "start_us",
                                           "end_us",
                                           "update_us"};
    const std::set<std::string> v1_events = {"seq",         "sweep_id", "job_id",
                                             "kind",        "attempt",  "metric_seq",
                                             "metric_kind", "time_us",  "blob"};
    for (const auto& [table, keep] :
         {std::pair<std::string, std::set<std::string>>{"jobs", v1_jobs}, {"events", v1_events}}) {
      sqlite3_stmt* st = nullptr;
      ASSERT_EQ(
          sqlite3_prepare_v2(db, ("PRAGMA table_info(" + table + ")").c_str(), -1, &st, nullptr),
          SQLITE_OK);
      while (sqlite3_step(st) == SQLITE_ROW) {
        const std::string col = reinterpret_cast<const char*>(sqlite3_column_text(st, 1));
        if (!keep.count(col)) added.emplace_back(table, col);
      }
      sqlite3_finalize(st);
    }
    sqlite3_close(db);
  }
  ASSERT_FALSE(added.empty());
  // Nor the indexes added later without a version step (jobs_summary names version 2 columns).
  RawExec(path,
          "DROP INDEX jobs_summary; DROP INDEX jobs_with_problems; "
          "DROP INDEX events_eval_by_sweep");
  for (const auto& [table, col] : added) {
    RawExec(path, "ALTER TABLE " + table + " DROP COLUMN " + col);
  }
  RawExec(path, "DROP TABLE meta; PRAGMA user_version = 1");
  StatusOr<std::unique_ptr<Store>> store = Store::Open(path);
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  StatusOr<std::vector<JobRow>> jobs = (*store)->ListJobs("sw-1");
  ASSERT_TRUE(jobs.ok()) << jobs.status().ToString();
  EXPECT_EQ((*jobs)[0].last_val_nll, 3.2407233715057373);
  ASSERT_TRUE((*store)->ReadEvents("sw-1", 0, 10).ok());
  EXPECT_EQ((*store)->epoch().size(), 16u);
  store->reset();
  // And from then on they are checked.
  RawExec(path, "UPDATE jobs SET last_val_nll = " + FlippedSql(3.2407233715057373));
  EXPECT_EQ(OpenOk(path)->ListJobs("sw-1").status().code(), StatusCode::kDataLoss);
}

TEST(StoreTest, EpochIsKeptAcrossReopenAndNewWhenAsked) {
  testing::TempDir dir;
  const std::string path = dir.File("c.db");
  std::string first;
  {
    std::unique_ptr<Store> s = OpenOk(path);
    first = s->epoch();
  }
  EXPECT_EQ(first.size(), 16u);
  EXPECT_EQ(OpenOk(path)->epoch(), first);
  StoreOptions o;
  o.new_epoch_reason = "test: writes may be lost";
  const std::string second = OpenOk(path, o)->epoch();
  EXPECT_NE(second, first);
  EXPECT_EQ(OpenOk(path)->epoch(), second);
}

// A rollback nobody can see (here: the events and the AUTOINCREMENT counter taken back by hand,
// as a WAL cut at a frame boundary would) still never hands an event number out twice in the
// same epoch: the high-water mark in <db>.seqmark raises the counter at open.
TEST(StoreTest, EventNumbersNeverGoBelowTheEpochsMark) {
  testing::TempDir dir;
  const std::string path = dir.File("c.db");
  auto append = [](Store& s) {
    EventRow e;
    e.sweep_id = "sw-1";
    e.kind = EventKind::kSweepStateChange;
    e.time_us = 1;
    EXPECT_TRUE(*s.AppendEvent(e));
    return e.seq;
  };
  int64_t told = 0;
  {
    std::unique_ptr<Store> s = OpenOk(path);
    for (int i = 0; i < 3; ++i) told = append(*s);
  }
  EXPECT_EQ(told, 3);
  RawExec(path,
          "DELETE FROM events WHERE seq > 1; UPDATE sqlite_sequence SET seq = 1 "
          "WHERE name = 'events'");
  {
    std::unique_ptr<Store> s = OpenOk(path);
    EXPECT_GT(append(*s), told);
  }
  // A new epoch starts its own numbering; the pair (epoch, seq) stays unique.
  StoreOptions o;
  o.new_epoch_reason = "test";
  std::unique_ptr<Store> s = OpenOk(path, o);
  EXPECT_GT(append(*s), 0);
}

TEST(StoreTest, QuickCheckRefusesADamagedFile) {
  testing::TempDir dir;
  const std::string path = dir.File("c.db");
  {
    std::unique_ptr<Store> s = OpenOk(path);
    for (int i = 0; i < 200; ++i) {
      SweepRow sw = MakeSweep("sw-" + std::to_string(i), "alice");
      ASSERT_TRUE(s->InsertSweep(sw).ok());
    }
    ASSERT_TRUE(s->QuickCheck().ok());
  }
  StoreOptions o;
  o.quick_check = true;
  ASSERT_TRUE(Store::Open(path, o).ok());
  // Scribble over the middle of the file (whole pages of b-tree content).
  {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(0, std::ios::end);
    const std::streamoff size = f.tellg();
    ASSERT_GT(size, 8 * 4096);
    f.seekp(size / 2 - 2048);
    const std::string junk(8192, '\x5a');
    f.write(junk.data(), static_cast<std::streamsize>(junk.size()));
  }
  StatusOr<std::unique_ptr<Store>> opened = Store::Open(path, o);
  ASSERT_FALSE(opened.ok());
  EXPECT_EQ(opened.status().code(), StatusCode::kDataLoss) << opened.status().ToString();
  EXPECT_NE(std::string(opened.status().message()).find(path), std::string::npos)
      << opened.status().ToString();
}

// A copy of the live WAL of a store with committed writes (taken while it is open).
std::string LiveWal(const testing::TempDir& dir, const std::string& db) {
  std::unique_ptr<Store> s = OpenOk(db);
  for (int i = 0; i < 20; ++i) {
    SweepRow sw = MakeSweep("sw-" + std::to_string(i), "alice");
    EXPECT_TRUE(s->InsertSweep(sw).ok());
  }
  const std::string copy = dir.File("copy-wal");
  std::filesystem::copy_file(db + "-wal", copy);
  return copy;
}

TEST(StoreTest, CheckWalFindsATruncatedOrDamagedWal) {
  testing::TempDir dir;
  const std::string wal = LiveWal(dir, dir.File("c.db"));
  StatusOr<WalCheck> ok = CheckWal(wal);
  ASSERT_TRUE(ok.ok());
  EXPECT_TRUE(ok->exists);
  EXPECT_TRUE(ok->damage.empty()) << ok->damage;
  EXPECT_GE(ok->commits, 20);
  const int64_t size = ok->bytes;

  // Cut in half: ends mid-frame.
  const std::string half = dir.File("half-wal");
  std::filesystem::copy_file(wal, half);
  std::filesystem::resize_file(half, size / 2);
  StatusOr<WalCheck> cut = CheckWal(half);
  ASSERT_TRUE(cut.ok());
  EXPECT_NE(cut->damage.find("ends mid-frame"), std::string::npos) << cut->damage;

  // One flipped bit in a middle frame's page: the checksum chain breaks with bytes after it.
  const std::string flipped = dir.File("flipped-wal");
  std::filesystem::copy_file(wal, flipped);
  {
    std::fstream f(flipped, std::ios::in | std::ios::out | std::ios::binary);
    const std::streamoff at = 32 + 2 * (24 + 4096) + 24 + 100;
    f.seekg(at);
    char c = 0;
    f.read(&c, 1);
    c ^= 0x10;
    f.seekp(at);
    f.write(&c, 1);
  }
  StatusOr<WalCheck> bad = CheckWal(flipped);
  ASSERT_TRUE(bad.ok());
  EXPECT_NE(bad->damage.find("fails the checksum chain"), std::string::npos) << bad->damage;

  // A missing WAL and an empty one are normal.
  EXPECT_FALSE(CheckWal(dir.File("none-wal"))->exists);
  { std::ofstream(dir.File("empty-wal")); }
  EXPECT_TRUE(CheckWal(dir.File("empty-wal"))->damage.empty());
}

TEST(StoreTest, OneLockHolderPerStore) {
  testing::TempDir dir;
  const std::string lock = dir.File("c.db.lock");
  StatusOr<std::unique_ptr<FileLock>> first = FileLock::Acquire(lock, "pid 1, host a\n");
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  StatusOr<std::unique_ptr<FileLock>> second = FileLock::Acquire(lock, "pid 2, host b\n");
  ASSERT_EQ(second.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(std::string(second.status().message()).find("pid 1, host a"), std::string::npos)
      << second.status().ToString();
  first->reset();
  EXPECT_TRUE(FileLock::Acquire(lock, "pid 3, host c\n").ok());
}

// The read connection (Core::SetReadStore): it sees what the writer committed, never what a
// transaction still holds, while the writer's transaction is open (WAL), and it cannot write.
TEST(StoreTest, ReadConnectionSeesCommitsOnlyAndCannotWrite) {
  testing::TempDir dir;
  const std::string path = dir.File("c.db");
  std::unique_ptr<Store> writer = OpenOk(path);
  StatusOr<std::unique_ptr<Store>> opened = Store::OpenReader(path);
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  Store& reader = **opened;
  SweepRow a = MakeSweep("sw-read-a", "alice");
  ASSERT_TRUE(writer->InsertSweep(a).ok());
  ASSERT_TRUE(reader.GetSweep("sw-read-a").ok());
  bool read_inside = false;
  ASSERT_TRUE(writer
                  ->Transaction([&]() -> Status {
                    SweepRow b = MakeSweep("sw-read-b", "bob");
                    RDATTN_RETURN_IF_ERROR(writer->InsertSweep(b));
                    // Not committed yet: the reader does not see it, and is not blocked.
                    StatusOr<SweepRow> seen = reader.GetSweep("sw-read-b");
                    read_inside = true;
                    EXPECT_EQ(seen.status().code(), StatusCode::kNotFound);
                    return Status::Ok();
                  })
                  .ok());
  EXPECT_TRUE(read_inside);
  EXPECT_TRUE(reader.GetSweep("sw-read-b").ok());
  SweepRow c = MakeSweep("sw-read-c", "carol");
  Status write = reader.InsertSweep(c);
  EXPECT_FALSE(write.ok()) << "the read connection wrote";
  EXPECT_EQ(writer->GetSweep("sw-read-c").status().code(), StatusCode::kNotFound);
  // A file that no writer has created is refused, naming the schema version.
  StatusOr<std::unique_ptr<Store>> fresh = Store::OpenReader(dir.File("empty.db"));
  ASSERT_FALSE(fresh.ok());
  EXPECT_EQ(fresh.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(fresh.status().message().find("schema version 0"), std::string::npos)
      << fresh.status().message();
}

}  // namespace
}  // namespace rdattn::coordinator
