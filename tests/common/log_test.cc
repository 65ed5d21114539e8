// common/log: the one line format, the context fields, the level filter, and whole lines from
// many threads.
#include "common/log.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <regex>
#include <set>
#include <string>
#include <thread>
#include <vector>

namespace rdattn::log {
namespace {

// Runs `fn` with stderr sent to a temporary file; returns what it wrote.
template <typename Fn>
std::string CaptureStderr(Fn fn) {
  char path[] = "/tmp/rdattn-log-test-XXXXXX";
  const int fd = ::mkstemp(path);
  EXPECT_GE(fd, 0);
  std::fflush(stderr);
  const int saved = ::dup(STDERR_FILENO);
  ::dup2(fd, STDERR_FILENO);
  fn();
  std::fflush(stderr);
  ::dup2(saved, STDERR_FILENO);
  ::close(saved);
  ::close(fd);
  std::ifstream in(path);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ::unlink(path);
  return text;
}

class LogTest : public ::testing::Test {
 protected:
  void SetUp() override {
    SetComponent("rdattn-test");
    SetMinLevel(Level::kInfo);
    SetJob("");
    SetRank(-1);
    SetStep(-1);
  }
};

TEST_F(LogTest, LineFormat) {
  const std::string line = FormatLine(Level::kWarning, "disk almost full");
  EXPECT_TRUE(std::regex_match(
      line,
      std::regex(R"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z W rdattn-test: disk almost full)")))
      << line;
  EXPECT_NE(FormatLine(Level::kDebug, "x").find(" D rdattn-test: x"), std::string::npos);
  EXPECT_NE(FormatLine(Level::kInfo, "x").find(" I rdattn-test: x"), std::string::npos);
  EXPECT_NE(FormatLine(Level::kError, "x").find(" E rdattn-test: x"), std::string::npos);
}

TEST_F(LogTest, ContextFieldsInOrderAndPerLineOverrides) {
  SetJob("sw-1/tiny/rd/s1");
  SetRank(1);
  EXPECT_NE(FormatLine(Level::kInfo, "up").find(" I rdattn-test job=sw-1/tiny/rd/s1 rank=1: up"),
            std::string::npos);
  SetStep(120);
  EXPECT_NE(FormatLine(Level::kInfo, "m").find("job=sw-1/tiny/rd/s1 rank=1 step=120: m"),
            std::string::npos);
  Fields f;
  f.job = "other";
  f.step = 7;
  EXPECT_NE(FormatLine(Level::kInfo, "m", f).find("job=other rank=1 step=7: m"), std::string::npos);
  SetStep(-1);
  SetRank(-1);
  SetJob("");
  EXPECT_NE(FormatLine(Level::kInfo, "m").find(" I rdattn-test: m"), std::string::npos);
  Fields rank0;
  rank0.rank = 0;  // rank 0 is a rank, not "unknown"
  EXPECT_NE(FormatLine(Level::kInfo, "m", rank0).find("rdattn-test rank=0: m"), std::string::npos);
}

TEST_F(LogTest, LevelFilterAndStreamMacro) {
  int evaluated = 0;
  auto count = [&evaluated] {
    ++evaluated;
    return 42;
  };
  const std::string out = CaptureStderr([&] {
    RDATTN_LOG(kDebug) << "hidden " << count();
    RDATTN_LOG(kInfo) << "shown " << count();
    RDATTN_LOG(kWarning).Job("j").Step(3) << "with fields";
    // One expression: safe in an unbraced if/else.
    if (evaluated > 100)
      RDATTN_LOG(kError) << "not this";
    else
      RDATTN_LOG(kError) << "else branch";
    SetMinLevel(Level::kError);
    Info("dropped");
    Error("kept");
  });
  EXPECT_EQ(evaluated, 1) << "the stream of a dropped line is not built";
  EXPECT_EQ(out.find("hidden"), std::string::npos);
  EXPECT_NE(out.find(" I rdattn-test: shown 42\n"), std::string::npos) << out;
  EXPECT_NE(out.find(" W rdattn-test job=j step=3: with fields\n"), std::string::npos) << out;
  EXPECT_NE(out.find(" E rdattn-test: else branch\n"), std::string::npos) << out;
  EXPECT_EQ(out.find("not this"), std::string::npos);
  EXPECT_EQ(out.find("dropped"), std::string::npos);
  EXPECT_NE(out.find(" E rdattn-test: kept\n"), std::string::npos) << out;
}

TEST_F(LogTest, LinesOfManyThreadsStayWhole) {
  const std::string payload(3000, 'x');  // long lines: stdio would split them
  const std::string out = CaptureStderr([&] {
    std::vector<std::thread> threads;
    for (int t = 0; t < 8; ++t) {
      threads.emplace_back([t, &payload] {
        for (int i = 0; i < 50; ++i) Info("t" + std::to_string(t) + " " + payload);
      });
    }
    for (auto& th : threads) th.join();
  });
  std::set<int> seen;
  size_t lines = 0, start = 0;
  const std::regex whole(R"(\S+ I rdattn-test: t(\d) x{3000})");
  while (start < out.size()) {
    const size_t nl = out.find('\n', start);
    ASSERT_NE(nl, std::string::npos);
    std::smatch m;
    const std::string line = out.substr(start, nl - start);
    ASSERT_TRUE(std::regex_match(line, m, whole)) << line.substr(0, 80);
    seen.insert(std::stoi(m[1]));
    ++lines;
    start = nl + 1;
  }
  EXPECT_EQ(lines, 400u);
  EXPECT_EQ(seen.size(), 8u);
}

}  // namespace
}  // namespace rdattn::log
