#include "client/settings.h"

#include <yaml-cpp/yaml.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <map>
#include <utility>

#include "common/file_util.h"
#include "common/strings.h"

namespace rdattn::client {
namespace {

struct ConfigFile {
  std::string path;
  std::map<std::string, std::string> values;  // key -> scalar text
};

const char* const kConfigKeys[] = {"coordinator", "token",   "token_file",
                                   "tls",         "ca_cert", "timeout_seconds"};

StatusOr<ConfigFile> LoadConfig(const std::string& path, bool explicit_path) {
  ConfigFile cfg;
  cfg.path = path;
  if (path.empty()) return cfg;
  std::ifstream probe(path);
  if (!probe) {
    if (explicit_path) return NotFoundError(path + ": cannot open the config file");
    return cfg;  // no config file: nothing to read
  }
  auto text = ReadFile(path);
  if (!text.ok()) return text.status();
  try {
    const YAML::Node root = YAML::Load(*text);
    if (root.IsNull()) return cfg;
    if (!root.IsMap()) return InvalidArgumentError(path + ": expected a mapping of settings");
    for (auto it = root.begin(); it != root.end(); ++it) {
      const std::string key = it->first.as<std::string>();
      bool known = false;
      for (const char* k : kConfigKeys) known = known || key == k;
      if (!known) {
        return InvalidArgumentError(path + ": " + key + ": unknown key (valid: coordinator, " +
                                    "token, token_file, tls, ca_cert, timeout_seconds)");
      }
      if (!it->second.IsScalar()) {
        return InvalidArgumentError(path + ": " + key + ": expected a single value");
      }
      cfg.values[key] = it->second.Scalar();
    }
  } catch (const YAML::Exception& e) {
    return InvalidArgumentError(path + ": line " + std::to_string(e.mark.line + 1) + ": " + e.msg);
  }
  return cfg;
}

std::optional<std::string> ConfigValue(const ConfigFile& cfg, const std::string& key) {
  auto it = cfg.values.find(key);
  if (it == cfg.values.end()) return std::nullopt;
  return it->second;
}

StatusOr<bool> ParseBool(const std::string& value, const std::string& source) {
  if (value == "true" || value == "1" || value == "yes") return true;
  if (value == "false" || value == "0" || value == "no") return false;
  return InvalidArgumentError(source + ": expected true or false, got '" + value + "'");
}

}  // namespace

std::string ConfigPath(const ConnectionOptions& flags, const EnvGetter& env, bool* explicit_path) {
  *explicit_path = true;
  if (!flags.config.empty()) return flags.config;
  if (auto p = env("RDATTN_CONFIG"); p && !p->empty()) return *p;
  *explicit_path = false;
  if (auto x = env("XDG_CONFIG_HOME"); x && !x->empty()) return *x + "/rdattn/config.yaml";
  if (auto h = env("HOME"); h && !h->empty()) return *h + "/.config/rdattn/config.yaml";
  return "";
}

StatusOr<Connection> ResolveConnection(const ConnectionOptions& flags, const EnvGetter& env) {
  bool explicit_path = false;
  const std::string path = ConfigPath(flags, env, &explicit_path);
  RDATTN_ASSIGN_OR_RETURN(ConfigFile cfg, LoadConfig(path, explicit_path));
  const std::string& cfg_source = path;
  Connection c;

  // Address.
  auto set_address = [&c](std::string address, std::string source) {
    c.address = std::move(address);
    c.address_source = std::move(source);
  };
  if (!flags.flags.coordinator.empty()) {
    set_address(flags.flags.coordinator, "--coordinator");
  } else if (auto e = env("RDATTN_COORDINATOR"); e && !e->empty()) {
    set_address(*e, "RDATTN_COORDINATOR");
  } else if (auto k = ConfigValue(cfg, "coordinator")) {
    set_address(*k, cfg_source + " (coordinator)");
  } else {
    set_address(kDefaultCoordinator, "default");
  }
  if (c.address.empty()) return InvalidArgumentError(c.address_source + ": empty address");

  // Token: the flags and the environment (common/connection_flags.h), else the config file.
  RDATTN_ASSIGN_OR_RETURN(std::optional<cli::Token> token, cli::FlagOrEnvToken(flags.flags, env));
  if (!token) {
    if (auto k = ConfigValue(cfg, "token")) {
      token = cli::Token{strings::Trim(*k), cfg_source + " (token)"};
    } else if (auto kf = ConfigValue(cfg, "token_file")) {
      token = cli::Token{"", cfg_source + " (token_file)"};
      RDATTN_ASSIGN_OR_RETURN(token->value, cli::TokenFile(*kf, token->source));
    }
    if (token) RDATTN_RETURN_IF_ERROR(cli::CheckToken(token->value, token->source));
  }
  c.token = token ? token->value : "";
  c.token_source = token ? token->source : "none";

  // TLS.
  std::string ca_path;
  if (!flags.flags.ca_cert.empty()) {
    ca_path = flags.flags.ca_cert;
  } else if (auto k = ConfigValue(cfg, "ca_cert")) {
    ca_path = *k;
  }
  if (flags.flags.tls) {
    c.tls = true;
  } else if (auto k = ConfigValue(cfg, "tls")) {
    RDATTN_ASSIGN_OR_RETURN(c.tls, ParseBool(*k, cfg_source + ": tls"));
  }
  if (!ca_path.empty()) {
    c.tls = true;
    RDATTN_ASSIGN_OR_RETURN(c.ca_cert_pem, ReadFile(ca_path));
  }

  // Deadline of unary calls: --timeout (checked by its validator), else the config file's.
  if (flags.timeout_seconds > 0) {
    c.timeout = std::chrono::milliseconds(std::llround(flags.timeout_seconds * 1000.0));
  } else if (std::optional<std::string> timeout = ConfigValue(cfg, "timeout_seconds")) {
    const std::string timeout_source = cfg_source + ": timeout_seconds";
    char* end = nullptr;
    const double seconds = std::strtod(timeout->c_str(), &end);
    if (timeout->empty() || end != timeout->c_str() + timeout->size() || !(seconds > 0) ||
        seconds > 86400) {
      return InvalidArgumentError(timeout_source + ": expected seconds in (0, 86400], got '" +
                                  *timeout + "'");
    }
    c.timeout = std::chrono::milliseconds(std::llround(seconds * 1000.0));  // seconds > 0
  }
  return c;
}

}  // namespace rdattn::client
