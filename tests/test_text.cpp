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

TEST_CASE("text: a CSV cell a spreadsheet would run is neutralised; numbers stay numbers") {
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
