#include "server/metrics_http_request.h"

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace dikkat::server {
namespace {

// RFC 9110 token characters.
bool IsTokenChar(char c) {
  if (absl::ascii_isalnum(static_cast<unsigned char>(c))) return true;
  switch (c) {
    case '!': case '#': case '$': case '%': case '&': case '\'': case '*': case '+': case '-':
    case '.': case '^': case '_': case '`': case '|': case '~':
      return true;
    default:
      return false;
  }
}

bool IsToken(std::string_view s) {
  if (s.empty()) return false;
  for (char c : s) {
    if (!IsTokenChar(c)) return false;
  }
  return true;
}

bool IsControl(char c) {
  const auto u = static_cast<unsigned char>(c);
  return u < 0x20 || u == 0x7f;
}

bool EqualsIgnoreCase(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (absl::ascii_tolower(static_cast<unsigned char>(a[i])) !=
        absl::ascii_tolower(static_cast<unsigned char>(b[i]))) {
      return false;
    }
  }
  return true;
}

std::string_view TrimSpaceAndTab(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

RequestHeadCheck Refuse(RequestHeadCheck check, int status, std::string reason) {
  check.verdict = RequestHeadCheck::Verdict::kRefuse;
  check.status = status;
  check.reason = std::move(reason);
  return check;
}

}  // namespace

RequestHeadCheck CheckRequestHead(std::string_view received, size_t max_bytes) {
  RequestHeadCheck check;
  // The lines before the first empty one.
  std::vector<std::string_view> lines;
  size_t pos = 0;
  bool complete = false;
  while (true) {
    const size_t newline = received.find('\n', pos);
    if (newline == std::string_view::npos) break;
    std::string_view line = received.substr(pos, newline - pos);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    pos = newline + 1;
    if (line.empty()) {
      complete = true;
      break;
    }
    lines.push_back(line);
  }
  if (complete ? pos > max_bytes : received.size() >= max_bytes) {
    return Refuse(std::move(check), 431,
                  absl::StrCat("the request line and headers exceed ", max_bytes, " bytes"));
  }
  if (!complete) return check;
  check.head_bytes = pos;

  if (lines.empty()) return Refuse(std::move(check), 400, "no request line");
  const std::string_view request_line = lines[0];
  const size_t sp1 = request_line.find(' ');
  const size_t sp2 =
      sp1 == std::string_view::npos ? std::string_view::npos : request_line.find(' ', sp1 + 1);
  if (sp2 == std::string_view::npos || request_line.find(' ', sp2 + 1) != std::string_view::npos) {
    return Refuse(std::move(check), 400, "the request line is not METHOD TARGET VERSION");
  }
  const std::string_view method = request_line.substr(0, sp1);
  const std::string_view target = request_line.substr(sp1 + 1, sp2 - sp1 - 1);
  const std::string_view version = request_line.substr(sp2 + 1);
  if (!IsToken(method)) return Refuse(std::move(check), 400, "malformed method");
  if (target.empty()) return Refuse(std::move(check), 400, "empty request target");
  for (char c : target) {
    if (IsControl(c)) return Refuse(std::move(check), 400, "control character in the target");
  }
  if (version != "HTTP/1.1" && version != "HTTP/1.0") {
    return Refuse(std::move(check), 400, "only HTTP/1.0 and HTTP/1.1 are served");
  }
  check.method = std::string(method);
  check.target = std::string(target);

  if (lines.size() - 1 > static_cast<size_t>(kMaxRequestHeaderLines)) {
    return Refuse(std::move(check), 431,
                  absl::StrCat("more than ", kMaxRequestHeaderLines, " header lines"));
  }
  bool has_body = false;
  for (size_t i = 1; i < lines.size(); ++i) {
    const std::string_view line = lines[i];
    if (line.front() == ' ' || line.front() == '\t') {
      return Refuse(std::move(check), 400, "folded header line");
    }
    const size_t colon = line.find(':');
    if (colon == std::string_view::npos || !IsToken(line.substr(0, colon))) {
      return Refuse(std::move(check), 400, "malformed header line");
    }
    const std::string_view name = line.substr(0, colon);
    const std::string_view value = TrimSpaceAndTab(line.substr(colon + 1));
    for (char c : value) {
      if (IsControl(c) && c != '\t') {
        return Refuse(std::move(check), 400, "control character in a header value");
      }
    }
    if (EqualsIgnoreCase(name, "Transfer-Encoding") ||
        (EqualsIgnoreCase(name, "Content-Length") && value != "0")) {
      has_body = true;
    }
  }
  if (method != "GET" && method != "HEAD") {
    return Refuse(std::move(check), 405, "only GET and HEAD are served here");
  }
  if (has_body) return Refuse(std::move(check), 413, "requests to this port take no body");
  check.verdict = RequestHeadCheck::Verdict::kServe;
  return check;
}

const char* RequestHeadStatusText(int status) {
  switch (status) {
    case 400: return "Bad Request";
    case 405: return "Method Not Allowed";
    case 413: return "Payload Too Large";
    case 431: return "Request Header Fields Too Large";
    default: return "Error";
  }
}

}  // namespace dikkat::server
