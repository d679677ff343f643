#include "server/byte_size.h"

#include <cmath>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace dikkat::server {
namespace {

struct Unit {
  const char* suffix;
  double factor;
};

constexpr Unit kUnits[] = {
    {"", 1},           {"b", 1},
    {"k", 1e3},        {"kb", 1e3},       {"m", 1e6},       {"mb", 1e6},
    {"g", 1e9},        {"gb", 1e9},       {"t", 1e12},      {"tb", 1e12},
    {"ki", 1024.0},    {"kib", 1024.0},   {"mi", 1048576.0}, {"mib", 1048576.0},
    {"gi", 1073741824.0}, {"gib", 1073741824.0},
    {"ti", 1099511627776.0}, {"tib", 1099511627776.0},
};

}  // namespace

absl::StatusOr<int64_t> ParseByteSize(absl::string_view text) {
  const std::string s = absl::AsciiStrToLower(absl::StripAsciiWhitespace(text));
  size_t split = 0;
  while (split < s.size() && (absl::ascii_isdigit(s[split]) || s[split] == '.')) ++split;
  const std::string number = s.substr(0, split);
  std::string suffix = s.substr(split);
  if (!suffix.empty() && suffix.front() == ' ') suffix.erase(0, 1);
  auto invalid = [&] {
    return absl::InvalidArgumentError(absl::StrCat(
        "'", text, "' is not a byte size: write a number with an optional unit, e.g. 268435456, "
        "512MiB, 1.5GiB, 64KiB, 2GB"));
  };
  double value = 0;
  if (number.empty() || !absl::SimpleAtod(number, &value)) return invalid();
  for (const Unit& unit : kUnits) {
    if (suffix != unit.suffix) continue;
    const double bytes = std::round(value * unit.factor);
    if (!(bytes >= 0) || bytes >= 9.2233720368547758e18) {
      return absl::InvalidArgumentError(
          absl::StrCat("byte size '", text, "' is out of range (0 .. 2^63-1 bytes)"));
    }
    return static_cast<int64_t>(bytes);
  }
  return invalid();
}

std::string FormatByteSize(int64_t bytes) {
  static constexpr std::pair<int64_t, const char*> kBinary[] = {
      {int64_t{1} << 40, "TiB"}, {int64_t{1} << 30, "GiB"}, {int64_t{1} << 20, "MiB"},
      {int64_t{1} << 10, "KiB"}};
  if (bytes > 0) {
    for (const auto& [factor, name] : kBinary) {
      if (bytes % factor == 0) return absl::StrCat(bytes / factor, name);
    }
  }
  return absl::StrCat(bytes, "B");
}

bool AbslParseFlag(absl::string_view text, ByteSize* out, std::string* error) {
  absl::StatusOr<int64_t> bytes = ParseByteSize(text);
  if (!bytes.ok()) {
    *error = std::string(bytes.status().message());
    return false;
  }
  out->bytes = *bytes;
  return true;
}

std::string AbslUnparseFlag(ByteSize size) { return FormatByteSize(size.bytes); }

}  // namespace dikkat::server
