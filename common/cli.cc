#include "common/cli.h"

#include <cstdio>

namespace rdattn::cli {

void Setup(CLI::App& app) {
  // A flag given twice takes its last value, as with absl flags (tests and scripts append
  // overrides to a base command line).
  app.option_defaults()->always_capture_default()->multi_option_policy(
      CLI::MultiOptionPolicy::TakeLast);
  app.get_formatter()->column_width(36);
}

std::vector<std::string> DashSpelling(int argc, const char* const* argv) {
  std::vector<std::string> args(argv, argv + argc);
  for (size_t i = 1; i < args.size(); ++i) {
    std::string& arg = args[i];
    if (arg == "--") break;
    if (arg.size() < 3 || arg.compare(0, 2, "--") != 0) continue;
    for (size_t k = 2; k < arg.size() && arg[k] != '='; ++k) {
      if (arg[k] == '_') arg[k] = '-';
    }
  }
  return args;
}

int Parse(CLI::App& app, int argc, const char* const* argv, int usage_exit) {
  const std::vector<std::string> args = DashSpelling(argc, argv);
  std::vector<const char*> ptrs;
  ptrs.reserve(args.size());
  for (const std::string& a : args) ptrs.push_back(a.c_str());
  try {
    app.parse(static_cast<int>(ptrs.size()), ptrs.data());
  } catch (const CLI::CallForHelp&) {
    std::fputs(app.help().c_str(), stdout);
    std::fflush(stdout);
    return 0;
  } catch (const CLI::ParseError& e) {
    return Usage(app, e.what(), usage_exit);
  }
  return -1;
}

int Usage(const CLI::App& app, const std::string& message, int code) {
  std::fprintf(stderr, "%s: %s (see --help)\n", app.get_name().c_str(), message.c_str());
  return code;
}

}  // namespace rdattn::cli
