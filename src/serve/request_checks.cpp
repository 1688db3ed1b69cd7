// What is checked of a request before a route answers it: its header as it arrives (the gate,
// before any thread: complete, too large, malformed or ambiguous) and its Host (the routes' screen:
// a name an attacker controls never matches).
#include <arpa/inet.h>

#include <algorithm>
#include <regex>

#include "server_parts.hpp"

namespace normlab::serve {

namespace internal {

// The request in `bytes` (what has arrived so far): complete, incomplete, or refused. RFC 9110/9112:
// a field value holds no control byte but HTAB (a NUL in Host would let "localhost\0.evil.com" pass
// a check that stops at the NUL); several Content-Length values that differ make the message's
// length ambiguous (request smuggling): 400; a body of unknown length (Transfer-Encoding): 411.
Verdict examine_request(std::string_view bytes) {
  size_t head_end = bytes.find("\r\n\r\n");
  size_t body_at = head_end == std::string_view::npos ? head_end : head_end + 4;
  if (const size_t lf = bytes.find("\n\n");
      lf != std::string_view::npos && (head_end == std::string_view::npos || lf < head_end))
    head_end = lf, body_at = lf + 2;
  if (head_end == std::string_view::npos) {
    if (bytes.size() >= kMaxHeaderBytes) return {431, "the request's header is over 16 KiB"};
    return {};
  }
  const std::string_view head = bytes.substr(0, head_end);
  if (head.size() > kMaxHeaderBytes) return {431, "the request's header is over 16 KiB"};
  for (size_t from = 0, to; from < head.size(); from = to + 1) {
    to = std::min(head.find('\n', from), head.size());
    if (to - from > 8000)
      return {431, "a request header line over 8,000 bytes"};  // cpp-httplib reads at most 8 KiB a line
  }
  for (const char c : head)
    if ((static_cast<unsigned char>(c) < 0x20 && c != '\r' && c != '\n' && c != '\t') || c == 0x7f)
      return {400, "a control byte in the request's header"};
  std::string length;
  for (size_t at = head.find('\n'); at != std::string_view::npos; at = head.find('\n', at + 1)) {
    const size_t next = head.find('\n', at + 1);
    std::string_view line = head.substr(at + 1, (next == std::string_view::npos ? head.size() : next) - at - 1);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    const size_t colon = line.find(':');
    if (colon == std::string_view::npos) continue;
    std::string name(line.substr(0, colon));
    std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return char(std::tolower(c)); });
    std::string_view value = line.substr(colon + 1);
    while (!value.empty() && (value.front() == ' ' || value.front() == '\t')) value.remove_prefix(1);
    while (!value.empty() && (value.back() == ' ' || value.back() == '\t')) value.remove_suffix(1);
    if (name == "transfer-encoding") return {411, "a request body needs a Content-Length (no route takes a body)"};
    if (name != "content-length") continue;
    if (value.empty() || value.size() > 18 ||
        !std::all_of(value.begin(), value.end(), [](char c) { return c >= '0' && c <= '9'; }))
      return {400, "Content-Length is not a number"};
    if (!length.empty() && length != value) return {400, "two different Content-Length headers"};
    length = value;
  }
  const size_t body = length.empty() ? 0 : size_t(std::stoull(length));
  if (body > kMaxBodyBytes) return {413, "request bodies over 64 KiB are refused"};
  return {bytes.size() >= body_at + body ? 200 : 0, ""};
}

}  // namespace internal

bool host_allowed(const std::string& host_header, const std::string& bound_address) {
  std::string host = host_header;
  if (!host.empty() && host[0] == '[') {  // [v6]:port
    const size_t close = host.find(']');
    if (close == std::string::npos) return false;
    const std::string rest = host.substr(close + 1);
    if (!rest.empty() && !std::regex_match(rest, std::regex(":[0-9]{1,5}"))) return false;
    host = host.substr(1, close - 1);
  } else if (const size_t colon = host.find(':'); colon != std::string::npos) {
    if (!std::regex_match(host.substr(colon), std::regex(":[0-9]{1,5}"))) return false;
    host = host.substr(0, colon);
  }
  std::transform(host.begin(), host.end(), host.begin(), [](unsigned char c) { return char(std::tolower(c)); });
  if (host == "localhost") return true;
  // An IP literal is safe from DNS rebinding (the browser's origin is the address itself); it must
  // still be this server's address unless the server listens on all of them.
  auto parse = [](const std::string& text, int& family, unsigned char* bytes) {
    for (int f : {AF_INET, AF_INET6})
      if (::inet_pton(f, text.c_str(), bytes) == 1) return family = f, true;
    return false;
  };
  unsigned char a[sizeof(in6_addr)] = {}, b[sizeof(in6_addr)] = {};
  int host_family = 0, bound_family = 0;
  if (!parse(host, host_family, a) || !parse(bound_address, bound_family, b)) return false;
  if (std::all_of(b, b + sizeof b, [](unsigned char byte) { return byte == 0; })) return true;  // 0.0.0.0, ::
  return host_family == bound_family && std::equal(a, a + sizeof a, b);
}

}  // namespace normlab::serve
