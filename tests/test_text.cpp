// Text from outside (io/text.hpp): invalid UTF-8 refused in data files with their line and read as
// U+FFFD in predict's text, control bytes escaped in every message that echoes input, CSV cells a
// spreadsheet would run neutralised, standard input bounded like a file, and special files (a FIFO,
// /dev/zero, a directory) refused wherever a path is read.
#include <doctest/doctest.h>
#include <fmt/format.h>
#include <sys/stat.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "input_error.hpp"
#include "normlab/data/jsonl.hpp"
#include "normlab/data/task.hpp"
#include "normlab/error.hpp"
#include "normlab/io/atomic_file.hpp"
#include "normlab/io/sha256.hpp"
#include "normlab/io/text.hpp"
#include "support.hpp"

using namespace normlab;
using nlohmann::json;
using normlab::test::Child;
using normlab::test::Cli;
using normlab::test::error_of;
using normlab::test::read_text;
using normlab::test::run_normlab;
using normlab::test::TempDir;

namespace {

// `normlab ARGS...` with its arguments passed as they are (no shell: any byte), stdout and stderr
// kept. A hung child is killed at the deadline, so a regression fails instead of hanging the suite.
Cli run_args(const TempDir& dir, const std::vector<std::string>& args) {
  const std::string out = dir.sub("args_stdout.txt"), err = dir.sub("args_stderr.txt");
  std::filesystem::remove(out);
  std::filesystem::remove(err);
  Child child(args, out, err);
  const int code = child.wait(std::chrono::seconds(60));
  return {code, read_text(out), read_text(err)};
}

bool has_control_bytes(const std::string& text) {
  for (char c : text)
    if ((static_cast<unsigned char>(c) < 0x20 && c != '\n') || c == '\x7f') return true;
  return false;
}

int64_t lines_of(const std::string& text) { return std::count(text.begin(), text.end(), '\n'); }

// A sequence_classification task read from CSV, for the loaders.
data::Task csv_schema() {
  data::Task schema;
  schema.name = "sequence_classification";
  schema.kind = data::TaskKind::sequence_classification;
  schema.target_kind = data::TargetKind::per_sequence;
  schema.max_seq_len = 16;
  return schema;
}

// A three-step sequence_classification run trained on a CSV file, in DIR/run.
void train_csv_run(const TempDir& dir) {
  dir.write("train.csv", "text,label\ngood film,pos\nbad film,neg\ngood good,pos\nbad bad,neg\n");
  dir.write("config.json", R"({
    "model": {"d_model": 16, "heads": 2, "layers": 1, "ffn": 32, "max_len": 8},
    "task": {"name": "sequence_classification", "train_file": "train.csv", "valid_file": "train.csv",
             "max_len": 8, "eval_max_len": 8, "bucket_width": 4, "max_file_mb": 1},
    "optim": {"lr": 0.01, "warmup_steps": 1},
    "train": {"steps": 3, "batch_size": 2, "eval_every": 0, "threads": 1}})");
  const Cli trained =
      run_normlab(dir, fmt::format("train --config {} --out {}", dir.sub("config.json"), dir.sub("run")));
  REQUIRE_MESSAGE(trained.code == 0, trained.err);
}

}  // namespace

TEST_CASE("text: UTF-8 is validated per character, and invalid bytes are replaced per maximal subpart") {
  CHECK(io::utf8_char_length("\xf0\x9f\x98\x80", 0) == 4);
  CHECK(io::utf8_char_length("\xed\xa0\x80", 0) == 0);  // a UTF-16 surrogate
  CHECK(io::invalid_utf8_at("abc \xc3\xa9 \xff") == 7);
  CHECK(io::invalid_utf8_at("caf\xc3\xa9") == std::string::npos);
  // Two stray bytes are two U+FFFD; a truncated three-byte character (E2 82) is one.
  int64_t replaced = 0;
  CHECK(io::replace_invalid_utf8("good \xff\xfe bad", &replaced) == "good \xef\xbf\xbd\xef\xbf\xbd bad");
  CHECK(replaced == 2);
  CHECK(io::replace_invalid_utf8("a\xe2\x82z", &replaced) == "a\xef\xbf\xbdz");
  CHECK(replaced == 1);
  CHECK(io::replace_invalid_utf8("caf\xc3\xa9", &replaced) == "caf\xc3\xa9");
  CHECK(replaced == 0);
  CHECK(error_of([] { io::require_utf8("ok \xc0\xaf", "--input"); }) == "--input: invalid UTF-8 (byte 0xc0 at byte 4)");
  CHECK(error_of([] { io::require_utf8_lines("a,b\nc,d\nok,caf\xe9\n", "f.csv"); }) ==
        "f.csv:3: invalid UTF-8 (byte 0xe9 at column 7; the file must be UTF-8 text)");
  CHECK(error_of([] { io::require_utf8_lines("\xff", "f.csv"); }) ==
        "f.csv:1: invalid UTF-8 (byte 0xff at column 1; the file must be UTF-8 text)");
}

TEST_CASE("text: control bytes in echoed input are escaped, printable UTF-8 is kept") {
  CHECK(io::escape_control("a\x1b[31mb\x07") == "a\\x1b[31mb\\x07");
  CHECK(io::escape_control(std::string("nul\0del\x7f", 8)) == "nul\\x00del\\x7f");
  CHECK(io::escape_control("c1 \xc2\x9b csi") == "c1 \\u009b csi");
  CHECK(io::escape_control("caf\xc3\xa9 \xe2\x9c\x93 \xff") == "caf\xc3\xa9 \xe2\x9c\x93 \\xff");
  CHECK(io::escape_control("tab\tline\n") == "tab\\x09line\\x0a");
  CHECK(io::escape_control_lines("one\x1b\ntwo") == "one\\x1b\ntwo");
}

TEST_CASE("text: a CSV cell a spreadsheet would run is neutralised, a number stays a number") {
  for (const char* formula : {"=cmd|' /C calc'!A0", "@SUM(1)", "+SUM(A1)", "-2+3", "\t=1", "\r=1", "  =1", "-inf", "-"})
    CHECK_MESSAGE(io::reads_as_formula(formula), formula);
  for (const char* plain : {"-0.5", "+1e-3", "42", "1.5E+10", "good film", "", "   ", "a=b", "3-2"})
    CHECK_MESSAGE(!io::reads_as_formula(plain), plain);
  CHECK(io::csv_field("=cmd|' /C calc'!A0") == "'=cmd|' /C calc'!A0");
  CHECK(io::csv_field("@SUM(1)") == "'@SUM(1)");
  CHECK(io::csv_field("\t=1") == "'\t=1");
  CHECK(io::csv_field(" =1,2") == "\"' =1,2\"");  // a leading space does not hide a formula
  CHECK(io::csv_field("-0.5") == "-0.5");
  CHECK(io::csv_field("say \"hi\", then") == "\"say \"\"hi\"\", then\"");
  CHECK(io::csv_field("bad \xff") == "bad \xef\xbf\xbd");
}

TEST_CASE("text: a data file with invalid UTF-8 is refused with its line, in every format") {
  TempDir dir;
  const data::Task schema = csv_schema();
  const std::string csv = dir.write("bad.csv", "text,label\ngood film,pos\nbad \xff\xfe film,neg\n");
  CHECK(error_of([&] { data::load_string_examples(csv, schema); }) ==
        csv + ":3: invalid UTF-8 (byte 0xff at column 5; the file must be UTF-8 text)");
  const std::string tsv = dir.write("bad.tsv", "text\tlabel\nok\tpos\n\x80x\tneg\n");
  CHECK(error_of([&] { data::load_string_examples(tsv, schema); }) ==
        tsv + ":3: invalid UTF-8 (byte 0x80 at column 1; the file must be UTF-8 text)");
  // A quoted field's line break counts: the bad byte is on the file's fourth line.
  const std::string quoted = dir.write("quoted.csv", "text,label\n\"two\nlines\",pos\nbad\xc3,neg\n");
  CHECK(error_of([&] { data::load_string_examples(quoted, schema); }) ==
        quoted + ":4: invalid UTF-8 (byte 0xc3 at column 4; the file must be UTF-8 text)");
  data::Task tagging = schema;
  tagging.name = "token_classification";
  tagging.kind = data::TaskKind::token_classification;
  tagging.target_kind = data::TargetKind::per_token;
  const std::string conll = dir.write("bad.conll", "the O\nfilm O\n\ncaf\xe9 B\n");
  CHECK(error_of([&] { data::load_string_examples(conll, tagging); }) ==
        conll + ":4: invalid UTF-8 (byte 0xe9 at column 4; the file must be UTF-8 text)");
  const std::string jsonl =
      dir.write("bad.jsonl",
                "{\"tokens\": \"good\", \"label\": \"pos\"}\n{\"tokens\": \"\xff\", \"label\": \"neg\"}\n");
  CHECK(error_of([&] { data::load_string_examples(jsonl, schema); }) ==
        jsonl + ":2: invalid UTF-8 (byte 0xff at column 13; the file must be UTF-8 text)");
}

TEST_CASE("text: special files are refused by the one open, which never waits") {
  TempDir dir;
  const std::string fifo = dir.sub("fifo");
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  // No writer: a blocking open would wait here for ever; the refusal comes at once.
  CHECK(error_of([&] { io::open_regular_file(fifo); }) == fifo + ": not a regular file (a FIFO)");
  CHECK(error_of([&] { io::read_file(fifo, 100); }) == fifo + ": not a regular file (a FIFO)");
  CHECK(error_of([&] { io::sha256_file(fifo); }) == fifo + ": not a regular file (a FIFO)");
  CHECK(error_of([] { io::sha256_file("/dev/zero"); }) == "/dev/zero: not a regular file (a character device)");
  CHECK(error_of([&] { io::read_file(dir.path.string(), 100); }) ==
        dir.path.string() + ": not a regular file (a directory)");
  CHECK(error_of([&] { io::open_regular_stream(dir.sub("missing")); }) ==
        dir.sub("missing") + ": cannot open: No such file or directory");
  const std::string file = dir.write("lines.txt", "one\ntwo\n");
  const std::unique_ptr<std::istream> in = io::open_regular_stream(file);
  std::string first, second;
  CHECK(std::getline(*in, first));
  CHECK(std::getline(*in, second));
  CHECK(first == "one");
  CHECK(second == "two");
  // Standard input and pipes: read in chunks, refused as soon as they pass the limit.
  int fds[2];
  REQUIRE(::pipe(fds) == 0);
  REQUIRE(::write(fds[1], "0123456789", 10) == 10);
  ::close(fds[1]);
  CHECK(error_of([&] { io::read_stream(fds[0], 9, "standard input"); }) ==
        "standard input: more than 9 bytes, larger than the limit of 9 bytes");
  ::close(fds[0]);
  REQUIRE(::pipe(fds) == 0);
  REQUIRE(::write(fds[1], "0123456789", 10) == 10);
  ::close(fds[1]);
  CHECK(io::read_stream(fds[0], 10, "standard input") == "0123456789");
  ::close(fds[0]);
}

TEST_CASE("text cli: invalid UTF-8 is read as U+FFFD by predict and refused with its line by train and eval") {
  TempDir dir;
  train_csv_run(dir);
  const std::string run = dir.sub("run");
  // predict --input: answered (never nlohmann's type_error 316), the input read with U+FFFD and said so.
  const Cli one = run_args(dir, {"predict", "--run", run, "--input", "good \xff\xfe", "--json"});
  REQUIRE_MESSAGE(one.code == 0, one.err);
  const json answer = json::parse(one.out);
  CHECK(answer.at("input") == "good \xef\xbf\xbd\xef\xbf\xbd");
  CHECK(answer.at("read_as") == json{"good", "[UNK]"});
  CHECK(answer.at("warnings") == json{"--input: 2 invalid UTF-8 sequences read as U+FFFD"});
  // predict --lines: each line's bad bytes replaced, every output line valid JSON.
  dir.write("inputs.txt", "bad \xff film\ngood film\n");
  const Cli lines = run_args(dir, {"predict", "--run", run, "--lines", dir.sub("inputs.txt")});
  REQUIRE_MESSAGE(lines.code == 0, lines.err);
  CHECK(json::parse(lines.out.substr(0, lines.out.find('\n'))).at("read_as") == json{"bad", "[UNK]", "film"});
  CHECK(lines.err.find("normlab: warning: 1 line held invalid UTF-8, read as U+FFFD\n") != std::string::npos);
  // eval --data and train: a file with one invalid-UTF-8 line is refused with its line.
  const std::string bad = dir.write("bad.csv", "text,label\ngood film,pos\nbad \xff film,neg\n");
  const std::string refusal = bad + ":3: invalid UTF-8 (byte 0xff at column 5; the file must be UTF-8 text)";
  const Cli eval_bad = run_args(dir, {"eval", "--run", run, "--data", bad});
  CHECK(eval_bad.code == 2);
  CHECK(eval_bad.err == "normlab: error: " + refusal + "\n");
  const Cli train_bad = run_args(dir, {"train", "--config", dir.sub("config.json"), "--out", dir.sub("run_bad"),
                                       "--set", "task.train_file=" + bad});
  CHECK(train_bad.code == 2);
  CHECK(train_bad.err.find("normlab: error: " + refusal + "\n") != std::string::npos);
  CHECK(lines_of(train_bad.err) == 1);
}

TEST_CASE("text cli: predict --format csv neutralises formula cells and writes valid UTF-8") {
  TempDir dir;
  train_csv_run(dir);
  dir.write("inputs.txt", "=cmd|' /C calc'!A0\n@SUM(1)\n+SUM(1)\n\t=1 good\nbad \xff film\n-0.5\n");
  const Cli csv =
      run_args(dir, {"predict", "--run", dir.sub("run"), "--lines", dir.sub("inputs.txt"), "--format", "csv"});
  REQUIRE_MESSAGE(csv.code == 0, csv.err);
  CHECK(io::invalid_utf8_at(csv.out) == std::string::npos);
  std::vector<std::string> rows;
  for (size_t start = 0; start < csv.out.size();) {
    const size_t end = csv.out.find('\n', start);
    rows.push_back(csv.out.substr(start, end - start));
    start = end + 1;
  }
  REQUIRE(rows.size() == 7);
  CHECK(rows[1].rfind("1,'=cmd|' /C calc'!A0,3,[UNK] [UNK] [UNK],", 0) == 0);
  CHECK(rows[2].rfind("2,'@SUM(1),1,[UNK],", 0) == 0);
  CHECK(rows[3].rfind("3,'+SUM(1),1,[UNK],", 0) == 0);
  CHECK(rows[4].rfind("4,'\t=1 good,1,[UNK] good,", 0) == 0);
  CHECK(rows[5].rfind("5,bad \xef\xbf\xbd film,1,bad [UNK] film,", 0) == 0);
  CHECK(rows[6].rfind("6,-0.5,1,[UNK],", 0) == 0);
}

TEST_CASE("text cli: predict --lines - is bounded by the run's task.max_file_mb") {
  TempDir dir;
  train_csv_run(dir);  // task.max_file_mb 1
  std::string big;
  while (big.size() <= (size_t{1} << 20)) big += "good film\n";
  dir.write("big.txt", big);
  const Cli refused =
      run_normlab(dir, fmt::format("predict --run {} --lines - < {}", dir.sub("run"), dir.sub("big.txt")));
  CHECK(refused.code == 2);
  CHECK(refused.err ==
        "normlab: error: standard input: more than 1048576 bytes, larger than the limit of 1048576 bytes\n");
  CHECK(refused.out.empty());
  big.resize(1000);
  dir.write("small.txt", big);
  const Cli small =
      run_normlab(dir, fmt::format("predict --run {} --lines - < {}", dir.sub("run"), dir.sub("small.txt")));
  CHECK(small.code == 0);
  CHECK(lines_of(small.out) == 100);
}

TEST_CASE("text cli: eval --data and predict --data refuse a FIFO and /dev/zero at once") {
  TempDir dir;
  train_csv_run(dir);
  const std::string run = dir.sub("run");
  // No writer holds the FIFO: a blocking open would wait for ever; run_args' deadline kills such a
  // regression, so it fails here instead of hanging the suite.
  const std::string fifo = dir.sub("fifo");
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  for (const std::string verb : {"eval", "predict"}) {
    const Cli refused = run_args(dir, {verb, "--run", run, "--data", fifo});
    CHECK(refused.code == 2);
    CHECK(refused.err == "normlab: error: " + fifo + ": not a regular file (a FIFO)\n");
    const Cli zero = run_args(dir, {verb, "--run", run, "--data", "/dev/zero"});
    CHECK(zero.code == 2);
    CHECK(zero.err == "normlab: error: /dev/zero: not a regular file (a character device)\n");
  }
}

TEST_CASE("text cli: predict echoes its input with control bytes escaped") {
  TempDir dir;
  train_csv_run(dir);
  const Cli plain = run_args(dir, {"predict", "--run", dir.sub("run"), "--input", "good\x1b[2J film"});
  CHECK(plain.code == 0);
  CHECK(plain.out.find("input:     good\\x1b[2J film\n") != std::string::npos);
  CHECK_FALSE(has_control_bytes(plain.out));
}

TEST_CASE("text cli: messages that echo a CSV header, a config key, a --set value or a path escape control bytes") {
  TempDir dir;
  dir.write("config.json", R"({
    "model": {"d_model": 16, "heads": 2, "layers": 1, "ffn": 32, "max_len": 8},
    "task": {"name": "sequence_classification", "train_file": "header.csv", "valid_file": "header.csv",
             "max_len": 8, "eval_max_len": 8, "bucket_width": 4},
    "optim": {"lr": 0.01, "warmup_steps": 1},
    "train": {"steps": 3, "batch_size": 2, "eval_every": 0, "threads": 1}})");
  dir.write("header.csv", "te\x1b[31mxt\x07,label\ngood,pos\n");
  const Cli header = run_args(dir, {"train", "--config", dir.sub("config.json"), "--out", dir.sub("run")});
  CHECK(header.code == 2);
  CHECK(header.err == "normlab: error: " + dir.sub("header.csv") +
                          ":1: no column \"text\" in the header (columns: \"te\\x1b[31mxt\\x07\", \"label\"); name the "
                          "column with task.text_field\n");
  dir.write("key.json", "{\"model\": {\"d_\\u001b]0;owned\\u0007model\": 16}}");
  const Cli key = run_args(dir, {"train", "--config", dir.sub("key.json"), "--out", dir.sub("run2")});
  CHECK(key.code == 2);
  CHECK(key.err.find("model.d_\\x1b]0;owned\\x07model: unknown key") != std::string::npos);
  CHECK_FALSE(has_control_bytes(key.err));
  const Cli set = run_args(dir, {"train", "--config", dir.sub("config.json"), "--out", dir.sub("run3"), "--set",
                                 "task.text_field=\xff\x1b"});
  CHECK(set.code == 2);
  CHECK(set.err == "normlab: error: --set task.text_field=\\xff\\x1b: invalid UTF-8 (byte 0xff at byte 17)\n");
  const std::string odd = dir.sub("no\x1b[2Jsuch.json");
  const Cli path = run_args(dir, {"compare", "--config", odd, "--out", dir.sub("cmp")});
  CHECK(path.code == 2);
  CHECK_FALSE(has_control_bytes(path.err));
  CHECK(lines_of(path.err) == 1);
  CHECK(path.err.find("no\\x1b[2Jsuch.json") != std::string::npos);
  const Cli arg = run_args(dir, {"eval", "--bogus\x1b[2J"});
  CHECK(arg.code == 2);
  CHECK_FALSE(has_control_bytes(arg.err));
}

TEST_CASE("text cli: compare --config and report refuse a FIFO at once") {
  TempDir dir;
  const std::string fifo = dir.sub("compare.json");
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  const Cli compare = run_args(dir, {"compare", "--config", fifo, "--out", dir.sub("out")});
  CHECK(compare.code == 2);
  CHECK(compare.err == "normlab: error: " + fifo + ": not a regular file (a FIFO)\n");
  // A run directory whose metrics.jsonl is a FIFO: report names it instead of waiting for a writer.
  std::filesystem::create_directories(dir.path / "runs" / "a");
  dir.write("runs/a/config.json", normlab::test::kTwoStepRun);
  REQUIRE(::mkfifo(dir.sub("runs/a/metrics.jsonl").c_str(), 0600) == 0);
  const Cli report = run_args(dir, {"report", dir.sub("runs/a"), "--out", dir.sub("report")});
  CHECK(report.code == 2);
  CHECK(report.err.find(dir.sub("runs/a/metrics.jsonl") + ": not a regular file (a FIFO)") != std::string::npos);
}

TEST_CASE("text cli: predict --lines streams a group of batches at a time, line numbers running on, --out whole") {
  TempDir dir;
  train_csv_run(dir);
  std::string lines;
  for (int i = 0; i < 10000; ++i) lines += i % 2 ? "good film\n" : "bad film\n";
  dir.write("many.txt", lines);
  dir.write("out.jsonl", "old\n");
  // --batch-size 1: groups of 8192 lines, so line 10000 is in the second group.
  const Cli out = run_args(dir, {"predict", "--run", dir.sub("run"), "--lines", dir.sub("many.txt"), "--batch-size",
                                 "1", "--out", dir.sub("out.jsonl")});
  REQUIRE_MESSAGE(out.code == 0, out.err);
  const std::string written = read_text(dir.sub("out.jsonl"));
  CHECK(lines_of(written) == 10000);
  const size_t last = written.rfind('\n', written.size() - 2) + 1;
  CHECK(json::parse(written.substr(last)).at("line") == 10000);
  CHECK(json::parse(written.substr(last)).at("input") == "good film");
  CHECK(out.err == "normlab: 10000 inputs predicted by the best checkpoint (best.safetensors, step 3); written to " +
                       dir.sub("out.jsonl") + "\n");
  for (const auto& entry : std::filesystem::directory_iterator(dir.path))
    CHECK_MESSAGE(entry.path().filename().string().find(".tmp.") == std::string::npos, entry.path().string());
}

TEST_CASE("io: AtomicFileWriter publishes its pieces whole on commit and nothing without one") {
  TempDir dir;
  const std::string path = dir.write("target.txt", "old");
  {
    io::AtomicFileWriter writer(path);
    writer.write("new ");
    CHECK(read_text(path) == "old");  // the pieces go to the temporary
  }
  CHECK(read_text(path) == "old");
  for (const auto& entry : std::filesystem::directory_iterator(dir.path))
    CHECK_MESSAGE(entry.path().filename() == "target.txt", entry.path().string());
  io::AtomicFileWriter writer(path);
  writer.write("new ");
  writer.write(std::string_view("text"));
  writer.commit();
  CHECK(read_text(path) == "new text");
  CHECK(error_of([&] {
          io::AtomicFileWriter(dir.sub("missing/x.txt"));
        }).rfind(dir.sub("missing/x.txt") + ": cannot write: ", 0) == 0);
}

TEST_CASE("text cli: eval echoes labels and paths from the data with their control bytes escaped") {
  TempDir dir;
  dir.write("train.csv",
            "text,label\ngood film,p\x1b]0;x\x07os\nbad film,neg\ngood good,p\x1b]0;x\x07os\nbad bad,neg\n");
  dir.write("config.json", R"({
    "model": {"d_model": 16, "heads": 2, "layers": 1, "ffn": 32, "max_len": 8},
    "task": {"name": "sequence_classification", "train_file": "train.csv", "valid_file": "train.csv",
             "max_len": 8, "eval_max_len": 8, "bucket_width": 4},
    "optim": {"lr": 0.01, "warmup_steps": 1},
    "train": {"steps": 3, "batch_size": 2, "eval_every": 0, "threads": 1}})");
  const Cli trained = run_args(dir, {"train", "--config", dir.sub("config.json"), "--out", dir.sub("run")});
  REQUIRE_MESSAGE(trained.code == 0, trained.err);
  CHECK_FALSE(has_control_bytes(trained.err));
  const Cli eval = run_args(dir, {"eval", "--run", dir.sub("run")});
  REQUIRE(eval.code == 0);
  CHECK(eval.out.find("p\\x1b]0;x\\x07os") != std::string::npos);
  CHECK_FALSE(has_control_bytes(eval.out));
}
