#include "common/flag_spelling.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace rdattn {
namespace {

std::vector<std::string> Spell(std::vector<std::string> args) {
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  FlagSpelling spelling(static_cast<int>(argv.size()), argv.data());
  return std::vector<std::string>(spelling.argv(), spelling.argv() + spelling.argc());
}

TEST(FlagSpellingTest, DashesInFlagNamesBecomeUnderscores) {
  EXPECT_EQ(
      Spell({"prog", "--metrics-listen=127.0.0.1:0", "--lease-seconds", "30", "--db", "a-b.db"}),
      (std::vector<std::string>{"prog", "--metrics_listen=127.0.0.1:0", "--lease_seconds", "30",
                                "--db", "a-b.db"}));
}

TEST(FlagSpellingTest, ValuesProgramNameAndArgumentsAfterDoubleDashAreKept) {
  EXPECT_EQ(Spell({"my-prog", "--tls-cert=/a-b/c-d.pem", "-x-y", "--", "--not-a-flag"}),
            (std::vector<std::string>{"my-prog", "--tls_cert=/a-b/c-d.pem", "-x-y", "--",
                                      "--not-a-flag"}));
}

}  // namespace
}  // namespace rdattn
