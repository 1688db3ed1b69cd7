// Tests for the run configuration: strict validation, overrides, defaults, documentation.
#include <doctest/doctest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "normlab/error.hpp"
#include "normlab/io/json_depth.hpp"
#include "normlab/io/suggest.hpp"
#include "normlab/train/config.hpp"
#include "normlab/train/memory.hpp"

#include "support.hpp"

using normlab::test::read_text;
using normlab::test::TempDir;

namespace fs = std::filesystem;
using namespace normlab;
using namespace normlab::train;

namespace {

// The InputError message of load_config(path, overrides), or "" if it succeeds.
std::string load_error(const std::string& path, const std::vector<std::string>& overrides = {}) {
  try {
    load_config(path, overrides);
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

std::string config_error(const std::string& text, const std::vector<std::string>& overrides = {}) {
  TempDir dir;
  return load_error(dir.write("x.json", text), overrides);
}

}  // namespace

TEST_CASE("config: defaults round-trip through JSON") {
  RunConfig defaults;
  nlohmann::json json = to_json(defaults);
  CHECK(json.size() == 4);
  CHECK(json["model"]["d_model"] == 64);
  CHECK(json["task"]["train_file"].is_null());
  CHECK(config_from_json(json, "defaults") == defaults);
  // An empty object means every default; so does an empty section.
  CHECK(config_from_json(nlohmann::json::object(), "empty") == defaults);
  CHECK(config_from_json(nlohmann::json{{"model", nlohmann::json::object()}}, "empty") == defaults);

  // A changed config survives the round trip too (every field is read back).
  RunConfig changed;
  changed.model.d_model = 32;
  changed.model.num_heads = 2;
  changed.model.norm = "rmsnorm";
  changed.model.vocab_size = 40;
  changed.optim.lr = 0.0003;
  changed.optim.decay_all = true;
  changed.train.seed = 12345;
  changed.task.mask_prob = 0.5;
  RunConfig back = config_from_json(to_json(changed), "changed");
  CHECK(back == changed);
  CHECK(back.model.vocab_size == 40);
}

TEST_CASE("config: a key's JSON name reads the member of PyTorch's name") {
  RunConfig c;
  c.model.num_heads = 2;
  c.model.num_layers = 3;
  c.model.dim_feedforward = 48;
  c.optim.lr = 0.02;
  c.task.length_regime = data::LengthRegime::single;
  CHECK(config_value(c, "model.heads") == 2);
  CHECK(config_value(c, "model.layers") == 3);
  CHECK(config_value(c, "model.ffn") == 48);
  CHECK(config_value(c, "optim.lr") == 0.02);
  CHECK(config_value(c, "task.length_regime") == "single");
  CHECK(config_value(c, "task.train_file").is_null());
  // Every key answers, with the value to_json writes.
  const nlohmann::json all = to_json(c);
  for (const std::string& key : config_keys()) {
    INFO(key);
    CHECK(config_value(c, key) == all[key.substr(0, key.find('.'))][key.substr(key.find('.') + 1)]);
  }
  CHECK_THROWS_AS(config_value(c, "model.num_heads"), std::invalid_argument);
  CHECK_THROWS_AS(config_value(c, "lr"), std::invalid_argument);
  // The JSON key a user types sets the member: {"model": {"heads": 8}} is num_heads 8.
  CHECK(config_from_json(nlohmann::json{{"model", {{"heads", 8}, {"d_model", 64}}}}, "x").model.num_heads == 8);
}

TEST_CASE("config: unknown keys are errors naming the closest valid key") {
  CHECK(config_error(R"({"model": {"d_modle": 64}})")
            .find("x.json: model.d_modle: unknown key (did you mean 'model.d_model'?)") != std::string::npos);
  CHECK(config_error(R"({"optim": {"warmup": 10}})")
            .find("optim.warmup: unknown key (did you mean 'optim.warmup_steps'?)") != std::string::npos);
  // A key that lives in another section is suggested with its section.
  CHECK(config_error(R"({"model": {"lr": 0.1}})").find("model.lr: unknown key (did you mean 'optim.lr'?)") !=
        std::string::npos);
  CHECK(config_error(R"({"modle": {}})").find("modle: unknown section (did you mean 'model'?") != std::string::npos);
  CHECK(config_error(R"([1, 2])").find("must be a JSON object") != std::string::npos);
  CHECK(config_error(R"({"model": 3})").find("model: must be a JSON object, got 3") != std::string::npos);
}

TEST_CASE("config: wrong types name the path and the expected type") {
  CHECK(config_error(R"({"optim": {"lr": "fast"}})")
            .find("x.json: optim.lr: must be a number in (0, 10], got \"fast\"") != std::string::npos);
  CHECK(config_error(R"({"model": {"d_model": 64.5}})")
            .find("model.d_model: must be an integer in [1, 4096], got 64.5") != std::string::npos);
  CHECK(config_error(R"({"model": {"final_norm": 1}})").find("model.final_norm: must be true or false, got 1") !=
        std::string::npos);
  CHECK(config_error(R"({"model": {"norm": "layernrom"}})").find("did you mean 'layernorm'?") != std::string::npos);
  CHECK(config_error(R"({"model": {"norm": 3}})").find("model.norm: must be one of \"layernorm\"") !=
        std::string::npos);
  CHECK(config_error(R"({"task": {"train_file": 3}})").find("task.train_file: must be a file path") !=
        std::string::npos);
  CHECK(config_error(R"({"model": {"d_model": null}})").find("model.d_model: must be an integer") != std::string::npos);
}

TEST_CASE("config: model.activation and model.positional are parsed once into the model's enums") {
  const RunConfig c =
      config_from_json(nlohmann::json{{"model", {{"activation", "gelu"}, {"positional", "learned"}}}}, "x");
  CHECK(c.model.activation == nn::Activation::gelu);
  CHECK(c.model.positional == nn::Positional::learned);
  CHECK(RunConfig().model.activation == nn::Activation::relu);
  CHECK(RunConfig().model.positional == nn::Positional::sinusoidal);
  // Written back by name, as the file gave them.
  CHECK(to_json(c)["model"]["activation"] == "gelu");
  CHECK(to_json(c)["model"]["positional"] == "learned");
  CHECK(to_json(RunConfig())["model"]["activation"] == "relu");
  CHECK(to_json(RunConfig())["model"]["positional"] == "sinusoidal");
  // The one-line errors name the file and the key, as before they were enums.
  const std::string activation = config_error(R"({"model": {"activation": "gleu"}})");
  CHECK(activation.find("x.json: model.activation: must be one of \"relu\", \"gelu\", got \"gleu\" (did you "
                        "mean 'gelu'?)") != std::string::npos);
  CHECK(activation.find('\n') == std::string::npos);
  CHECK(config_error(R"({"model": {"positional": 1}})")
            .find("x.json: model.positional: must be one of \"sinusoidal\", \"learned\", got 1") != std::string::npos);
}

TEST_CASE("config: out-of-range values give the allowed range") {
  TempDir dir;
  const std::string path = dir.write("x.json", R"({"optim": {"lr": -1}})");
  CHECK(load_error(path) == path + ": optim.lr: must be a number in (0, 10], got -1");
  CHECK(config_error(R"({"model": {"d_model": 5000}})")
            .find("model.d_model: must be an integer in [1, 4096], got 5000") != std::string::npos);
  CHECK(config_error(R"({"model": {"dropout": 1.0}})").find("model.dropout: must be a number in [0, 1), got 1.0") !=
        std::string::npos);
  CHECK(config_error(R"({"train": {"steps": 0}})").find("train.steps: must be an integer in [1, 100000000], got 0") !=
        std::string::npos);
  CHECK(config_error(R"({"train": {"batch_size": 100000}})").find("train.batch_size") != std::string::npos);
  CHECK(config_error(R"({"train": {"seed": -1}})").find("train.seed: must be an integer in [0, ") != std::string::npos);
  CHECK(config_error(R"({"model": {"vocab_size": 0}})")
            .find("model.vocab_size: must be an integer in [1, 65536] or null") != std::string::npos);
  // Boundaries: closed ends are accepted, open ends refused.
  CHECK(config_error(R"({"optim": {"lr": 10}})").empty());
  CHECK(config_error(R"({"optim": {"beta2": 0}})").empty());
  CHECK(!config_error(R"({"optim": {"beta2": 1}})").empty());
}

TEST_CASE("config: cross-field rules") {
  CHECK(config_error(R"({"model": {"d_model": 65, "heads": 4}})")
            .find("x.json: model.d_model: must be divisible by model.heads (got 65 and 4)") != std::string::npos);
  CHECK(config_error(R"({"task": {"min_len": 5, "max_len": 3}})")
            .find("task.max_len: must be >= task.min_len (got 3 and 5)") != std::string::npos);
  CHECK(config_error(R"({"task": {"eval_max_len": 200}, "model": {"max_len": 128}})")
            .find("task.eval_max_len: must be <= model.max_len (got 200 and 128)") != std::string::npos);
  CHECK(config_error(R"({"task": {"max_len": 64}, "model": {"max_len": 32}})")
            .find("task.max_len: must be <= model.max_len (got 64 and 32)") != std::string::npos);
  CHECK(config_error(R"({"task": {"name": "mlm_text"}})").find("task.train_file: the mlm_text task has no generator") !=
        std::string::npos);
  CHECK(config_error(R"({"task": {"mask_prob": 0.8, "random_prob": 0.3}})").find("task.random_prob") !=
        std::string::npos);
  CHECK(config_error(R"({"model": {"vocab_size": 5}})")
            .find("model.vocab_size: must be at least the reverse task's 10 input symbols (got 5)") !=
        std::string::npos);
  // Every size within its own range, but together far too large to allocate: a valid config, whose
  // run is refused before it allocates anything (train/memory.hpp; with the file's name on the
  // command line: test_memory.cpp).
  const std::string huge_text =
      R"({"model": {"d_model": 4096, "heads": 64, "layers": 64, "ffn": 16384, "max_len": 4096},
                                    "task": {"max_len": 4096, "eval_max_len": 4096}, "train": {"batch_size": 4096}})";
  CHECK(config_error(huge_text).empty());
  const RunConfig huge = config_from_json(nlohmann::json::parse(huge_text), "x.json", ".");
  CHECK_THROWS_WITH_AS(fits_in_memory(huge), doctest::Contains("model: this run would need about"), InputError);
  CHECK_THROWS_WITH_AS(fits_in_memory(huge), doctest::Contains("GiB"), InputError);
}

TEST_CASE("config: --set overrides are parsed as JSON or strings and validated") {
  TempDir dir;
  const std::string path = dir.write("x.json", R"({"model": {"d_model": 32, "heads": 4}})");
  RunConfig config = load_config(path, {"optim.lr=0.01", "model.norm=rmsnorm", "train.seed=7", "model.final_norm=false",
                                        "model.vocab_size=12"});
  CHECK(config.optim.lr == doctest::Approx(0.01));
  CHECK(config.model.norm == "rmsnorm");
  CHECK(config.train.seed == 7);
  CHECK(config.model.final_norm == false);
  CHECK(config.model.vocab_size == 12);
  CHECK(load_config(path, {"model.vocab_size=null"}).model.vocab_size == std::nullopt);
  // A later --set wins.
  CHECK(load_config(path, {"train.steps=5", "train.steps=6"}).train.steps == 6);

  CHECK(load_error(path, {"optim.lr=abc"}) == "--set optim.lr=abc: optim.lr: must be a number in (0, 10], got \"abc\"");
  CHECK(load_error(path, {"optim.lr"}).find("--set optim.lr: expected section.key=value") != std::string::npos);
  CHECK(load_error(path, {"lr=0.1"}).find("--set lr=0.1: lr: expected section.key (did you mean 'optim.lr'?)") !=
        std::string::npos);
  CHECK(load_error(path, {"model.d_modle=3"})
            .find("--set model.d_modle=3: model.d_modle: unknown key (did you mean 'model.d_model'?)") !=
        std::string::npos);
  CHECK(load_error(path, {"train.data_file=x"}).find("unknown key") != std::string::npos);
  // Cross-field rules apply to the result: a --set can repair or break the file's combination.
  CHECK(load_error(path, {"model.heads=5"}).find("model.d_model: must be divisible by model.heads (got 32 and 5)") !=
        std::string::npos);
  const std::string odd = dir.write("odd.json", R"({"model": {"d_model": 30, "heads": 4}})");
  CHECK(!load_error(odd).empty());
  CHECK(load_config(odd, {"model.d_model=32"}).model.d_model == 32);
}

TEST_CASE("config: file errors name the file") {
  TempDir dir;
  const std::string missing = (dir.path / "missing.json").string();
  CHECK(load_error(missing).find(missing) == 0);
  std::string bad = config_error("{\"model\": {\"d_model\": 64,}}");
  CHECK(bad.find("x.json: invalid JSON: parse error at line 1") != std::string::npos);
  CHECK(config_error(R"({"model": {"d_model": 64, "d_model": 32}})").find("x.json: model.d_model: duplicate key") !=
        std::string::npos);
  CHECK(config_error(R"({"model": {}, "model": {}})").find("x.json: model: duplicate key") != std::string::npos);
}

TEST_CASE("config: data paths are relative to the config file and must exist") {
  TempDir dir;
  fs::create_directories(dir.path / "configs");
  fs::create_directories(dir.path / "data");
  dir.write("data/train.jsonl", "{\"tokens\":[\"1\"],\"targets\":[\"1\"]}\n");
  const std::string path = dir.write("configs/x.json", R"({"task": {"train_file": "../data/train.jsonl"}})");
  RunConfig config = load_config(path);
  REQUIRE(config.task.train_file);
  CHECK(fs::path(*config.task.train_file).is_absolute());
  CHECK(fs::equivalent(*config.task.train_file, dir.path / "data" / "train.jsonl"));
  // The resolved config reloads to the same thing from anywhere.
  CHECK(config_from_json(to_json(config), "resolved") == config);

  const std::string bad = dir.write("configs/y.json", R"({"task": {"valid_file": "nope.jsonl"}})");
  CHECK(load_error(bad).find("y.json: task.valid_file: no such file: ") != std::string::npos);
  // Without the existence check (a saved run whose data moved) the path is kept as written.
  nlohmann::json saved = {{"task", {{"valid_file", "/nowhere/valid.jsonl"}}}};
  CHECK(*config_from_json(saved, "saved", ".", false).task.valid_file == "/nowhere/valid.jsonl");
}

TEST_CASE("config: resume may change only how long and how often") {
  RunConfig stored;
  RunConfig requested = stored;
  requested.train.steps = 5000;
  requested.train.threads = 2;
  requested.train.log_every = 1;
  CHECK_NOTHROW(check_resume_compatible(stored, requested, "run"));
  requested.optim.lr = 0.5;
  try {
    check_resume_compatible(stored, requested, "run");
    FAIL("expected an InputError");
  } catch (const InputError& e) {
    CHECK(std::string(e.what()).find("run: optim.lr: cannot change on resume (the run has 0.001, requested 0.5)") !=
          std::string::npos);
  }
}

TEST_CASE("io: edit distance and the closest candidate") {
  CHECK(io::edit_distance("", "") == 0);
  CHECK(io::edit_distance("kitten", "sitting") == 3);
  CHECK(io::edit_distance("d_modle", "d_model") == 2);
  CHECK(io::edit_distance("abc", "") == 3);
  CHECK(io::closest("warmup", {"warmup_steps", "lr"}) == "warmup_steps");
  CHECK(io::closest("d_modle", {"heads", "d_model"}) == "d_model");
}

TEST_CASE("config: docs/config.md documents every key") {
  const std::string docs = read_text(std::string(NORMLAB_SOURCE_DIR) + "/docs/config.md");
  REQUIRE(!docs.empty());
  for (const std::string& key : config_keys()) {
    INFO(key);
    CHECK(docs.find("`" + key + "`") != std::string::npos);
  }
}

TEST_CASE("config: the shipped configs load") {
  for (const char* name :
       {"reverse", "sort", "brackets", "majority", "kjv-mlm", "bench-step", "bench-demo", "bench-b32-short"}) {
    INFO(name);
    const std::string path = std::string(NORMLAB_SOURCE_DIR) + "/configs/" + name + ".json";
    RunConfig config;
    CHECK_NOTHROW(config = load_config(path));
    CHECK(config.train.steps <= 2000);
  }
}

TEST_CASE("json depth: brackets in strings do not count - deep nesting is refused before parsing") {
  using normlab::io::json_nesting_depth;
  CHECK(json_nesting_depth("") == 0);
  CHECK(json_nesting_depth("3") == 0);
  CHECK(json_nesting_depth(R"({"a": [1, {"b": [2]}]})") == 4);
  CHECK(json_nesting_depth(R"({"a": "[[[[{{{{", "b": "\"[[["})") == 1);
  CHECK(json_nesting_depth("]]]][[") == 2);  // stray closers do not go below zero

  // 200 000 levels: parsing is fine for nlohmann, but dumping or copying such a value recursed once
  // per level and overflowed the stack (seen under AddressSanitizer with a fuzz regression input).
  const std::string deep = std::string(200000, '[') + std::string(200000, ']');
  const std::string message = config_error(R"({"model": )" + deep + "}");
  CHECK(message.find("x.json: JSON nested deeper than 64 levels") != std::string::npos);
  // 64 levels (the outer object and 63 lists) are within the bound: refused, but for the type.
  const std::string at_limit = config_error(R"({"model": )" + std::string(63, '[') + std::string(63, ']') + "}");
  CHECK(at_limit.find("nested deeper") == std::string::npos);
  CHECK(at_limit.find("model") != std::string::npos);
  CHECK(load_error(TempDir().write("ok.json", "{}"), {"model.d_model=" + deep}).find("model.d_model") !=
        std::string::npos);  // a too-deep --set value is taken as a string, then refused as one
}
