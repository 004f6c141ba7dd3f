// foldcore: the command-line entry point. Each subcommand lives in its own file.
#include <CLI/CLI.hpp>

#include <cstdio>

#include "apps/commands.h"
#include "core/error.h"
#include "core/log.h"

int main(int argc, char** argv) {
  CLI::App app{"FoldCore: AlphaFold2-class structure prediction and training"};
  app.require_subcommand(1);
  std::string log_level = "info";
  app.add_option("--log_level", log_level, "debug, info, warn, error or off");
  foldcore::apps::register_commands(app);
  app.parse_complete_callback([&] { foldcore::log::set_level(foldcore::log::parse_level(log_level)); });
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  return 0;
}
