// The command line's habits, generated from its own command table (apps/cli_habits.cpp): "did you
// mean" for a misspelled command or option, -V / version, the bash completion and the man page.
#include <doctest/doctest.h>

#include <string>

#include "support.hpp"

using namespace normlab::test;

TEST_CASE("cli: a misspelled option is named with the nearest one of its command, exit 2") {
  TempDir dir;
  Cli config = run_normlab(dir, "train --confg x.json");
  CHECK(config.code == 2);
  CHECK(config.err ==
        "normlab: error: train: unknown option '--confg'; did you mean '--config'? "
        "(see normlab train --help)\n");
  // The typo is reported before a required option is missed ("--run is required" said nothing).
  Cli run = run_normlab(dir, "eval --rnu r1");
  CHECK(run.code == 2);
  CHECK(run.err == "normlab: error: eval: unknown option '--rnu'; did you mean '--run'? (see normlab eval --help)\n");
  Cli nested = run_normlab(dir, "bench step --confg x.json");
  CHECK(nested.err.find("bench step: unknown option '--confg'; did you mean '--config'?") != std::string::npos);
  // A value that looks like an option is a value: --input takes one.
  Cli value = run_normlab(dir, "predict --run " + dir.sub("none") + " --input --confg");
  CHECK(value.err.find("did you mean") == std::string::npos);
  // Far from every option: CLI11's own message; a config key: the --set hint, not a guess.
  Cli far = run_normlab(dir, "train --config x.json --zzzzzzzz");
  CHECK(far.code == 2);
  CHECK(far.err.find("did you mean") == std::string::npos);
  Cli key = run_normlab(dir, "train --config x.json --steps 100");
  CHECK(key.err.find("use --set train.steps=100") != std::string::npos);
}

TEST_CASE("cli: a misspelled command is named with the nearest command, a far one is not guessed") {
  TempDir dir;
  Cli near = run_normlab(dir, "comapre --config x");
  CHECK(near.code == 2);
  CHECK(near.err.rfind("normlab: error: unknown command 'comapre' (did you mean 'compare'?); the commands are: ", 0) ==
        0);
  Cli far = run_normlab(dir, "xyzzy");
  CHECK(far.code == 2);
  CHECK(far.err.rfind("normlab: error: unknown command 'xyzzy'; the commands are: ", 0) == 0);
}

TEST_CASE("cli: -V, --version and version print the same two lines") {
  TempDir dir;
  Cli flag = run_normlab(dir, "-V"), long_flag = run_normlab(dir, "--version"), verb = run_normlab(dir, "version");
  CHECK(flag.code == 0);
  CHECK(verb.code == 0);
  CHECK(flag.out.rfind("normlab 0.1.0\nkernels: ", 0) == 0);
  CHECK(flag.out == long_flag.out);
  CHECK(verb.out == flag.out);
}

TEST_CASE("cli: the bash completion completes commands, a command's options and config keys after --set") {
  TempDir dir;
  Cli script = run_normlab(dir, "completion bash");
  REQUIRE(script.code == 0);
  const std::string path = dir.write("normlab.bash", script.out);
  // Complete as bash would: COMP_WORDS/COMP_CWORD set, the function called, COMPREPLY printed.
  auto complete = [&](const std::string& words, int cword) {
    const std::string probe =
        dir.write("probe.sh", "source '" + path + "'\nCOMP_WORDS=(" + words + ")\nCOMP_CWORD=" + std::to_string(cword) +
                                  "\n_normlab\necho \"${COMPREPLY[*]}\"\n");
    const std::string out = dir.sub("completed.txt");
    REQUIRE(std::system(("bash '" + probe + "' >'" + out + "' 2>&1").c_str()) == 0);
    return read_text(out);
  };
  CHECK(complete("normlab tr", 1) == "train\n");
  CHECK(complete("normlab co", 1) == "compare completion\n");
  CHECK(complete("normlab eval --r", 2) == "--run\n");
  CHECK(complete("normlab bench st", 2) == "step\n");
  CHECK(complete("normlab bench step --con", 3) == "--config\n");
  CHECK(complete("normlab train --set optim.war", 3) == "optim.warmup_steps=\n");
  Cli installed_copy = run_normlab(dir, "completion zsh");
  CHECK(installed_copy.code == 2);
  // The build writes the same script beside the binary, for cmake --install and the .deb.
  CHECK(read_text(NORMLAB_BINARY_DIR "/normlab.bash") == script.out);
}

TEST_CASE("cli: the man page has every command and option of the command table, in roff") {
  TempDir dir;
  Cli page = run_normlab(dir, "help man");
  REQUIRE(page.code == 0);
  CHECK(page.out.rfind(".TH NORMLAB 1 ", 0) == 0);
  for (const char* section :
       {".SH NAME\n", ".SH SYNOPSIS\n", ".SH COMMANDS\n", ".SH EXIT STATUS\n", ".SH ENVIRONMENT\n"})
    CHECK_MESSAGE(page.out.find(section) != std::string::npos, section);
  for (const char* command : {".SS normlab train\n", ".SS normlab compare\n", ".SS normlab bench step\n",
                              ".SS normlab predict\n", ".SS normlab serve\n", ".SS normlab completion\n"})
    CHECK_MESSAGE(page.out.find(command) != std::string::npos, command);
  CHECK(page.out.find(".B \\-\\-config TEXT") != std::string::npos);
  CHECK(page.out.find(".B \\-\\-accept\\-changed\\-data\n") != std::string::npos);
  CHECK(read_text(NORMLAB_BINARY_DIR "/normlab.1") == page.out);
}
