// The metrics port's request-head check (server::CheckRequestHead, which its
// connection loop runs on the bytes received before cpp-httplib parses
// anything) on arbitrary bytes, with the default 16 KiB budget and with a
// small one. Never crashes, and:
//  - the verdict depends only on the head: re-checking exactly its
//    head_bytes gives the same verdict and status;
//  - bytes arriving in pieces change nothing: every prefix that ends before
//    the head does is kIncomplete (or 431 once it reaches the budget);
//  - kIncomplete only below the budget; a served head is a GET or HEAD,
//    ends with an empty line and fits the budget; refusals are
//    400 / 405 / 413 / 431 with a reason.
#include <cstdint>
#include <string>
#include <string_view>

#include "fuzz/fuzz_util.h"
#include "server/metrics_http_request.h"

namespace {

using dikkat::server::CheckRequestHead;
using dikkat::server::RequestHeadCheck;
using Verdict = RequestHeadCheck::Verdict;

void Check(std::string_view bytes, size_t max_bytes) {
  const RequestHeadCheck check = CheckRequestHead(bytes, max_bytes);
  switch (check.verdict) {
    case Verdict::kIncomplete:
      DIKKAT_FUZZ_CHECK(bytes.size() < max_bytes, "incomplete at %zu bytes, budget %zu",
                        bytes.size(), max_bytes);
      DIKKAT_FUZZ_CHECK(check.head_bytes == 0, "an incomplete head with a length");
      return;
    case Verdict::kServe:
      DIKKAT_FUZZ_CHECK(check.method == "GET" || check.method == "HEAD", "served method '%s'",
                        check.method.c_str());
      DIKKAT_FUZZ_CHECK(!check.target.empty(), "served an empty target");
      break;
    case Verdict::kRefuse:
      DIKKAT_FUZZ_CHECK(check.status == 400 || check.status == 405 || check.status == 413 ||
                            check.status == 431,
                        "refused with status %d", check.status);
      DIKKAT_FUZZ_CHECK(!check.reason.empty(), "a refusal without a reason");
      if (check.head_bytes == 0) {  // refused before the head ended: only by size
        DIKKAT_FUZZ_CHECK(check.status == 431 && bytes.size() >= max_bytes,
                          "refused %d before the head ended", check.status);
        return;
      }
      break;
  }
  // A complete head.
  const size_t n = check.head_bytes;
  DIKKAT_FUZZ_CHECK(n >= 1 && n <= bytes.size() && n <= max_bytes, "head of %zu bytes", n);
  const std::string_view head = bytes.substr(0, n);
  DIKKAT_FUZZ_CHECK(head.back() == '\n', "the head does not end with a line end");
  const RequestHeadCheck again = CheckRequestHead(head, max_bytes);
  DIKKAT_FUZZ_CHECK(again.verdict == check.verdict && again.status == check.status &&
                        again.head_bytes == n && again.method == check.method,
                    "the bytes after the head changed the verdict (%d -> %d)", check.status,
                    again.status);
  // Prefixes that end before the head's last line end are incomplete.
  for (size_t cut : {n - 1, n / 2, size_t{1}}) {
    if (cut >= n || cut == 0) continue;
    const std::string_view prefix = head.substr(0, cut);
    if (prefix.find("\n\n") != std::string_view::npos ||
        prefix.find("\n\r\n") != std::string_view::npos || prefix.front() == '\n' ||
        prefix.substr(0, 2) == "\r\n") {
      DIKKAT_FUZZ_CHECK(false, "the head ends before its head_bytes");
    }
    const RequestHeadCheck part = CheckRequestHead(prefix, max_bytes);
    DIKKAT_FUZZ_CHECK(part.verdict == Verdict::kIncomplete,
                      "a prefix of %zu bytes of a %zu-byte head was decided (%d)", cut, n,
                      part.status);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  Check(bytes, 16 << 10);  // MetricsHttpOptions::max_request_bytes
  Check(bytes, 64);
  return 0;
}
