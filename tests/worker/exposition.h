// Test helpers for Prometheus metrics: a reader of the text exposition format (0.0.4) into
// samples, and a plain-socket HTTP GET (no client library, so the tests see what a scraper sees).
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cstdlib>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

namespace rdattn::worker::testing {

struct Sample {
  std::string name;
  std::map<std::string, std::string> labels;
  std::string value_text;
  double value = 0;  // strtod of value_text ("Nan" -> NaN, "+Inf" -> inf)
};

// Every sample line of a text exposition (comments skipped). Label values without escapes.
inline std::vector<Sample> ParseExposition(const std::string& text) {
  std::vector<Sample> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    Sample s;
    size_t pos = line.find_first_of("{ ");
    if (pos == std::string::npos) continue;
    s.name = line.substr(0, pos);
    if (line[pos] == '{') {
      const size_t end = line.find('}', pos);
      if (end == std::string::npos) continue;
      std::string labels = line.substr(pos + 1, end - pos - 1);
      size_t at = 0;
      while (at < labels.size()) {
        const size_t eq = labels.find('=', at);
        const size_t open = labels.find('"', eq);
        const size_t close = labels.find('"', open + 1);
        if (eq == std::string::npos || open == std::string::npos || close == std::string::npos)
          break;
        s.labels[labels.substr(at, eq - at)] = labels.substr(open + 1, close - open - 1);
        at = close + 1;
        if (at < labels.size() && labels[at] == ',') ++at;
      }
      pos = end + 1;
    }
    std::string rest = line.substr(pos);
    rest.erase(0, rest.find_first_not_of(' '));
    s.value_text = rest.substr(0, rest.find(' '));  // a timestamp may follow
    s.value = std::strtod(s.value_text.c_str(), nullptr);
    out.push_back(std::move(s));
  }
  return out;
}

// The samples named `name` whose labels include every pair of `subset`.
inline std::vector<Sample> Find(const std::vector<Sample>& samples, const std::string& name,
                                const std::map<std::string, std::string>& subset = {}) {
  std::vector<Sample> out;
  for (const Sample& s : samples) {
    if (s.name != name) continue;
    bool match = true;
    for (const auto& [k, v] : subset) {
      auto it = s.labels.find(k);
      if (it == s.labels.end() || it->second != v) match = false;
    }
    if (match) out.push_back(s);
  }
  return out;
}

// The one sample named `name` with exactly these labels, if any.
inline std::optional<Sample> FindExact(const std::vector<Sample>& samples, const std::string& name,
                                       const std::map<std::string, std::string>& labels) {
  for (const Sample& s : samples) {
    if (s.name == name && s.labels == labels) return s;
  }
  return std::nullopt;
}

// GET http://127.0.0.1:<port><path> over a plain socket (HTTP/1.0). Returns the whole response
// (status line, headers, body), or an empty string when it cannot connect.
inline std::string HttpGet(int port, const std::string& path = "/metrics") {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return "";
  timeval timeout{5, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    ::close(fd);
    return "";
  }
  const std::string request = "GET " + path + " HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n";
  if (::send(fd, request.data(), request.size(), 0) != static_cast<ssize_t>(request.size())) {
    ::close(fd);
    return "";
  }
  std::string response;
  char buf[8192];
  while (true) {
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    response.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return response;
}

// The body of an HTTP response ("" without one).
inline std::string HttpBody(const std::string& response) {
  const size_t at = response.find("\r\n\r\n");
  return at == std::string::npos ? "" : response.substr(at + 4);
}

}  // namespace rdattn::worker::testing
