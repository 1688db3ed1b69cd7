#include "commands.hpp"
namespace normlab::cli {
void add_compare(CLI::App& app) { app.add_subcommand("compare", "(not yet implemented)"); }
}  // namespace normlab::cli
