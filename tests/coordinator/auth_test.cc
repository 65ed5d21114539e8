// Bearer tokens: constant-time comparison, tokens file parsing, role checks.
#include "coordinator/auth.h"

#include <gtest/gtest.h>

#include <fstream>

#include "tests/coordinator/test_util.h"

namespace rdattn::coordinator {
namespace {

TEST(AuthTest, ConstantTimeEquals) {
  EXPECT_TRUE(ConstantTimeEquals("", ""));
  EXPECT_TRUE(ConstantTimeEquals("secret-token", "secret-token"));
  EXPECT_FALSE(ConstantTimeEquals("secret-token", "secret-tokeN"));
  EXPECT_FALSE(ConstantTimeEquals("Secret-token", "secret-token"));
  EXPECT_FALSE(ConstantTimeEquals("secret", "secret-token"));  // a prefix is not equal
  EXPECT_FALSE(ConstantTimeEquals("secret-token", "secret"));
  EXPECT_FALSE(ConstantTimeEquals("", "x"));
  EXPECT_FALSE(ConstantTimeEquals(std::string("a\0b", 3), std::string("a\0c", 3)));
  EXPECT_TRUE(ConstantTimeEquals(std::string("a\0b", 3), std::string("a\0b", 3)));
}

TEST(AuthTest, ParsesTokensFile) {
  StatusOr<std::vector<TokenEntry>> t = ParseTokens(
      "# tokens\n"
      "tok-alice-0123456789 researcher alice\n"
      "\n"
      "   tok-w-0123456789\tworker   node-1   # trailing comment\n"
      "tok-root-0123456789 admin ops\r\n");
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  ASSERT_EQ(t->size(), 3u);
  EXPECT_EQ((*t)[0].token, "tok-alice-0123456789");
  EXPECT_EQ((*t)[0].role, Role::kResearcher);
  EXPECT_EQ((*t)[0].name, "alice");
  EXPECT_EQ((*t)[1].role, Role::kWorker);
  EXPECT_EQ((*t)[1].name, "node-1");
  EXPECT_EQ((*t)[2].role, Role::kAdmin);
  EXPECT_EQ((*t)[2].name, "ops");
}

TEST(AuthTest, TokensFileErrorsNameLinesAndNeverQuoteTokens) {
  StatusOr<std::vector<TokenEntry>> t = ParseTokens(
      "good-token-1 researcher alice\n"
      "secret-two root bob\n"
      "secret-three worker\n"
      "good-token-1 admin carol\n");
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), StatusCode::kInvalidArgument);
  const std::string m = t.status().message();
  EXPECT_NE(m.find("line 2: unknown role 'root'"), std::string::npos) << m;
  EXPECT_NE(m.find("line 3: expected 'TOKEN ROLE NAME'"), std::string::npos) << m;
  EXPECT_NE(m.find("line 4: duplicate token"), std::string::npos) << m;
  EXPECT_EQ(m.find("secret"), std::string::npos) << m;
  EXPECT_EQ(m.find("good-token"), std::string::npos) << m;
  EXPECT_FALSE(ParseTokens("# only comments\n\n").ok());
}

TEST(AuthTest, LoadsTokensFile) {
  testing::TempDir dir;
  const std::string path = dir.File("tokens");
  std::ofstream(path) << "abc-123 worker w1\n";
  StatusOr<std::vector<TokenEntry>> t = LoadTokensFile(path);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->size(), 1u);
  EXPECT_EQ(LoadTokensFile(dir.File("missing")).status().code(), StatusCode::kNotFound);
}

TEST(AuthTest, DisabledAllowsEverything) {
  Authenticator off;
  EXPECT_FALSE(off.enabled());
  StatusOr<Principal> p = off.Check(std::nullopt, ServiceKind::kWorker);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->role, Role::kAdmin);
  EXPECT_EQ(p->name, "");
}

TEST(AuthTest, RolesAndCodes) {
  Authenticator auth({{"tok-r", Role::kResearcher, "alice"},
                      {"tok-w", Role::kWorker, "node"},
                      {"tok-a", Role::kAdmin, "ops"}});
  ASSERT_TRUE(auth.enabled());
  struct Case {
    std::optional<std::string> header;
    ServiceKind service;
    StatusCode want;
    std::string name;
  };
  const Case cases[] = {
      {std::nullopt, ServiceKind::kSweep, StatusCode::kUnauthenticated, ""},
      {"", ServiceKind::kSweep, StatusCode::kUnauthenticated, ""},
      {"tok-r", ServiceKind::kSweep, StatusCode::kUnauthenticated, ""},  // no "Bearer "
      {"Bearer ", ServiceKind::kSweep, StatusCode::kUnauthenticated, ""},
      {"Bearer tok-x", ServiceKind::kSweep, StatusCode::kUnauthenticated, ""},
      {"Bearer tok-r2", ServiceKind::kSweep, StatusCode::kUnauthenticated, ""},
      {"Bearer tok-r", ServiceKind::kSweep, StatusCode::kOk, "alice"},
      {"bearer tok-r", ServiceKind::kSweep, StatusCode::kOk, "alice"},
      {"Bearer tok-r", ServiceKind::kWorker, StatusCode::kPermissionDenied, ""},
      {"Bearer tok-w", ServiceKind::kWorker, StatusCode::kOk, "node"},
      {"Bearer tok-w", ServiceKind::kSweep, StatusCode::kPermissionDenied, ""},
      {"Bearer tok-a", ServiceKind::kSweep, StatusCode::kOk, "ops"},
      {"Bearer tok-a", ServiceKind::kWorker, StatusCode::kOk, "ops"},
  };
  for (const Case& c : cases) {
    std::optional<std::string_view> header;
    if (c.header) header = *c.header;
    StatusOr<Principal> p = auth.Check(header, c.service);
    SCOPED_TRACE(c.header.value_or("<none>"));
    EXPECT_EQ(p.status().code(), c.want) << p.status().ToString();
    if (p.ok()) {
      EXPECT_EQ(p->name, c.name);
    } else {
      EXPECT_EQ(p.status().message().find("tok-"), std::string::npos);  // never echoed
    }
  }
}

}  // namespace
}  // namespace rdattn::coordinator
