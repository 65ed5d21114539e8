#include "common/cli.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <memory>
#include <sstream>
#include <string>
#include <utility>

namespace rdattn::cli {

namespace {

// One help format on every CLI11: an option's default as "TYPE=VALUE", as CLI11 2.1 (Debian 12)
// prints it; CLI11 2.4 (Debian 13) prints "TYPE [VALUE] " instead. The rest is CLI11's own
// Formatter::make_option_opts, which is the same in both.
class HelpFormatter : public CLI::Formatter {
 public:
  std::string make_option_opts(const CLI::Option* opt) const override {
    std::stringstream out;
    if (!opt->get_option_text().empty()) {
      out << " " << opt->get_option_text();
      return out.str();
    }
    if (opt->get_type_size() != 0) {
      if (!opt->get_type_name().empty()) out << " " << get_label(opt->get_type_name());
      if (!opt->get_default_str().empty()) out << "=" << opt->get_default_str();
      if (opt->get_expected_max() == CLI::detail::expected_max_vector_size) {
        out << " ...";
      } else if (opt->get_expected_min() > 1) {
        out << " x " << opt->get_expected();
      }
      if (opt->get_required()) out << " " << get_label("REQUIRED");
    }
    if (!opt->get_envname().empty())
      out << " (" << get_label("Env") << ":" << opt->get_envname() << ")";
    if (!opt->get_needs().empty()) {
      out << " " << get_label("Needs") << ":";
      for (const CLI::Option* o : opt->get_needs()) out << " " << o->get_name();
    }
    if (!opt->get_excludes().empty()) {
      out << " " << get_label("Excludes") << ":";
      for (const CLI::Option* o : opt->get_excludes()) out << " " << o->get_name();
    }
    return out.str();
  }
};

}  // namespace

void Setup(CLI::App& app) {
  // A flag given twice takes its last value, as with absl flags (tests and scripts append
  // overrides to a base command line).
  app.option_defaults()->always_capture_default()->multi_option_policy(
      CLI::MultiOptionPolicy::TakeLast);
  app.formatter(std::make_shared<HelpFormatter>());
  app.get_formatter()->column_width(36);
}

namespace {

std::vector<std::string> DashSpelled(std::vector<std::string> args) {
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

// Whether `name` is one of the subcommands of `app`; *has_subcommands: whether it has any.
bool IsSubcommand(CLI::App& app, const std::string& name, bool* has_subcommands) {
  const std::vector<CLI::App*> subs = app.get_subcommands([](CLI::App*) { return true; });
  *has_subcommands = !subs.empty();
  for (const CLI::App* sub : subs) {
    if (sub->check_name(name)) return true;
  }
  return false;
}

}  // namespace

std::vector<std::string> DashSpelling(int argc, const char* const* argv) {
  return DashSpelled(std::vector<std::string>(argv, argv + argc));
}

void DefaultSubcommand(const std::string& name, std::vector<std::string>* args) {
  if (args->size() > 1) {
    const std::string& first = (*args)[1];
    if (first.empty() || first[0] != '-' || first == "-h" || first == "--help") return;
  }
  args->insert(args->begin() + (args->empty() ? 0 : 1), name);
}

int Parse(CLI::App& app, const std::vector<std::string>& args, int usage_exit, std::ostream& out,
          std::ostream& err) {
  const std::vector<std::string> spelled = DashSpelled(args);
  if (spelled.size() > 1 && !spelled[1].empty() && spelled[1][0] != '-') {
    bool has_subcommands = false;
    if (!IsSubcommand(app, spelled[1], &has_subcommands) && has_subcommands) {
      return Usage(app, "unknown command '" + spelled[1] + "'", usage_exit, err);
    }
  }
  std::vector<const char*> ptrs;
  ptrs.reserve(spelled.size());
  for (const std::string& a : spelled) ptrs.push_back(a.c_str());
  try {
    app.parse(static_cast<int>(ptrs.size()), ptrs.data());
  } catch (const CLI::CallForHelp&) {
    out << app.help() << std::flush;
    return 0;
  } catch (const CLI::ParseError& e) {
    return Usage(app, e.what(), usage_exit, err);
  }
  return -1;
}

int Parse(CLI::App& app, int argc, const char* const* argv, int usage_exit) {
  return Parse(app, std::vector<std::string>(argv, argv + argc), usage_exit);
}

int Usage(const CLI::App& app, const std::string& message, int code, std::ostream& err) {
  err << app.get_name() << ": " << message << " (see --help)\n" << std::flush;
  return code;
}

namespace {

// A whole number (strtoll, base 10, all of the text) of at least `min`; `what` names the rule in
// the message ("'x' is not a positive integer") and `tag` is CLI11's type name in --help.
CLI::Validator IntegerAtLeast(long long min, const std::string& what, const std::string& tag) {
  return CLI::Validator(
      [min, what](const std::string& text) -> std::string {
        char* end = nullptr;
        errno = 0;
        const long long v = std::strtoll(text.c_str(), &end, 10);
        if (text.empty() || *end != '\0' || errno != 0 || v < min) {
          return "'" + text + "' is not " + what;
        }
        return std::string();
      },
      tag);
}

}  // namespace

CLI::Validator NonNegativeInteger() {
  return IntegerAtLeast(0, "a non-negative integer", "NONNEGATIVE");
}

CLI::Validator PositiveInteger() { return IntegerAtLeast(1, "a positive integer", "POSITIVE"); }

CLI::Validator NonNegativeNumber() {
  return CLI::Validator(
      [](const std::string& text) -> std::string {
        char* end = nullptr;
        errno = 0;
        const double v = std::strtod(text.c_str(), &end);
        if (text.empty() || *end != '\0' || errno != 0 || !(v >= 0) || !std::isfinite(v)) {
          return "'" + text + "' is not a number >= 0";
        }
        return std::string();
      },
      "NONNEGATIVE");
}

CLI::Validator NumberWhere(std::function<bool(double)> ok, const std::string& rule) {
  return CLI::Validator(
      [ok = std::move(ok), rule](const std::string& text) -> std::string {
        char* end = nullptr;
        errno = 0;
        const double v = std::strtod(text.c_str(), &end);
        if (text.empty() || *end != '\0' || errno != 0 || !std::isfinite(v) || !ok(v)) return rule;
        return std::string();
      },
      "");  // no tag: --help shows the option's own type
}

CLI::Validator OneOf(std::vector<std::string> names) {
  std::string list;
  for (size_t i = 0; i < names.size(); ++i) {
    list += (i == 0 ? "" : i + 1 == names.size() ? " or " : ", ") + names[i];
  }
  return CLI::Validator(
      [names = std::move(names), list](const std::string& text) -> std::string {
        for (const std::string& n : names) {
          if (text == n) return std::string();
        }
        return "expected " + list + ", got '" + text + "'";
      },
      "");
}

void CheckAfterParse(CLI::App* app, std::function<std::string()> check) {
  app->final_callback([check = std::move(check)] {
    const std::string message = check();
    if (!message.empty()) throw CLI::ValidationError(message);
  });
}

}  // namespace rdattn::cli
