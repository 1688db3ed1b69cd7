// The file:line a CSV record is known by (in errors, in the examples a run logs) is the line its
// record starts on in the file as an editor shows it: a newline inside a quoted field is a line of
// the file, so every later record's line counts it.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "normlab/data/formats.hpp"
#include "normlab/error.hpp"

using namespace normlab;

namespace {

std::vector<std::string> record_lines(const std::string& csv) {
  std::vector<std::string> where;
  data::for_each_delimited_record(csv, "f.csv", ',', true, "text", "label", nullptr,
                                  [&](data::TextRecord&& r) { where.push_back(r.where); });
  return where;
}

}  // namespace

TEST_CASE("csv: a newline inside a quoted field counts for every later record's file:line") {
  // line 1: header; 2: a; 3-5: one record over three lines; 6: c; 7-8: one record over two (CRLF); 9: e
  const std::string csv =
      "text,label\n"
      "a,x\n"
      "\"b one\nb two\nb three\",y\n"
      "c,x\n"
      "\"d one\r\nd two\",y\r\n"
      "e,x\n";
  CHECK(record_lines(csv) == std::vector<std::string>{"f.csv:2", "f.csv:3", "f.csv:6", "f.csv:7", "f.csv:9"});
  // An error after them names the line an editor shows it on.
  CHECK_THROWS_WITH_AS(record_lines(csv + "f,x,extra\n"), doctest::Contains("f.csv:10: 3 fields"), InputError);
  CHECK_THROWS_WITH_AS(record_lines(csv + "\"g,x\n"), doctest::Contains("f.csv:10: a quoted field is not closed"),
                       InputError);
}
