// EventTailer: complete lines exactly once, partial last lines held back, appends picked up.
#include "worker/daemon/event_tailer.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <fstream>
#include <string>
#include <vector>

namespace rdattn::worker {
namespace {

std::string TempPath(const std::string& name) {
  std::string dir = ::testing::TempDir() + "/tailer_XXXXXX";
  EXPECT_NE(::mkdtemp(dir.data()), nullptr);
  return dir + "/" + name;
}

void Append(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::app);
  out << text;
}

std::vector<std::string> Poll(EventTailer& t) {
  std::vector<std::string> lines;
  EXPECT_TRUE(t.Poll(&lines).ok());
  return lines;
}

TEST(EventTailerTest, MissingFileYieldsNothing) {
  EventTailer t(TempPath("events.jsonl"));
  EXPECT_TRUE(Poll(t).empty());
  EXPECT_EQ(t.offset(), 0);
}

TEST(EventTailerTest, ReturnsCompleteLinesOnce) {
  const std::string path = TempPath("events.jsonl");
  EventTailer t(path);
  Append(path, "{\"seq\":1}\n{\"seq\":2}\n");
  EXPECT_EQ(Poll(t), (std::vector<std::string>{"{\"seq\":1}", "{\"seq\":2}"}));
  EXPECT_TRUE(Poll(t).empty());  // no duplicates
  Append(path, "{\"seq\":3}\n");
  EXPECT_EQ(Poll(t), (std::vector<std::string>{"{\"seq\":3}"}));
  EXPECT_EQ(t.offset(), 30);
}

TEST(EventTailerTest, HoldsPartialLineUntilItsNewline) {
  const std::string path = TempPath("events.jsonl");
  EventTailer t(path);
  Append(path, "{\"seq\":1}\n{\"se");
  EXPECT_EQ(Poll(t), (std::vector<std::string>{"{\"seq\":1}"}));
  Append(path, "q\":2");
  EXPECT_TRUE(Poll(t).empty());
  Append(path, "}\n{\"seq\":3}\n");
  EXPECT_EQ(Poll(t), (std::vector<std::string>{"{\"seq\":2}", "{\"seq\":3}"}));
  EXPECT_TRUE(Poll(t).empty());
}

TEST(EventTailerTest, FileCreatedAfterFirstPoll) {
  const std::string path = TempPath("events.jsonl");
  EventTailer t(path);
  EXPECT_TRUE(Poll(t).empty());
  Append(path, "a\n");
  EXPECT_EQ(Poll(t), (std::vector<std::string>{"a"}));
}

TEST(EventTailerTest, SkipsBlankLinesAndCarriageReturns) {
  const std::string path = TempPath("events.jsonl");
  EventTailer t(path);
  Append(path, "a\r\n\n  \nb\n");
  EXPECT_EQ(Poll(t), (std::vector<std::string>{"a", "b"}));
}

TEST(EventTailerTest, FlushReturnsPartialLastLineOnce) {
  const std::string path = TempPath("events.jsonl");
  EventTailer t(path);
  Append(path, "a\nb");
  std::vector<std::string> lines;
  ASSERT_TRUE(t.Flush(&lines).ok());
  EXPECT_EQ(lines, (std::vector<std::string>{"a", "b"}));
  lines.clear();
  ASSERT_TRUE(t.Flush(&lines).ok());
  EXPECT_TRUE(lines.empty());
}

TEST(EventTailerTest, LargeAppendsAcrossReadBuffer) {
  const std::string path = TempPath("events.jsonl");
  EventTailer t(path);
  std::string big(100000, 'x');
  Append(path, big + "\n" + big);
  EXPECT_EQ(Poll(t), (std::vector<std::string>{big}));
  Append(path, "\n");
  EXPECT_EQ(Poll(t), (std::vector<std::string>{big}));
}

}  // namespace
}  // namespace rdattn::worker
