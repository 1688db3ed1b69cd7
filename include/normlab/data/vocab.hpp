#pragma once
// A vocabulary maps token strings to dense integer ids and back. Ids are 0..size()-1: the special
// tokens first (e.g. "[MASK]", "[UNK]"), then the ordinary symbols in the order given. Every token
// has a human-readable string so a prediction can be printed ("3", "(", "e").
//
// Two ways to turn a user's string into ids (`predict --input "..."`):
//   encode_symbols: "3 1 2" or "312" or "(()())" — whitespace separates symbols, and a run of
//                   characters with no whitespace is split into single-character symbols when it is
//                   not itself a symbol. Unknown symbols are an InputError.
//   encode_text:    every UTF-8 character is one token (spaces too), for character-level text. A
//                   special token written literally ("[MASK]") becomes that special id; a character
//                   not in the vocabulary becomes "[UNK]" (an InputError if the vocabulary has no
//                   "[UNK]"); text that is not valid UTF-8 is an InputError.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "normlab/io/text.hpp"

namespace normlab::data {

class Vocab {
 public:
  Vocab() = default;
  // specials get ids 0..specials.size()-1, symbols follow. Empty or duplicate strings: UsageError.
  Vocab(std::vector<std::string> specials, std::vector<std::string> symbols);

  int32_t size() const { return static_cast<int32_t>(tokens_.size()); }
  int32_t num_specials() const { return num_specials_; }
  bool is_special(int32_t id) const { return id >= 0 && id < num_specials_; }
  const std::vector<std::string>& tokens() const { return tokens_; }

  std::optional<int32_t> find(std::string_view token) const;
  // The id of a token that must exist (e.g. "[MASK]" in a text vocabulary); UsageError otherwise.
  int32_t id(std::string_view token) const;
  // The string of an id; UsageError if out of range.
  const std::string& token(int32_t id) const;

  // Token strings joined by `separator`; id -1 ("no target") prints as "_".
  std::string decode(const std::vector<int32_t>& ids, std::string_view separator) const;

  bool operator==(const Vocab& other) const { return tokens_ == other.tokens_ && num_specials_ == other.num_specials_; }

 private:
  std::vector<std::string> tokens_;
  int32_t num_specials_ = 0;
  std::unordered_map<std::string, int32_t> ids_;
};

// The byte length of the UTF-8 character at text[pos] (1-4), or 0 if the bytes there are not valid
// UTF-8 (overlong forms, surrogates, stray continuation bytes, truncation).
using io::utf8_char_length;

// ASCII white space: what separates words and symbols everywhere in normlab.
inline bool is_ascii_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

// Calls on_word(word, pos) for each run of non-space characters of text, pos its byte offset.
template <class OnWord>
void for_each_word(std::string_view text, OnWord on_word) {
  size_t pos = 0;
  while (pos < text.size()) {
    if (is_ascii_space(text[pos])) {
      ++pos;
      continue;
    }
    size_t end = pos;
    while (end < text.size() && !is_ascii_space(text[end])) ++end;
    on_word(text.substr(pos, end - pos), pos);
    pos = end;
  }
}
// The characters of `text`; InputError "<what>: invalid UTF-8 (byte 0x.. at byte N)".
std::vector<std::string_view> utf8_characters(std::string_view text, std::string_view what);

// `what` names the input in error messages, e.g. "--input" or "data.jsonl:3: tokens".
std::vector<int32_t> encode_symbols(const Vocab& vocab, std::string_view text, std::string_view what);
std::vector<int32_t> encode_text(const Vocab& vocab, std::string_view text, std::string_view what);
// Whitespace-separated words; a word not in the vocabulary becomes "[UNK]" (InputError without one).
std::vector<int32_t> encode_words(const Vocab& vocab, std::string_view text, std::string_view what);

}  // namespace normlab::data
