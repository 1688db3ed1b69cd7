#include "normlab/io/text.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "normlab/error.hpp"

namespace normlab::io {

namespace {

// The character at text[pos]: how many bytes a valid one takes, or, for invalid bytes, how many of
// them form the maximal subpart (a lead byte and the continuation bytes that fit it so far).
struct Step {
  size_t length = 0;
  bool valid = false;
};

Step utf8_step(std::string_view text, size_t pos) {
  auto byte = [&](size_t i) { return pos + i < text.size() ? static_cast<unsigned char>(text[pos + i]) : 0u; };
  const unsigned lead = byte(0);
  if (lead < 0x80) return {1, true};
  size_t needed = 0;
  unsigned lo = 0x80, hi = 0xbf;  // the second byte's range; later bytes are always 80..BF
  if (lead >= 0xc2 && lead <= 0xdf) {
    needed = 1;
  } else if (lead >= 0xe0 && lead <= 0xef) {
    needed = 2;
    if (lead == 0xe0) lo = 0xa0;  // no overlong forms
    if (lead == 0xed) hi = 0x9f;  // no UTF-16 surrogates
  } else if (lead >= 0xf0 && lead <= 0xf4) {
    needed = 3;
    if (lead == 0xf0) lo = 0x90;  // no overlong forms
    if (lead == 0xf4) hi = 0x8f;  // nothing past U+10FFFF
  } else {
    return {1, false};  // a stray continuation byte, C0/C1 (overlong), F5..FF
  }
  for (size_t i = 1; i <= needed; ++i) {
    const unsigned b = byte(i);
    const bool fits = pos + i < text.size() && (i == 1 ? b >= lo && b <= hi : b >= 0x80 && b <= 0xbf);
    if (!fits) return {i, false};
  }
  return {needed + 1, true};
}

bool is_number(std::string_view text) {
  size_t i = 0;
  auto digits = [&] {
    const size_t start = i;
    while (i < text.size() && text[i] >= '0' && text[i] <= '9') ++i;
    return i - start;
  };
  if (i < text.size() && (text[i] == '+' || text[i] == '-')) ++i;
  size_t mantissa = digits();
  if (i < text.size() && text[i] == '.') {
    ++i;
    mantissa += digits();
  }
  if (mantissa == 0) return false;
  if (i < text.size() && (text[i] == 'e' || text[i] == 'E')) {
    ++i;
    if (i < text.size() && (text[i] == '+' || text[i] == '-')) ++i;
    if (digits() == 0) return false;
  }
  return i == text.size();
}

}  // namespace

size_t utf8_char_length(std::string_view text, size_t pos) {
  if (pos >= text.size()) return 0;
  const Step step = utf8_step(text, pos);
  return step.valid ? step.length : 0;
}

size_t invalid_utf8_at(std::string_view text) {
  size_t pos = 0;
  while (pos < text.size()) {
    // Runs of ASCII, the common case, a byte at a time without the full decode.
    if (static_cast<unsigned char>(text[pos]) < 0x80) {
      ++pos;
      continue;
    }
    const Step step = utf8_step(text, pos);
    if (!step.valid) return pos;
    pos += step.length;
  }
  return std::string_view::npos;
}

void require_utf8(std::string_view text, std::string_view what) {
  const size_t at = invalid_utf8_at(text);
  if (at == std::string_view::npos) return;
  throw InputError(fmt::format("{}: invalid UTF-8 (byte 0x{:02x} at byte {})", escape_control(what),
                               static_cast<unsigned char>(text[at]), at + 1));
}

void require_utf8_lines(std::string_view contents, std::string_view path) {
  const size_t at = invalid_utf8_at(contents);
  if (at == std::string_view::npos) return;
  const size_t line_start = contents.rfind('\n', at == 0 ? 0 : at - 1);
  const size_t column = line_start == std::string_view::npos || at == 0 ? at + 1 : at - line_start;
  const auto line = 1 + std::count(contents.begin(), contents.begin() + std::ptrdiff_t(at), '\n');
  throw InputError(fmt::format("{}:{}: invalid UTF-8 (byte 0x{:02x} at column {}; the file must be UTF-8 text)",
                               escape_control(path), line, static_cast<unsigned char>(contents[at]), column));
}

std::string replace_invalid_utf8(std::string_view text, int64_t* replaced) {
  if (replaced) *replaced = 0;
  if (invalid_utf8_at(text) == std::string_view::npos) return std::string(text);
  std::string out;
  out.reserve(text.size() + 8);
  size_t pos = 0;
  while (pos < text.size()) {
    const Step step = utf8_step(text, pos);
    if (step.valid) {
      out.append(text.substr(pos, step.length));
    } else {
      out.append("\xEF\xBF\xBD");  // U+FFFD REPLACEMENT CHARACTER
      if (replaced) ++*replaced;
    }
    pos += step.length;
  }
  return out;
}

std::string escape_control(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  size_t pos = 0;
  while (pos < text.size()) {
    const auto u = static_cast<unsigned char>(text[pos]);
    const Step step = utf8_step(text, pos);
    if (!step.valid || u < 0x20 || u == 0x7f) {
      out += fmt::format("\\x{:02x}", u);
      ++pos;
    } else if (u == 0xc2 && static_cast<unsigned char>(text[pos + 1]) < 0xa0) {
      out += fmt::format("\\u{:04x}", static_cast<unsigned char>(text[pos + 1]));  // C1: U+0080..U+009F
      pos += 2;
    } else {
      out.append(text.substr(pos, step.length));
      pos += step.length;
    }
  }
  return out;
}

std::string_view next_line(std::string_view contents, size_t& start) {
  size_t end = contents.find('\n', start);
  if (end == std::string_view::npos) end = contents.size();
  const std::string_view line = contents.substr(start, end - start);
  start = end + 1;
  return line;
}

std::string escape_control_lines(std::string_view text) {
  std::string out;
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    if (start > 0) out += '\n';
    out += escape_control(text.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

bool reads_as_formula(std::string_view cell) {
  const size_t first = cell.find_first_not_of(' ');
  if (first == std::string_view::npos) return false;
  if (std::string_view("=+-@\t\r").find(cell[first]) == std::string_view::npos) return false;
  return !is_number(cell.substr(first));
}

std::string csv_field(std::string_view text) {
  std::string cell = replace_invalid_utf8(text);
  if (reads_as_formula(cell)) cell.insert(0, 1, '\'');
  const bool quote = cell.find_first_of(",\"\r\n") != std::string::npos ||
                     (!cell.empty() && (cell.front() == ' ' || cell.back() == ' '));
  if (!quote) return cell;
  std::string quoted = "\"";
  for (char ch : cell) quoted += ch == '"' ? std::string("\"\"") : std::string(1, ch);
  return quoted + "\"";
}

}  // namespace normlab::io
