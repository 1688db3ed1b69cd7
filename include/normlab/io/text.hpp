#pragma once
// Text that comes in from outside (data files, --input, standard input, config strings, paths) and
// goes back out (error messages, CSV). One rule each, used everywhere (docs/config.md, "Text"):
//
//   invalid UTF-8   in a data file (training, validation, `eval --data`) or a config file: refused,
//                   "PATH:LINE: invalid UTF-8 (byte 0xff at column 6)" — a file with broken bytes is
//                   a damaged file, and training on guesses would hide it. In text given to predict
//                   (`--input`, the lines of `--data`): each maximal invalid sequence is replaced by
//                   U+FFFD, as Python's errors="replace" and Hugging Face tokenizers do, and the
//                   replacement is counted in a warning: an answer for the rest of the text is what
//                   a user asking for a prediction wants.
//   messages        input echoed in a message has its control characters (C0, DEL, C1) and invalid
//                   bytes written as \x1b, so a file name or a CSV header cannot drive the terminal.
//   CSV cells       a cell a spreadsheet would run as a formula gets a leading ' (OWASP's advice);
//                   cells are valid UTF-8 and RFC 4180-quoted.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace normlab::io {

// The byte length of the UTF-8 character at text[pos] (1-4), or 0 if the bytes there are not valid
// UTF-8 (overlong forms, surrogates, stray continuation bytes, truncation, past U+10FFFF).
size_t utf8_char_length(std::string_view text, size_t pos);

// The offset of the first byte of `text` that does not start a valid UTF-8 character, or npos.
size_t invalid_utf8_at(std::string_view text);

// InputError "<what>: invalid UTF-8 (byte 0xff at byte N)" (N counts from 1) unless `text` is valid.
void require_utf8(std::string_view text, std::string_view what);

// The same for a whole file's contents, naming the line and the column (bytes, from 1) of the first
// invalid byte: InputError "PATH:LINE: invalid UTF-8 (byte 0xff at column N)".
void require_utf8_lines(std::string_view contents, std::string_view path);

// The line of `contents` that begins at `start`, without its '\n'; `start` moves past that '\n'. Read
// a file as `while (start < contents.size()) { line = next_line(contents, start); ... }`: a final
// newline ends the last line, it does not start an empty one. A '\r' before the '\n' stays.
std::string_view next_line(std::string_view contents, size_t& start);

// `text` with every maximal invalid sequence (Unicode's "maximal subpart": a lead byte and the
// continuation bytes that fit it, or one stray byte) replaced by U+FFFD; `replaced` counts them.
std::string replace_invalid_utf8(std::string_view text, int64_t* replaced = nullptr);

// `text` for a message or a terminal: valid printable characters as they are; C0 controls (tab and
// newline too), DEL and invalid bytes as \xNN; C1 controls (U+0080..U+009F) as \u0085.
std::string escape_control(std::string_view text);
// The same with the line breaks kept: a multi-line message or log line printed as it was written.
std::string escape_control_lines(std::string_view text);

// True when a spreadsheet would run `cell` as a formula: its first character after any leading
// spaces is = + - @, a tab or a carriage return, unless the whole cell is a plain decimal number
// such as -0.5 or +1e-3 (which stays a number).
bool reads_as_formula(std::string_view cell);

// One CSV cell: invalid UTF-8 replaced, a formula-looking text prefixed with ', then RFC 4180
// quoting when it holds a comma, a quote, a line break, or a leading / trailing space.
std::string csv_field(std::string_view text);

}  // namespace normlab::io
