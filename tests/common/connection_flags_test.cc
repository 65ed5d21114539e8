// common/connection_flags: one set of connection flags and one token rule for the client, the
// worker and the load tools (--token, --token-file, $RDATTN_TOKEN, $RDATTN_TOKEN_FILE, TLS).
#include "common/connection_flags.h"

#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "common/cli.h"
#include "tests/common/fake_env.h"

namespace rdattn::cli {
namespace {

using test::FakeEnv;
using test::WriteTemp;

TEST(ConnectionFlagsTest, TokenFromFlagThenFileThenEnvThenEnvFile) {
  const std::string file = WriteTemp("cf-token", "  from-file\n");
  const std::string env_file = WriteTemp("cf-env-token", "from-env-file\n");
  const auto env = FakeEnv({{"RDATTN_TOKEN", "from-env"}, {"RDATTN_TOKEN_FILE", env_file}});
  ConnectionFlags flags;
  flags.token = "from-flag";
  flags.token_file = file;
  auto t = FlagOrEnvToken(flags, env);
  ASSERT_TRUE(t.ok() && t->has_value());
  EXPECT_EQ((*t)->value, "from-flag");
  EXPECT_EQ((*t)->source, "--token");
  flags.token.clear();
  t = FlagOrEnvToken(flags, env);
  EXPECT_EQ((*t)->value, "from-file");  // trimmed
  EXPECT_EQ((*t)->source, "--token-file");
  flags.token_file.clear();
  t = FlagOrEnvToken(flags, env);
  EXPECT_EQ((*t)->value, "from-env");
  EXPECT_EQ((*t)->source, "RDATTN_TOKEN");
  t = FlagOrEnvToken(flags, FakeEnv({{"RDATTN_TOKEN", ""}, {"RDATTN_TOKEN_FILE", env_file}}));
  EXPECT_EQ((*t)->value, "from-env-file");  // an empty variable counts as unset
  EXPECT_EQ((*t)->source, "RDATTN_TOKEN_FILE");
  t = FlagOrEnvToken(flags, FakeEnv({}));
  ASSERT_TRUE(t.ok());
  EXPECT_FALSE(t->has_value());
}

TEST(ConnectionFlagsTest, ErrorsNameTheSourceAndNeverTheToken) {
  ConnectionFlags flags;
  flags.token_file = ::testing::TempDir() + "/cf-missing";
  Status st = FlagOrEnvToken(flags, FakeEnv({})).status();
  EXPECT_EQ(st.code(), StatusCode::kNotFound);
  EXPECT_EQ(st.message(), "--token-file: " + flags.token_file + ": No such file or directory");
  flags.token_file = WriteTemp("cf-empty", " \n");
  st = FlagOrEnvToken(flags, FakeEnv({})).status();
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(st.message(), "--token-file: " + flags.token_file + " is empty");
  flags.token_file.clear();
  st = FlagOrEnvToken(flags, FakeEnv({{"RDATTN_TOKEN", "se\x01cret"}})).status();
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(st.message(), "RDATTN_TOKEN: the token must be printable ASCII on one line");
  flags.ca_cert = ::testing::TempDir() + "/cf-no-ca.pem";
  st = ResolveConnection(flags, FakeEnv({})).status();
  EXPECT_EQ(st.message(), "--ca-cert: " + flags.ca_cert + ": No such file or directory");
}

TEST(ConnectionFlagsTest, ResolvedConnectionReadsTheCaAndMeansTls) {
  ConnectionFlags flags;
  flags.coordinator = "h:1";
  auto plain = ResolveConnection(flags, FakeEnv({}));
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(plain->address, "h:1");
  EXPECT_FALSE(plain->tls);
  EXPECT_EQ(plain->token, "");
  EXPECT_EQ(plain->token_source, "none");
  flags.ca_cert = WriteTemp("cf-ca.pem", "PEM");
  auto tls = ResolveConnection(flags, FakeEnv({{"RDATTN_TOKEN", "t"}}));
  ASSERT_TRUE(tls.ok());
  EXPECT_TRUE(tls->tls);
  EXPECT_EQ(tls->ca_cert_pem, "PEM");
  EXPECT_EQ(tls->token, "t");
}

struct Parsed {
  int code;
  std::string out, err;
};

Parsed ParseWith(const ConnectionFlagsSpec& spec, std::vector<std::string> args,
                 ConnectionFlags* flags) {
  CLI::App app("test", "prog");
  Setup(app);
  AddConnectionFlags(&app, flags, spec);
  args.insert(args.begin(), "prog");
  std::ostringstream out, err;
  const int code = Parse(app, args, 2, out, err);
  return {code, out.str(), err.str()};
}

TEST(ConnectionFlagsTest, FlagsOfTheProgramsThatCallTheCoordinator) {
  ConnectionFlags flags;
  // The worker and the load tools: --coordinator is required; no --tls.
  EXPECT_EQ(ParseWith({}, {}, &flags).err, "prog: --coordinator is required (see --help)\n");
  EXPECT_EQ(ParseWith({}, {"--coordinator", "h:1", "--tls"}, &flags).code, 2);
  const Parsed ok =
      ParseWith({}, {"--coordinator", "h:1", "--token_file", "f", "--ca-cert", "c"}, &flags);
  EXPECT_EQ(ok.code, -1) << ok.err;
  EXPECT_EQ(flags.coordinator, "h:1");
  EXPECT_EQ(flags.token_file, "f");
  EXPECT_EQ(flags.ca_cert, "c");
  const std::string help = ParseWith({}, {"--help"}, &flags).out;
  EXPECT_NE(help.find("RDATTN_TOKEN_FILE"), std::string::npos) << help;
  EXPECT_NE(help.find("REQUIRED"), std::string::npos) << help;
  EXPECT_EQ(help.find("config `"), std::string::npos) << help;
  // rdattn-cluster-bench: no --ca-cert.
  ConnectionFlagsSpec plaintext;
  plaintext.ca_cert = false;
  EXPECT_EQ(ParseWith(plaintext, {"--coordinator", "h:1", "--ca-cert", "c"}, &flags).code, 2);
  // The client: optional --coordinator with its default, --tls, the config keys in the help.
  ConnectionFlagsSpec client;
  client.client = true;
  ConnectionFlags cf;
  EXPECT_EQ(ParseWith(client, {"--tls"}, &cf).code, -1);
  EXPECT_TRUE(cf.tls);
  const std::string client_help = ParseWith(client, {"--help"}, &cf).out;
  EXPECT_NE(client_help.find("=127.0.0.1:50051"), std::string::npos) << client_help;
  EXPECT_NE(client_help.find("config `token_file:`"), std::string::npos) << client_help;
}

}  // namespace
}  // namespace rdattn::cli
