// normlab command line: parse, call the library, print. Exit codes: 0 ok, 2 bad input,
// 3 training diverged.
#include <fmt/core.h>
#include <malloc.h>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "commands.hpp"
#include "normlab/dist/communicator.hpp"
#include "normlab/error.hpp"
#include "normlab/io/text.hpp"
#include "normlab/kernels/dispatch.hpp"
#include "normlab/nn/norm_registry.hpp"
#include "normlab/nn/residual_registry.hpp"
#include "normlab/train/config.hpp"

namespace {

// One error line on stderr. Messages echo what the user gave (paths, keys, arguments, data): its
// control bytes are written as \x1b so that they cannot drive the terminal (io/text.hpp); a
// message's own line breaks stay.
void print_error(const std::string& message, const char* kind = "error") {
  fmt::print(stderr, "normlab: {}: {}\n", kind, normlab::io::escape_control_lines(message));
}

std::string verbs_line(const CLI::App& app) {
  std::string verbs;
  for (const CLI::App* sub : app.get_subcommands({})) verbs += (verbs.empty() ? "" : ", ") + sub->get_name();
  return verbs;
}

// A hint for an option that is really a config key: "--steps 100" -> "--set train.steps=100".
std::string config_key_hint(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg.rfind("--", 0) != 0 || arg.size() < 3) continue;
    std::string name = arg.substr(2), value;
    if (const auto eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
    } else if (i + 1 < argc && argv[i + 1][0] != '-') {
      value = argv[i + 1];
    }
    for (char& c : name) c = c == '-' ? '_' : c;
    for (const std::string& key : normlab::train::config_keys())
      if (key == name || key.substr(key.find('.') + 1) == name)
        return fmt::format("; to change a config key use --set {}={}", key, value.empty() ? "VALUE" : value);
  }
  return "";
}

// `normlab help norms [--json]`: the norm and residual registries (nn/norm_registry.hpp,
// nn/residual_registry.hpp). The JSON is what scripts/golden/load_checkpoint_torch.py reads to rebuild each norm and
// scheme in PyTorch.
nlohmann::json torch_tensors(const std::vector<normlab::nn::TorchTensor>& tensors) {
  nlohmann::json out = nlohmann::json::array();
  for (const normlab::nn::TorchTensor& t : tensors)
    out.push_back({{"name", t.name}, {"init", t.init}, {"parameter", t.parameter}});
  return out;
}

void print_norms(bool as_json) {
  using normlab::nn::NormEntry;
  using normlab::nn::ResidualEntry;
  if (!as_json) {
    fmt::print("model.norm values (docs/layernorm.md; a new one: docs/tour.md, \"Add your own normalization\"):\n");
    for (const NormEntry& entry : normlab::nn::norm_registry())
      fmt::print("  {:<10} {}\n  {:<10} {}\n", entry.spec.name, entry.spec.description, "", entry.spec.formula);
    fmt::print(
        "\nmodel.residual values (any model.norm and placement; a new one: docs/tour.md, \"Add your own "
        "residual scheme\"):\n");
    for (const ResidualEntry& entry : normlab::nn::residual_registry())
      fmt::print("  {:<10} {}\n  {:<10} {}\n", entry.spec.name, entry.spec.description, "", entry.spec.formula);
    for (const ResidualEntry& entry : normlab::nn::residual_registry())
      if (!entry.norm_spelling.empty())
        fmt::print("model.norm \"{}\" is read as model.norm \"none\" with model.residual \"{}\"\n", entry.norm_spelling,
                   entry.spec.name);
    fmt::print(
        "\nmodel.qk_norm values (any model.norm and placement; eps is model.norm_eps):\n"
        "  none       queries and keys as the in-projection gives them\n"
        "  layernorm  LayerNorm over each head's head_dim features of q and of k (self_attn.q_norm, k_norm)\n"
        "  rmsnorm    RMSNorm likewise (a weight each, no bias)\n"
        "optim.z_loss: coefficient of the mean log(Z)^2 of the output added to the loss (0: off; PaLM 1e-4)\n");
    return;
  }
  nlohmann::json norms = nlohmann::json::array(), residuals = nlohmann::json::array();
  for (const NormEntry& entry : normlab::nn::norm_registry()) {
    nlohmann::json variants = nlohmann::json::array();
    for (const normlab::nn::NormVariant& v : entry.variants)
      variants.push_back({{"name", v.name}, {"placement", v.placement}});
    norms.push_back({{"name", entry.spec.name},
                     {"description", entry.spec.description},
                     {"formula", entry.spec.formula},
                     {"layer", entry.spec.make != nullptr},
                     {"torch", {{"tensors", torch_tensors(entry.torch.tensors)}, {"forward", entry.torch.forward}}},
                     {"variants", variants}});
  }
  for (const ResidualEntry& entry : normlab::nn::residual_registry()) {
    nlohmann::json variants = nlohmann::json::array();
    for (const normlab::nn::ResidualVariant& v : entry.variants)
      variants.push_back({{"name", v.name}, {"norm", v.norm}, {"placement", v.placement}});
    residuals.push_back({{"name", entry.spec.name},
                         {"description", entry.spec.description},
                         {"formula", entry.spec.formula},
                         {"norm_spelling", entry.norm_spelling},
                         {"torch", {{"tensors", torch_tensors(entry.torch.tensors)}, {"sums", entry.torch.sums}}},
                         {"variants", variants}});
  }
  nlohmann::json qk_norms = nlohmann::json::array();
  for (const auto& [value, name] : normlab::nn::kQkNormNames) qk_norms.push_back(name);
  // model.qk_norm's values: each but "none" is also the registry entry its q_norm / k_norm layers are.
  fmt::print("{}\n", nlohmann::json{{"norms", norms}, {"residuals", residuals}, {"qk_norm", qk_norms}}.dump(2));
}

// `normlab help` and an unknown verb: the verbs, before CLI11's generic message; a verb other than
// train launched as one of several MPI processes: refused. The exit code, or -1 to go on.
int check_verb(const CLI::App& app, int argc, char** argv) {
  if (argc < 2 || argv[1][0] == '-') return -1;
  const std::string verb = argv[1];
  if (verb == "help") {
    const std::string topic = argc > 2 ? argv[2] : "";
    if (topic == "man" && argc == 3) {
      fmt::print("{}", normlab::cli::man_page(app, std::string("normlab ") + NORMLAB_VERSION));
      return 0;
    }
    if (topic == "norms") {
      const std::string flag = argc > 3 ? argv[3] : "";
      if (argc > 4 || (!flag.empty() && flag != "--json")) {
        print_error(
            fmt::format("help norms: unknown argument '{}' (normlab help norms [--json])", argc > 4 ? argv[4] : flag));
        return 2;
      }
      print_norms(flag == "--json");
      return 0;
    }
    if (!topic.empty()) {
      print_error(
          fmt::format("help: unknown topic '{}' (normlab help, normlab help norms [--json], normlab help man)", topic));
      return 2;
    }
    fmt::print(
        "{}\nnormlab help norms [--json]: the normalizations model.norm (and model.qk_norm) accepts\n"
        "normlab help man: the manual page (roff)\n",
        app.help());
    return 0;
  }
  bool known = false;
  for (const CLI::App* sub : app.get_subcommands({})) known = known || sub->get_name() == verb;
  if (!known) {
    const std::string near = normlab::cli::closest_command(app, verb);
    print_error(fmt::format("unknown command '{}'{}; the commands are: {} (normlab --help)", verb,
                            near.empty() ? "" : fmt::format(" (did you mean '{}'?)", near), verbs_line(app)));
    return 2;
  }
  if (const std::string message = normlab::cli::unknown_option_message(app, argc, argv); !message.empty()) {
    print_error(message);
    return 2;
  }
  // Only train is data-parallel. Any other verb launched as one of N processes (mpirun -np N)
  // would run N times over the same files: refused, in one line from the first process.
  const int processes = normlab::dist::launcher_world_size();
  bool help = false;
  for (int i = 2; i < argc; ++i) help = help || std::string(argv[i]) == "--help" || std::string(argv[i]) == "-h";
  if (verb != "train" && processes > 1 && !help) {
    if (normlab::dist::launcher_rank() == 0)
      fmt::print(stderr,
                 "normlab: error: {} is not data-parallel, but it was launched as one of {} processes "
                 "(mpirun -np {}); run it once, without mpirun{}\n",
                 verb, processes, processes,
                 verb == "compare" ? "; to spread a comparison over processes or machines, run one compare per "
                                     "--shard I/K (docs/scaling.md)"
                                   : "");
    return 2;
  }
  return -1;
}

}  // namespace

int normlab::cli::run_command_line(int argc, char** argv) {
  CLI::App app{"normlab: train small Transformer encoders and study Layer Normalization"};
  // "kernels: avx2": NORMLAB_ISA or the best path this CPU runs; "kernels: reference" under
  // NORMLAB_ISA=reference (the plain loops, for reading and debugging).
  std::string kernels_line;
  try {
    kernels_line = std::string("kernels: ") + normlab::kernels::active_isa_name();
    if (std::string note = normlab::kernels::isa_note(); !note.empty()) fmt::print(stderr, "normlab: note: {}\n", note);
  } catch (const normlab::InputError& e) {
    print_error(e.what());
    return 2;
  }
  const std::string version = std::string("normlab ") + NORMLAB_VERSION + "\n" + kernels_line;
  app.set_version_flag("-V,--version", version);
  app.require_subcommand(1);

  CLI::App* bench = app.add_subcommand("bench", "Micro-benchmarks of normlab's kernels");
  bench->require_subcommand(1);
  normlab::cli::add_bench_layernorm(*bench);
  normlab::cli::add_bench_gemm(*bench);
  normlab::cli::add_bench_step(*bench);
  normlab::cli::add_bench_attention(*bench);
  normlab::cli::add_bench_sha256(*bench);
  normlab::cli::add_bench_predict(*bench);
  normlab::cli::add_bench_compare(*bench);
  normlab::cli::add_train(app);
  normlab::cli::add_eval(app);
  normlab::cli::add_predict(app);
  normlab::cli::add_compare(app);
  normlab::cli::add_report(app);
  normlab::cli::add_serve(app);
  normlab::cli::add_baseline(app);
  app.add_subcommand("version", "Print the version and the kernel path this CPU runs (also -V, --version)")
      ->callback([&version] { fmt::print("{}\n", version); });
  normlab::cli::add_completion(app);

  if (const int code = check_verb(app, argc, argv); code >= 0) return code;

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help, --version
    std::string message = e.what();
    if (argc < 2) message = fmt::format("give a command: {}", verbs_line(app));
    print_error(fmt::format("{}{} (see normlab {}--help)", message, config_key_hint(argc, argv),
                            argc >= 2 && argv[1][0] != '-' ? std::string(argv[1]) + " " : ""));
    return 2;
  } catch (const normlab::cli::ExitCode& e) {
    return e.code;
  } catch (const normlab::InputError& e) {
    print_error(e.what());
    return 2;
  } catch (const std::exception& e) {
    print_error(e.what(), "internal error");
    return 1;
  }
  return 0;
}

int normlab::cli::run_command_line(const std::vector<std::string>& args) {
  std::vector<std::string> strings{"normlab"};
  strings.insert(strings.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& s : strings) argv.push_back(s.data());
  argv.push_back(nullptr);
  return run_command_line(int(strings.size()), argv.data());
}

int main(int argc, char** argv) {
  // Activations are freed and reallocated every step: keep freed memory in the heap for reuse, not
  // a fresh mmap (page faults and zero-filling) per buffer.
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, 512 << 20);
  mallopt(M_TOP_PAD, 64 << 20);
  return normlab::cli::run_command_line(argc, argv);
}
