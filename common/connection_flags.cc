#include "common/connection_flags.h"

#include <cstdlib>
#include <utility>

#include "common/file_util.h"
#include "common/strings.h"

namespace rdattn::cli {

std::optional<std::string> ProcessEnv(const std::string& name) {
  const char* v = std::getenv(name.c_str());
  if (v == nullptr) return std::nullopt;
  return std::string(v);
}

void AddConnectionFlags(CLI::App* app, ConnectionFlags* flags, const ConnectionFlagsSpec& spec) {
  // The client's flags may also come from its config file; the help says which key.
  auto config = [&spec](const std::string& key) {
    return spec.client ? ", config `" + key + ":`" : std::string();
  };
  CLI::Option* coordinator = app->add_option(
      "--coordinator", flags->coordinator,
      spec.client ? "coordinator address (env RDATTN_COORDINATOR" + config("coordinator") + ")"
                  : std::string("coordinator address HOST:PORT"));
  if (spec.client) {
    coordinator->default_str("127.0.0.1:50051");
  } else {
    coordinator->required();
  }
  app->add_option("--token", flags->token,
                  "bearer token (env RDATTN_TOKEN" + config("token") + ")");
  app->add_option("--token-file", flags->token_file,
                  "file holding the token (env RDATTN_TOKEN_FILE" + config("token_file") + ")");
  if (spec.client) {
    app->add_flag("--tls", flags->tls, "TLS channel with the system's root certificates");
  }
  if (spec.ca_cert) {
    app->add_option("--ca-cert", flags->ca_cert, "TLS channel with these PEM root certificates");
  }
}

Status CheckToken(const std::string& token, const std::string& source) {
  for (char c : token) {
    if (c < 0x20 || c > 0x7e) {
      return InvalidArgumentError(source + ": the token must be printable ASCII on one line");
    }
  }
  return Status::Ok();
}

StatusOr<std::string> TokenFile(const std::string& path, const std::string& source) {
  StatusOr<std::string> text = ReadFile(path);
  if (!text.ok()) return text.status().WithPrefix(source);
  std::string token = strings::Trim(*text);
  if (token.empty()) return InvalidArgumentError(source + ": " + path + " is empty");
  return token;
}

StatusOr<std::optional<Token>> FlagOrEnvToken(const ConnectionFlags& flags, const EnvGetter& env) {
  auto given = [](const std::optional<std::string>& v) { return v && !v->empty(); };
  Token t;
  if (!flags.token.empty()) {
    t = {strings::Trim(flags.token), "--token"};
  } else if (!flags.token_file.empty()) {
    t.source = "--token-file";
    RDATTN_ASSIGN_OR_RETURN(t.value, TokenFile(flags.token_file, t.source));
  } else if (std::optional<std::string> e = env("RDATTN_TOKEN"); given(e)) {
    t = {strings::Trim(*e), "RDATTN_TOKEN"};
  } else if (std::optional<std::string> f = env("RDATTN_TOKEN_FILE"); given(f)) {
    t.source = "RDATTN_TOKEN_FILE";
    RDATTN_ASSIGN_OR_RETURN(t.value, TokenFile(*f, t.source));
  } else {
    return std::optional<Token>();
  }
  RDATTN_RETURN_IF_ERROR(CheckToken(t.value, t.source));
  return std::optional<Token>(std::move(t));
}

StatusOr<Connection> ResolveConnection(const ConnectionFlags& flags, const EnvGetter& env) {
  Connection c;
  c.address = flags.coordinator;
  RDATTN_ASSIGN_OR_RETURN(std::optional<Token> token, FlagOrEnvToken(flags, env));
  c.token = token ? token->value : "";
  c.token_source = token ? token->source : "none";
  c.tls = flags.tls || !flags.ca_cert.empty();
  if (!flags.ca_cert.empty()) {
    StatusOr<std::string> pem = ReadFile(flags.ca_cert);
    if (!pem.ok()) return pem.status().WithPrefix("--ca-cert");
    c.ca_cert_pem = std::move(*pem);
  }
  return c;
}

}  // namespace rdattn::cli
