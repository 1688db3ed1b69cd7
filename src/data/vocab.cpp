#include "normlab/data/vocab.hpp"

#include <fmt/format.h>

#include "normlab/error.hpp"
#include "normlab/io/text.hpp"

namespace normlab::data {

namespace {

// Text as it should appear in an error message (io/text.hpp).
std::string printable(std::string_view text) { return io::escape_control(text); }

// "0 1 2 ... 9" for error messages; long vocabularies are cut short.
std::string list_symbols(const Vocab& vocab) {
  std::string out;
  int32_t shown = 0;
  for (int32_t id = vocab.num_specials(); id < vocab.size(); ++id) {
    if (shown == 24) {
      out += fmt::format(" ... ({} symbols)", vocab.size() - vocab.num_specials());
      break;
    }
    if (shown > 0) out += ' ';
    out += printable(vocab.token(id));
    ++shown;
  }
  return out;
}

}  // namespace

std::vector<std::string_view> utf8_characters(std::string_view text, std::string_view what) {
  std::vector<std::string_view> characters;
  characters.reserve(text.size());
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t length = utf8_char_length(text, pos);
    if (length == 0) {
      throw InputError(fmt::format("{}: invalid UTF-8 (byte 0x{:02x} at byte {})", printable(what),
                                   static_cast<unsigned char>(text[pos]), pos + 1));
    }
    characters.push_back(text.substr(pos, length));
    pos += length;
  }
  return characters;
}

Vocab::Vocab(std::vector<std::string> specials, std::vector<std::string> symbols) {
  tokens_ = std::move(specials);
  num_specials_ = static_cast<int32_t>(tokens_.size());
  for (auto& symbol : symbols) tokens_.push_back(std::move(symbol));
  for (size_t i = 0; i < tokens_.size(); ++i) {
    if (tokens_[i].empty()) throw UsageError(fmt::format("Vocab: token {} is the empty string", i));
    auto [it, inserted] = ids_.emplace(tokens_[i], static_cast<int32_t>(i));
    if (!inserted) throw UsageError(fmt::format("Vocab: duplicate token \"{}\"", printable(tokens_[i])));
  }
}

std::optional<int32_t> Vocab::find(std::string_view token) const {
  auto it = ids_.find(std::string(token));
  if (it == ids_.end()) return std::nullopt;
  return it->second;
}

int32_t Vocab::id(std::string_view token) const {
  auto found = find(token);
  if (!found) throw UsageError(fmt::format("Vocab: no token \"{}\"", printable(token)));
  return *found;
}

const std::string& Vocab::token(int32_t id) const {
  if (id < 0 || id >= size()) throw UsageError(fmt::format("Vocab: id {} out of range [0, {})", id, size()));
  return tokens_[static_cast<size_t>(id)];
}

std::string Vocab::decode(const std::vector<int32_t>& ids, std::string_view separator) const {
  std::string out;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i > 0) out += separator;
    out += ids[i] == -1 ? std::string("_") : token(ids[i]);
  }
  return out;
}

std::vector<int32_t> encode_symbols(const Vocab& vocab, std::string_view text, std::string_view what) {
  std::vector<int32_t> ids;
  for_each_word(text, [&](std::string_view word, size_t pos) {
    if (auto id = vocab.find(word)) {
      ids.push_back(*id);
    } else {
      // Not a symbol as a whole: read it as single-character symbols, "(()" -> "(", "(", ")".
      for (size_t i = 0; i < word.size(); ++i) {
        auto char_id = vocab.find(word.substr(i, 1));
        if (!char_id) {
          throw InputError(fmt::format("{}: unknown symbol \"{}\" at character {} (known symbols: {})", what,
                                       printable(word.size() == 1 ? word : word.substr(i, 1)), pos + i + 1,
                                       list_symbols(vocab)));
        }
        ids.push_back(*char_id);
      }
    }
  });
  if (ids.empty()) throw InputError(fmt::format("{}: no symbols (the input is empty)", what));
  return ids;
}

std::vector<int32_t> encode_words(const Vocab& vocab, std::string_view text, std::string_view what) {
  const std::optional<int32_t> unk = vocab.find("[UNK]");
  std::vector<int32_t> ids;
  for_each_word(text, [&](std::string_view word, size_t pos) {
    if (auto id = vocab.find(word)) {
      ids.push_back(*id);
    } else if (unk) {
      ids.push_back(*unk);
    } else {
      throw InputError(fmt::format("{}: unknown word \"{}\" at character {}", what, printable(word), pos + 1));
    }
  });
  if (ids.empty()) throw InputError(fmt::format("{}: no words (the input is empty)", what));
  return ids;
}

std::vector<int32_t> encode_text(const Vocab& vocab, std::string_view text, std::string_view what) {
  std::optional<int32_t> unk = vocab.find("[UNK]");
  const std::vector<std::string_view> characters = utf8_characters(text, what);
  std::vector<int32_t> ids;
  ids.reserve(characters.size());
  size_t index = 0;
  while (index < characters.size()) {
    // A special token written out, e.g. "[MASK]", stands for itself rather than for six characters.
    bool matched_special = false;
    if (characters[index] == "[") {
      const size_t offset = static_cast<size_t>(characters[index].data() - text.data());
      for (int32_t id = 0; id < vocab.num_specials(); ++id) {
        const std::string& special = vocab.token(id);
        if (text.substr(offset, special.size()) == special) {
          ids.push_back(id);
          index += special.size();  // specials are ASCII: one character a byte
          matched_special = true;
          break;
        }
      }
    }
    if (matched_special) continue;
    auto id = vocab.find(characters[index]);
    if (id) {
      ids.push_back(*id);
    } else if (unk) {
      ids.push_back(*unk);
    } else {
      throw InputError(
          fmt::format("{}: unknown character \"{}\" at character {}", what, printable(characters[index]), index + 1));
    }
    ++index;
  }
  if (ids.empty()) throw InputError(fmt::format("{}: the text is empty", what));
  return ids;
}

}  // namespace normlab::data
