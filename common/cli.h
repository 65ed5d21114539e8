// The command line of every rdattn binary: a CLI11 app per binary, with flags spelled
// --flag-name (--flag_name, abseil's old spelling, is still accepted), --help on every command and
// subcommand (each flag with its help text and default), and one usage-error format:
//
//   <program>: <what is wrong, naming the flag> (see --help)
//
// Typical main():
//
//   CLI::App app("Leases jobs ...", "rdattn-worker");
//   rdattn::cli::Setup(app);
//   app.add_option("--slots", flags.slots, "ranks this worker runs at once");
//   if (const int code = rdattn::cli::Parse(app, argc, argv, kExitUsage); code >= 0) return code;
//
// A binary with subcommands (rdattn-train, rdattn-data, the client) adds them with
// app.add_subcommand() after Setup(); they inherit its option defaults and help flag.
#pragma once

#include <CLI/CLI.hpp>
#include <iostream>
#include <string>
#include <vector>

namespace rdattn::cli {

// Every option added to `app` (or to a subcommand added afterwards) shows its default in --help
// and, given twice, takes its last value. The app's name (its second constructor argument) is the
// program name of its usage line and of its error messages.
void Setup(CLI::App& app);

// argv as strings, every "--flag_name" rewritten "--flag-name" up to its '=' (values are left
// alone), stopping at "--".
std::vector<std::string> DashSpelling(int argc, const char* const* argv);

// When `args` (argv as strings) names no subcommand (args[1] is missing or a flag other than
// -h/--help), inserts `name` as args[1]: the subcommand a binary runs by default
// (`rdattn-train --job J` is `rdattn-train train --job J`).
void DefaultSubcommand(const std::string& name, std::vector<std::string>* args);

// Parses `args` (argv as strings; DashSpelling applied here) into `app`. Returns -1 when main()
// should go on; else the code main() returns: 0 after --help (the help of the subcommand it
// follows, printed on `out`), `usage_exit` after a usage error (one line on `err`, see Usage()).
// A first argument that is not a flag and names none of `app`'s subcommands is "unknown command".
int Parse(CLI::App& app, const std::vector<std::string>& args, int usage_exit,
          std::ostream& out = std::cout, std::ostream& err = std::cerr);
int Parse(CLI::App& app, int argc, const char* const* argv, int usage_exit);

// Prints "<program>: <message> (see --help)" on `err` and returns `code`.
int Usage(const CLI::App& app, const std::string& message, int code, std::ostream& err = std::cerr);

// A check for an integer option: its text is a whole number >= 0 ("--windows: '-1' is not a
// non-negative integer").
CLI::Validator NonNegativeInteger();

// The same for a whole number >= 1 ("--rounds: 'x' is not a positive integer").
CLI::Validator PositiveInteger();

// A finite number >= 0 ("--min-ms: '-1' is not a number >= 0").
CLI::Validator NonNegativeNumber();

}  // namespace rdattn::cli
