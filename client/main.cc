// rdattn: the command-line client of the rdattn coordinator (docs/client.md). Thin: the
// commands live in commands.cc.
#include <iostream>
#include <string>
#include <vector>

#include "client/commands.h"
#include "client/settings.h"

int main(int argc, char** argv) {
  const std::vector<std::string> args(argv, argv + argc);
  return rdattn::client::RunCli(args, std::cout, std::cerr, rdattn::client::ProcessEnv);
}
