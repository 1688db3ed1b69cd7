#include "commands.hpp"
namespace normlab::cli {
void add_predict(CLI::App& app) { app.add_subcommand("predict", "(not yet implemented)"); }
}  // namespace normlab::cli
