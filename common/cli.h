// The command line of every rdattn binary that is not the client: a CLI11 app per binary, with
// flags spelled --flag-name (--flag_name, abseil's old spelling, is still accepted), --help on
// every command (each flag with its help text and default), and one usage-error format:
//
//   <program>: <what is wrong, naming the flag> (see --help)
//
// Typical main():
//
//   CLI::App app("Leases jobs ...", "rdattn-worker");
//   rdattn::cli::Setup(app);
//   app.add_option("--slots", flags.slots, "ranks this worker runs at once");
//   if (const int code = rdattn::cli::Parse(app, argc, argv, kExitUsage); code >= 0) return code;
#pragma once

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

namespace rdattn::cli {

// Every option added to `app` afterwards shows its default in --help and, given twice, takes its
// last value. The app's name (its second
// constructor argument) is the program name of its usage line and of its error messages.
void Setup(CLI::App& app);

// argv as strings, every "--flag_name" rewritten "--flag-name" up to its '=' (values are left
// alone), stopping at "--".
std::vector<std::string> DashSpelling(int argc, const char* const* argv);

// Parses argv (after DashSpelling) into `app`. Returns -1 when main() should go on; else the code
// main() returns: 0 after --help (printed on stdout), `usage_exit` after a usage error (printed
// with Usage()).
int Parse(CLI::App& app, int argc, const char* const* argv, int usage_exit);

// Prints "<program>: <message> (see --help)" on stderr and returns `code`.
int Usage(const CLI::App& app, const std::string& message, int code);

}  // namespace rdattn::cli
