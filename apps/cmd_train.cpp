#include "commands.hpp"
namespace normlab::cli {
void add_train(CLI::App& app) { app.add_subcommand("train", "(not yet implemented)"); }
}  // namespace normlab::cli
