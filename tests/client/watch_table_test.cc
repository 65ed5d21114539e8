// The live watch table (client/watch_table.h) and the text lines of client/watch_printer.h that
// came with it: "submitted" instead of "UNSPECIFIED -> PENDING", seed-policy looks, jobs added to
// a running sweep, unknown event cases, fitting the terminal, and the ANSI redraw.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "client/watch_printer.h"
#include "client/watch_table.h"

namespace rdattn::client {
namespace {

pb::JobStatus* AddJob(pb::SweepStatus* s, const std::string& short_id, pb::JobState state,
                      int64_t total_tokens = 1000000) {
  pb::JobStatus* j = s->add_jobs();
  j->mutable_job()->set_job_id(s->sweep_id() + "/" + short_id);
  j->mutable_job()->mutable_run()->mutable_schedule()->set_total_tokens(total_tokens);
  j->set_state(state);
  return j;
}

pb::SweepStatus Sweep() {
  pb::SweepStatus s;
  s.set_sweep_id("sw1");
  s.mutable_spec()->set_name("demo");
  s.set_state(pb::SWEEP_STATE_RUNNING);
  s.set_last_event_seq(10);
  pb::JobStatus* running = AddJob(&s, "tiny/s1/block", pb::JOB_STATE_RUNNING);
  running->set_attempts(1);
  running->set_step(120);
  running->set_tokens(250000);
  running->set_last_train_loss(2.34567);
  running->set_last_val_nll(2.5);
  running->set_tokens_per_second(1000);
  running->set_worker_id("w-1");
  AddJob(&s, "tiny/s1/rd", pb::JOB_STATE_PENDING);
  return s;
}

pb::WatchEvent StateChange(uint64_t seq, const std::string& job, pb::JobState from, pb::JobState to,
                           int attempt = 0, const std::string& reason = "") {
  pb::WatchEvent e;
  e.set_seq(seq);
  pb::JobStateChange* c = e.mutable_job_state_change();
  c->set_job_id(job);
  c->set_from_state(from);
  c->set_to_state(to);
  c->set_attempt(attempt);
  c->set_reason(reason);
  return e;
}

pb::WatchEvent Step(uint64_t seq, const std::string& job, int64_t tokens, double tps) {
  pb::WatchEvent e;
  e.set_seq(seq);
  pb::MetricEvent* m = e.mutable_metric_event();
  m->set_kind(pb::MetricEvent::KIND_TRAIN_STEP);
  m->set_job_id(job);
  m->set_attempt(1);
  m->set_step(tokens / 4096);
  m->set_tokens(tokens);
  m->set_train_loss(2.5);
  m->set_tokens_per_second(tps);
  return e;
}

pb::WatchEvent SweepEnd(uint64_t seq, pb::SweepState to) {
  pb::WatchEvent e;
  e.set_seq(seq);
  e.mutable_sweep_state_change()->set_from_state(pb::SWEEP_STATE_RUNNING);
  e.mutable_sweep_state_change()->set_to_state(to);
  return e;
}

pb::SeedLook Look(int look, int n, const std::string& decision, std::vector<uint64_t> added,
                  const std::string& reason) {
  pb::SeedLook l;
  l.set_look(look);
  l.set_n_seeds(n);
  l.set_decision(decision);
  for (uint64_t s : added) l.add_added_seeds(s);
  l.set_reason(reason);
  return l;
}

pb::WatchEvent LookEvent(uint64_t seq, const pb::SeedLook& look) {
  pb::WatchEvent e;
  e.set_seq(seq);
  *e.mutable_seed_look() = look;
  return e;
}

// The line of `frame` that starts with `prefix`, or "" if none.
std::string LineOf(const std::vector<std::string>& frame, const std::string& prefix) {
  for (const std::string& line : frame) {
    if (line.rfind(prefix, 0) == 0) return line;
  }
  return "";
}

std::string Joined(const std::vector<std::string>& frame) {
  std::string s;
  for (const std::string& line : frame) s += line + "\n";
  return s;
}

// --- text lines ----------------------------------------------------------------------------

TEST(WatchTextTest, ASubmittedJobReadsSubmitted) {
  WatchPrinter p(Sweep(), WatchPrinterOptions{0.0});
  auto lines = p.OnEvent(StateChange(11, "sw1/tiny/s1/rd", pb::JOB_STATE_UNSPECIFIED,
                                     pb::JOB_STATE_PENDING, 0, "submitted"),
                         0);
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0], "tiny/s1/rd  submitted");
  // Another reason (a job added by a look) is kept.
  lines = p.OnEvent(StateChange(12, "sw1/tiny/s3/rd", pb::JOB_STATE_UNSPECIFIED,
                                pb::JOB_STATE_PENDING, 0, "added by look 1"),
                    0);
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0], "tiny/s3/rd  submitted  (added by look 1)");
  lines = p.OnEvent(
      StateChange(13, "sw1/tiny/s1/rd", pb::JOB_STATE_PENDING, pb::JOB_STATE_RUNNING, 1), 0);
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0], "tiny/s1/rd  PENDING -> RUNNING  (attempt 1)");
  // The sweep's own creation too.
  pb::WatchEvent created;
  created.set_seq(14);
  created.mutable_sweep_state_change()->set_to_state(pb::SWEEP_STATE_PENDING);
  created.mutable_sweep_state_change()->set_reason("submitted");
  lines = p.OnEvent(created, 0);
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0], "sweep sw1: submitted");
}

TEST(WatchTextTest, SeedLookLines) {
  EXPECT_EQ(SeedLookLine(Look(1, 3, "continue", {4, 5}, "")),
            "look 1 at n = 3: continue, adding seeds 4, 5");
  EXPECT_EQ(SeedLookLine(Look(2, 5, "stop", {}, "every comparison crossed a boundary")),
            "look 2 at n = 5: stop (every comparison crossed a boundary)");
  EXPECT_EQ(SeedLookLine(Look(1, 2, "continue", {3}, "")),
            "look 1 at n = 2: continue, adding seed 3");
  WatchPrinter p(Sweep(), WatchPrinterOptions{0.0});
  const auto lines = p.OnEvent(LookEvent(11, Look(1, 3, "continue", {4, 5}, "")), 0);
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0], "look 1 at n = 3: continue, adding seeds 4, 5");
}

TEST(WatchTextTest, UnknownEventCasesPrintNothing) {
  WatchPrinter p(Sweep(), WatchPrinterOptions{0.0});
  pb::WatchEvent empty;  // EVENT_NOT_SET
  empty.set_seq(11);
  EXPECT_TRUE(p.OnEvent(empty, 0).empty());
  // A case from a newer proto: field 99 is unknown here, so the oneof reads as not set.
  pb::WatchEvent future;
  std::string wire;
  wire += static_cast<char>(0x08);  // field 1 (seq), varint
  wire += static_cast<char>(12);
  wire += static_cast<char>(0x9a);  // field 99, length-delimited: tag 99 << 3 | 2 = 794
  wire += static_cast<char>(0x06);
  wire += static_cast<char>(0x02);
  wire += "hi";
  ASSERT_TRUE(future.ParseFromString(wire));
  EXPECT_EQ(future.seq(), 12u);
  EXPECT_EQ(future.event_case(), pb::WatchEvent::EVENT_NOT_SET);
  EXPECT_TRUE(p.OnEvent(future, 0).empty());
  EXPECT_EQ(p.last_seq(), 12u);
  WatchTable t(Sweep(), 0);
  t.OnEvent(future, 0);
  EXPECT_EQ(t.last_seq(), 12u);
  EXPECT_FALSE(t.Render(0, 120, 40).empty());
}

TEST(WatchTextTest, AJobAddedToARunningSweepGetsItsTargetFromTheNextSnapshot) {
  WatchPrinter p(Sweep(), WatchPrinterOptions{0.0});
  EXPECT_FALSE(p.needs_sweep());
  p.OnEvent(StateChange(11, "sw1/tiny/s3/block", pb::JOB_STATE_UNSPECIFIED, pb::JOB_STATE_PENDING),
            0);
  EXPECT_TRUE(p.needs_sweep());
  pb::SweepStatus later = Sweep();
  AddJob(&later, "tiny/s3/block", pb::JOB_STATE_PENDING, 2000000);
  p.OnSweep(later);
  EXPECT_FALSE(p.needs_sweep());
  const auto lines = p.OnEvent(Step(12, "sw1/tiny/s3/block", 1000000, 1000), 0);
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_NE(lines[0].find("tokens 1.00M/2.00M (50.0%)"), std::string::npos) << lines[0];
}

// --- the table -----------------------------------------------------------------------------

TEST(WatchTableTest, OneRowPerJobUnderTheSweepLine) {
  WatchTable t(Sweep(), 0);
  const auto frame = t.Render(0, 200, 40);
  ASSERT_GE(frame.size(), 4u) << Joined(frame);
  EXPECT_EQ(frame[0], "sweep sw1 (demo)  RUNNING  0/2 jobs done, 1 running, 1 waiting  ETA 29m10s");
  EXPECT_EQ(frame[1].rfind("JOB ", 0), 0u) << frame[1];
  for (const char* column :
       {"STATE", "ATT", "PROGRESS", "TOKENS", "LOSS", "VAL NLL", "TOK/S", "ETA", "WORKER"}) {
    EXPECT_NE(frame[1].find(column), std::string::npos) << column << "\n" << frame[1];
  }
  const std::string block = LineOf(frame, "tiny/s1/block");
  EXPECT_NE(block.find("RUNNING"), std::string::npos) << block;
  EXPECT_NE(block.find("[#####...............]"), std::string::npos) << block;  // 25%
  EXPECT_NE(block.find("250.0k/1.00M"), std::string::npos) << block;
  EXPECT_NE(block.find("2.3457"), std::string::npos) << block;
  EXPECT_NE(block.find("2.5000"), std::string::npos) << block;
  EXPECT_NE(block.find("1.00k"), std::string::npos) << block;
  EXPECT_NE(block.find("12m30s"), std::string::npos) << block;  // 750k tokens at 1000/s
  EXPECT_NE(block.find("w-1"), std::string::npos) << block;
  const std::string rd = LineOf(frame, "tiny/s1/rd");
  EXPECT_NE(rd.find("submitted"), std::string::npos) << rd;
  EXPECT_EQ(rd.find("PENDING"), std::string::npos) << rd;
  EXPECT_NE(rd.find("0/1.00M"), std::string::npos) << rd;
  EXPECT_EQ(Joined(frame).find("UNSPECIFIED"), std::string::npos);
}

TEST(WatchTableTest, EtasCountDownAndEventsUpdateRows) {
  WatchTable t(Sweep(), 0);
  // 10 s later with no event: 10k fewer tokens left at 1000/s.
  EXPECT_NE(LineOf(t.Render(10, 200, 40), "tiny/s1/block").find("12m20s"), std::string::npos);
  t.OnEvent(StateChange(11, "sw1/tiny/s1/rd", pb::JOB_STATE_PENDING, pb::JOB_STATE_RUNNING, 1), 20);
  t.OnEvent(Step(12, "sw1/tiny/s1/rd", 500000, 500), 20);
  t.OnEvent(Step(13, "sw1/tiny/s1/block", 900000, 1000), 20);
  const auto frame = t.Render(20, 200, 40);
  const std::string rd = LineOf(frame, "tiny/s1/rd");
  EXPECT_NE(rd.find("RUNNING"), std::string::npos) << rd;
  EXPECT_NE(rd.find("[##########..........]"), std::string::npos) << rd;
  EXPECT_NE(rd.find("16m40s"), std::string::npos) << rd;  // 500k at 500/s
  // Sweep: 600k tokens left at 1500 tokens/s.
  EXPECT_EQ(frame[0], "sweep sw1 (demo)  RUNNING  0/2 jobs done, 2 running  ETA 6m40s");
}

TEST(WatchTableTest, AFinishedSweepShowsEveryJobSucceeded) {
  WatchTable t(Sweep(), 0);
  t.OnEvent(StateChange(11, "sw1/tiny/s1/block", pb::JOB_STATE_RUNNING, pb::JOB_STATE_SUCCEEDED, 1),
            1);
  t.OnEvent(StateChange(12, "sw1/tiny/s1/rd", pb::JOB_STATE_PENDING, pb::JOB_STATE_RUNNING, 1), 1);
  t.OnEvent(StateChange(13, "sw1/tiny/s1/rd", pb::JOB_STATE_RUNNING, pb::JOB_STATE_SUCCEEDED, 1),
            1);
  EXPECT_FALSE(t.ended());
  t.OnEvent(SweepEnd(14, pb::SWEEP_STATE_SUCCEEDED), 1);
  EXPECT_TRUE(t.ended());
  EXPECT_EQ(t.final_state(), pb::SWEEP_STATE_SUCCEEDED);
  const auto frame = t.Render(1, 200, 40);
  EXPECT_EQ(frame[0], "sweep sw1 (demo)  SUCCEEDED  2/2 jobs done");
  for (const char* job : {"tiny/s1/block", "tiny/s1/rd"}) {
    const std::string row = LineOf(frame, job);
    EXPECT_NE(row.find("SUCCEEDED"), std::string::npos) << row;
    EXPECT_NE(row.find("[####################]"), std::string::npos) << row;
  }
}

TEST(WatchTableTest, JobsAddedToARunningSweepGetRows) {
  WatchTable t(Sweep(), 0);
  t.OnEvent(LookEvent(11, Look(1, 1, "continue", {2}, "")), 0);
  t.OnEvent(StateChange(12, "sw1/tiny/s2/block", pb::JOB_STATE_UNSPECIFIED, pb::JOB_STATE_PENDING,
                        0, "submitted"),
            0);
  t.OnEvent(StateChange(13, "sw1/tiny/s2/rd", pb::JOB_STATE_UNSPECIFIED, pb::JOB_STATE_PENDING, 0,
                        "submitted"),
            0);
  EXPECT_TRUE(t.needs_sweep());
  auto frame = t.Render(0, 200, 40);
  EXPECT_EQ(frame[1], "look 1 at n = 1: continue, adding seed 2") << Joined(frame);
  EXPECT_EQ(frame[0].rfind("sweep sw1 (demo)  RUNNING  0/4 jobs done, 1 running, 3 waiting", 0), 0u)
      << frame[0];
  EXPECT_NE(frame[0].find("ETA ?"), std::string::npos) << frame[0];  // targets unknown yet
  EXPECT_NE(LineOf(frame, "tiny/s2/rd").find("0/?"), std::string::npos) << Joined(frame);

  // The next snapshot has them (with their targets), and a later event is kept over it.
  t.OnEvent(StateChange(14, "sw1/tiny/s2/block", pb::JOB_STATE_PENDING, pb::JOB_STATE_RUNNING, 1),
            1);
  pb::SweepStatus later = Sweep();
  later.set_last_event_seq(13);  // taken before event 14
  AddJob(&later, "tiny/s2/block", pb::JOB_STATE_PENDING);
  AddJob(&later, "tiny/s2/rd", pb::JOB_STATE_PENDING);
  t.OnSweep(later, 1);
  EXPECT_FALSE(t.needs_sweep());
  frame = t.Render(1, 200, 40);
  EXPECT_NE(LineOf(frame, "tiny/s2/rd").find("0/1.00M"), std::string::npos) << Joined(frame);
  EXPECT_NE(LineOf(frame, "tiny/s2/block").find("RUNNING"), std::string::npos) << Joined(frame);
  EXPECT_EQ(frame[0].rfind("sweep sw1 (demo)  RUNNING  0/4 jobs done, 2 running, 2 waiting", 0), 0u)
      << frame[0];
  // Rows in the snapshot's order, the added ones after the first ones.
  std::vector<std::string> order;
  for (const std::string& line : frame) {
    if (line.rfind("tiny/", 0) == 0) order.push_back(line.substr(0, line.find(' ')));
  }
  EXPECT_EQ(order, (std::vector<std::string>{"tiny/s1/block", "tiny/s1/rd", "tiny/s2/block",
                                             "tiny/s2/rd"}));
}

TEST(WatchTableTest, ReplayedAndStaleEventsChangeNothing) {
  WatchTable t(Sweep(), 0);  // the snapshot holds events up to seq 10
  t.OnEvent(StateChange(5, "sw1/tiny/s1/block", pb::JOB_STATE_LEASED, pb::JOB_STATE_RUNNING, 1), 0);
  t.OnEvent(Step(6, "sw1/tiny/s1/block", 4096, 100), 0);  // older than the snapshot
  const std::string block = LineOf(t.Render(0, 200, 40), "tiny/s1/block");
  EXPECT_NE(block.find("250.0k/1.00M"), std::string::npos) << block;
  t.OnEvent(Step(11, "sw1/tiny/s1/block", 300000, 1000), 0);
  t.OnEvent(Step(11, "sw1/tiny/s1/block", 999999, 1000), 0);  // the same seq again
  EXPECT_NE(LineOf(t.Render(0, 200, 40), "tiny/s1/block").find("300.0k/1.00M"), std::string::npos);
  // A terminal sweep state ends the table even when the snapshot already held it.
  WatchTable late(Sweep(), 0);
  late.OnEvent(SweepEnd(9, pb::SWEEP_STATE_FAILED), 0);
  EXPECT_TRUE(late.ended());
  EXPECT_EQ(late.final_state(), pb::SWEEP_STATE_FAILED);
}

TEST(WatchTableTest, FitsTheTerminal) {
  pb::SweepStatus s = Sweep();
  for (int seed = 2; seed <= 30; ++seed) {
    AddJob(&s, "tiny/s" + std::to_string(seed) + "/block", pb::JOB_STATE_SUCCEEDED);
  }
  AddJob(&s, "tiny/s31/rd", pb::JOB_STATE_FAILED)->set_attempts(2);
  WatchTable t(s, 0);
  // Narrow: every line is cut to width - 1 columns.
  for (const std::string& line : t.Render(0, 50, 100)) EXPECT_LE(line.size(), 49u) << line;
  // Short: height - 1 lines, the running and the failed job kept, the others counted.
  const auto frame = t.Render(0, 200, 10);
  EXPECT_EQ(frame.size(), 9u) << Joined(frame);
  EXPECT_NE(LineOf(frame, "tiny/s1/block").find("RUNNING"), std::string::npos) << Joined(frame);
  EXPECT_NE(LineOf(frame, "tiny/s31/rd").find("FAILED"), std::string::npos) << Joined(frame);
  EXPECT_EQ(frame.back(), "... 26 more jobs: 26 SUCCEEDED") << Joined(frame);
  // Control characters from the coordinator never reach the terminal.
  EXPECT_EQ(FitLine("a\x1b[2Jb\tc", 80), "a?[2Jb?c");
  EXPECT_EQ(FitLine("h\xc3\xa9llo", 3), "h\xc3\xa9l");
}

TEST(WatchTableTest, TheLatestLookShowsUnderTheSweepLine) {
  pb::SweepStatus s = Sweep();
  *s.mutable_sequential()->add_looks() = Look(1, 2, "continue", {3}, "");
  WatchTable t(s, 0);
  EXPECT_EQ(t.Render(0, 200, 40)[1], "look 1 at n = 2: continue, adding seed 3");
  t.OnEvent(LookEvent(11, Look(2, 3, "stop", {}, "every comparison crossed a boundary")), 0);
  EXPECT_EQ(t.Render(0, 200, 40)[1], "look 2 at n = 3: stop (every comparison crossed a boundary)");
  t.set_note("watch interrupted (UNAVAILABLE); reconnecting after seq 11");
  EXPECT_EQ(t.Render(0, 200, 40)[2], "watch interrupted (UNAVAILABLE); reconnecting after seq 11");
}

TEST(TerminalFrameTest, RedrawsInPlace) {
  TerminalFrame f;
  EXPECT_EQ(f.Redraw({"a", "b"}, 80), "a\x1b[K\nb\x1b[K\n\x1b[J");
  EXPECT_EQ(f.Redraw({"c"}, 80), "\r\x1b[2Ac\x1b[K\n\x1b[J");
  EXPECT_EQ(f.Redraw({"d"}, 60), "\x1b[H\x1b[2Jd\x1b[K\n\x1b[J");  // resized
}

}  // namespace
}  // namespace rdattn::client
