// Where the client connects and how it authenticates: the coordinator address, the bearer
// token, TLS and the per-call deadline. Each comes from a flag, else an environment variable,
// else the config file (~/.config/rdattn/config.yaml), else a default (docs/client.md).
// The token is never printed; only where it came from.
#pragma once

#include <chrono>
#include <functional>
#include <optional>
#include <string>

#include "client/options.h"
#include "common/connection_flags.h"
#include "common/status.h"

namespace rdattn::client {

inline constexpr char kDefaultCoordinator[] = "127.0.0.1:50051";
inline constexpr std::chrono::seconds kDefaultTimeout{30};

using cli::EnvGetter;
using cli::ProcessEnv;

struct Connection {
  std::string address;         // host:port (any gRPC target)
  std::string address_source;  // "--coordinator", "RDATTN_COORDINATOR", the config path, "default"
  std::string token;           // empty: no authorization metadata
  std::string token_source;    // like address_source; "none" when there is no token
  bool tls = false;            // TLS channel (system roots unless ca_cert_pem is set)
  std::string ca_cert_pem;     // root certificates for TLS
  std::chrono::milliseconds timeout = kDefaultTimeout;  // deadline of each unary call
};

// The config file the client reads: --config, else $RDATTN_CONFIG, else
// $XDG_CONFIG_HOME/rdattn/config.yaml, else $HOME/.config/rdattn/config.yaml ("" if no HOME).
// `explicit_path` says whether the user named it (then it must exist).
std::string ConfigPath(const ConnectionOptions& flags, const EnvGetter& env, bool* explicit_path);

// Resolves the connection from flags (--coordinator, --token, --token-file, --tls, --ca-cert,
// --timeout), the environment (RDATTN_COORDINATOR, RDATTN_TOKEN, RDATTN_TOKEN_FILE) and the
// config file (keys coordinator, token, token_file, tls, ca_cert, timeout_seconds; unknown keys
// are errors). INVALID_ARGUMENT / NOT_FOUND name the flag, variable, key or file at fault.
// The flags' own values are checked by their validators (commands.cc); the config file's here.
StatusOr<Connection> ResolveConnection(const ConnectionOptions& flags, const EnvGetter& env);

}  // namespace rdattn::client
