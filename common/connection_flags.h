// The connection flags of every program that calls the coordinator (rdattn, rdattn-worker,
// rdattn-load, rdattn-cluster-bench): --coordinator, --token, --token-file, --ca-cert (and the
// client's --tls), with $RDATTN_TOKEN and $RDATTN_TOKEN_FILE, declared and resolved once so the
// programs cannot drift apart. Plain C++ and CLI11: making the gRPC channel from a Connection
// stays with each program's client code (common/ links no gRPC; docs/architecture.md).
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <optional>
#include <string>

#include "common/status.h"

namespace rdattn::cli {

// Reads an environment variable (injected so tests need not touch the real environment).
using EnvGetter = std::function<std::optional<std::string>(const std::string& name)>;
// The process environment.
std::optional<std::string> ProcessEnv(const std::string& name);

// The flags as given; empty: not given.
struct ConnectionFlags {
  std::string coordinator;  // HOST:PORT (any gRPC target)
  std::string token;
  std::string token_file;
  std::string ca_cert;  // PEM roots: a TLS channel
  bool tls = false;     // --tls (the client): a TLS channel with the system's roots
};

struct ConnectionFlagsSpec {
  // The client: --coordinator is optional (it also comes from $RDATTN_COORDINATOR, the config
  // file or a default), the help names the config file's keys, and --tls exists. Otherwise
  // --coordinator is required.
  bool client = false;
  // --ca-cert (rdattn-cluster-bench speaks plaintext only).
  bool ca_cert = true;
};

// Adds the connection flags to `app`, stored into `*flags` (which must outlive the parse).
void AddConnectionFlags(CLI::App* app, ConnectionFlags* flags, const ConnectionFlagsSpec& spec);

// A secret and where it came from ("--token", "RDATTN_TOKEN_FILE", ...): the token itself is
// never printed, only its source.
struct Token {
  std::string value;
  std::string source;
};

// The bearer token of the flags and the environment, in this order: --token, the file
// --token-file names, $RDATTN_TOKEN, the file $RDATTN_TOKEN_FILE names (an empty variable counts
// as unset). nullopt when none is set. Trimmed; errors name the source (CheckToken, TokenFile).
StatusOr<std::optional<Token>> FlagOrEnvToken(const ConnectionFlags& flags, const EnvGetter& env);

// The token in the file `path`, trimmed: NOT_FOUND "SOURCE: PATH: <reason>" when it cannot be
// read, INVALID_ARGUMENT "SOURCE: PATH is empty".
StatusOr<std::string> TokenFile(const std::string& path, const std::string& source);

// gRPC metadata values must be printable ASCII: INVALID_ARGUMENT naming `source` otherwise.
Status CheckToken(const std::string& token, const std::string& source);

// Where and how to connect, resolved.
struct Connection {
  std::string address;
  std::string token;         // empty: no authorization metadata
  std::string token_source;  // "none" without a token
  bool tls = false;          // TLS channel (the system's roots unless ca_cert_pem is set)
  std::string ca_cert_pem;
};

// The connection of a program without a config file (the worker, the load tools): the flags,
// then the environment for the token (FlagOrEnvToken). --ca-cert is read here ("--ca-cert:
// PATH: <reason>" when it cannot be).
StatusOr<Connection> ResolveConnection(const ConnectionFlags& flags,
                                       const EnvGetter& env = ProcessEnv);

}  // namespace rdattn::cli
