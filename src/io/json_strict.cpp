#include "normlab/io/json_strict.hpp"

#include <fmt/format.h>

#include <optional>

#include "normlab/error.hpp"
#include "normlab/io/json_depth.hpp"

namespace normlab::io {

namespace {

using nlohmann::json;

// Builds the DOM from SAX events, as nlohmann's own json_sax_dom_parser does, and checks each key
// against the object being built (a map lookup: O(log n) per key, nothing rescanned).
class StrictDomBuilder {
 public:
  explicit StrictDomBuilder(json& root, std::vector<std::string>* duplicate) : root_(root), duplicate_(duplicate) {}

  bool null() { return add(nullptr); }
  bool boolean(bool value) { return add(value); }
  bool number_integer(json::number_integer_t value) { return add(value); }
  bool number_unsigned(json::number_unsigned_t value) { return add(value); }
  bool number_float(json::number_float_t value, const json::string_t& /*text*/) { return add(value); }
  bool string(json::string_t& value) { return add(std::move(value)); }
  bool binary(json::binary_t& value) { return add(json::binary(std::move(value))); }

  bool start_object(std::size_t /*size*/) {
    stack_.push_back(add_container(json::object()));
    keys_.emplace_back();
    return true;
  }
  bool key(json::string_t& key) {
    json& object = *stack_.back();
    keys_.back() = key;
    if (object.contains(key) && duplicate_ != nullptr && duplicate_->empty()) {
      for (const std::optional<std::string>& level : keys_) {
        if (level) duplicate_->push_back(*level);
      }
    }
    pending_ = &object[key];
    return true;
  }
  bool end_object() {
    stack_.pop_back();
    keys_.pop_back();
    return true;
  }
  bool start_array(std::size_t /*size*/) {
    stack_.push_back(add_container(json::array()));
    keys_.push_back(std::nullopt);  // arrays add no key to a duplicate's path
    return true;
  }
  bool end_array() {
    stack_.pop_back();
    keys_.pop_back();
    return true;
  }
  bool parse_error(std::size_t /*position*/, const std::string& /*last_token*/,
                   const nlohmann::detail::exception& error) {
    error_ = error.what();
    error_id_ = error.id;
    return false;
  }

  const std::string& error() const { return error_; }
  int error_id() const { return error_id_; }

 private:
  json* add_container(json value) { return place(std::move(value)); }
  template <class Value>
  bool add(Value&& value) {
    place(json(std::forward<Value>(value)));
    return true;
  }
  json* place(json value) {
    if (stack_.empty()) {
      root_ = std::move(value);
      return &root_;
    }
    json& parent = *stack_.back();
    if (parent.is_array()) {
      parent.push_back(std::move(value));
      return &parent.back();
    }
    *pending_ = std::move(value);
    return pending_;
  }

  json& root_;
  std::vector<std::string>* duplicate_;
  std::vector<json*> stack_;                      // the open containers, innermost last
  std::vector<std::optional<std::string>> keys_;  // per open container: its current key (objects)
  json* pending_ = nullptr;                       // where the value after a key goes
  std::string error_;
  int error_id_ = 0;
};

// Rethrown with the type json::parse would have thrown, so callers catch json::exception as for json::parse.
class ReportedJsonError : public json::exception {
 public:
  ReportedJsonError(int id, const std::string& what) : json::exception(id, what.c_str()) {}
};

}  // namespace

json parse_json_linear(std::string_view text, std::vector<std::string>* duplicate_key_path) {
  json root;
  StrictDomBuilder builder(root, duplicate_key_path);
  const bool ok = json::sax_parse(text.begin(), text.end(), &builder, json::input_format_t::json, /*strict=*/true);
  if (!ok) throw ReportedJsonError(builder.error_id(), builder.error());
  return root;
}

std::string json_error_message(const json::exception& error) {
  std::string message = error.what();
  const size_t bracket = message.find("] ");
  if (message.rfind("[json.exception", 0) == 0 && bracket != std::string::npos) message = message.substr(bracket + 2);
  return message;
}

json parse_strict(std::string_view text, std::string_view where) {
  // nlohmann's lexer ends the input at a NUL byte; anything after it would be ignored silently.
  if (text.find('\0') != std::string_view::npos) {
    throw InputError(fmt::format("{}: invalid JSON: contains a NUL byte", where));
  }
  require_json_depth(text, where);
  std::vector<std::string> duplicate;
  json result;
  try {
    result = parse_json_linear(text, &duplicate);
  } catch (const json::exception& e) {  // parse errors, and numbers too large for a double (1e999)
    throw InputError(fmt::format("{}: invalid JSON: {}", where, json_error_message(e)));
  }
  if (!duplicate.empty()) throw InputError(fmt::format("{}: {}: duplicate key", where, fmt::join(duplicate, ".")));
  return result;
}

}  // namespace normlab::io
