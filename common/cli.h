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
#include <functional>
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

// A finite number for which `ok` holds, else the usage error "--flag: <rule>" ("--lease-seconds:
// must be > 0"). For integer and floating-point options alike (CLI11 then converts the text).
CLI::Validator NumberWhere(std::function<bool(double)> ok, const std::string& rule);

// One of `names`, else "--flag: expected a, b or c, got 'x'".
CLI::Validator OneOf(std::vector<std::string> names);

// A check of several flags together (or one whose message does not read "--flag: reason"): CLI11
// runs `check` once `app` is parsed, after its options' validators and ->required(); a non-empty
// result is the usage error's whole message. One per app or subcommand (it is the app's final
// callback).
void CheckAfterParse(CLI::App* app, std::function<std::string()> check);

}  // namespace rdattn::cli
