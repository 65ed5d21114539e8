// The attempt fence and the event gate (worker/trainer/fence.h, events.h): a fence that saw a newer
// claim stays fenced, the gate keeps its fence alive after the owner let go (the sink outlives the
// training loop), a fenced sink writes nothing, and a sink whose file cannot be written says so.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>

#include "worker/trainer/events.h"
#include "worker/trainer/fence.h"

namespace rdattn::trainer {
namespace {

class FenceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("rdattn-fence-test-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  void Claim(int attempt) {
    std::ofstream(dir_ / ("attempt-" + std::to_string(attempt) + ".fence")) << "newer\n";
  }
  std::filesystem::path dir_;
};

TEST_F(FenceTest, ANewerClaimFencesForGood) {
  const AttemptFence fence(dir_.string(), 1);
  ASSERT_TRUE(fence.Claim().ok());
  EXPECT_TRUE(fence.Check().ok());
  EXPECT_FALSE(fence.fenced());
  Claim(2);
  const Status st = fence.Check();
  EXPECT_EQ(st.code(), StatusCode::kAborted);
  EXPECT_NE(st.message().find("attempt 2 has claimed"), std::string::npos) << st.message();
  EXPECT_TRUE(fence.fenced());
  // The marker going away (a cleaned directory) does not unfence a rank that saw the claim.
  std::filesystem::remove(dir_ / "attempt-2.fence");
  EXPECT_FALSE(fence.Check().ok());
}

TEST_F(FenceTest, StandaloneIsNeverFenced) {
  const AttemptFence fence(dir_.string(), 0);
  EXPECT_TRUE(fence.Claim().ok());
  Claim(5);
  EXPECT_TRUE(fence.Check().ok());
}

// The gate owns a share of the fence: it works after the function that made the fence returned
// (before issue 24 it held a reference to a local: stack-use-after-return under ASan).
TEST_F(FenceTest, GateOutlivesTheOwnerAndDropsEverythingOnceFenced) {
  std::unique_ptr<EventSink> sink = EventSink::Memory();
  {
    auto fence = std::make_shared<const AttemptFence>(dir_.string(), 1);
    ASSERT_TRUE(fence->Claim().ok());
    sink->SetGate(FenceGate(fence));
  }  // the training loop's own reference is gone
  sink->Emit("TRAIN_STEP", {{"step", 1}});
  ASSERT_EQ(sink->lines().size(), 1U);
  Claim(2);
  sink->Emit("FAILED", {{"error", "fenced"}});
  sink->Emit("TRAIN_STEP", {{"step", 2}});
  EXPECT_EQ(sink->lines().size(), 1U);
  EXPECT_EQ(sink->dropped(), 2);
}

TEST(EventSinkTest, AFileThatCannotBeWrittenIsAnError) {
  auto opened = EventSink::Open("/dev/full");
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  std::unique_ptr<EventSink> sink = std::move(opened).value();
  EXPECT_TRUE(sink->status().ok());
  sink->Emit("INIT", {{"step", 0}});
  EXPECT_EQ(sink->status().code(), StatusCode::kUnavailable);
  EXPECT_NE(sink->status().message().find("--events /dev/full"), std::string::npos);
  EXPECT_NE(sink->status().message().find("No space left on device"), std::string::npos)
      << sink->status().message();
}

}  // namespace
}  // namespace rdattn::trainer
