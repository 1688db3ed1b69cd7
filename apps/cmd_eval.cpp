#include "commands.hpp"
namespace normlab::cli {
void add_eval(CLI::App& app) { app.add_subcommand("eval", "(not yet implemented)"); }
}  // namespace normlab::cli
