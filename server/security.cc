#include "server/security.h"

#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace dikkat::server {
namespace {

absl::StatusOr<std::string> ReadPem(const std::string& path, absl::string_view flag) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::InvalidArgumentError(absl::StrCat("--", flag, "=", path, ": cannot open the file"));
  }
  std::stringstream buffer;
  buffer << in.rdbuf();
  std::string pem = buffer.str();
  if (!absl::StrContains(pem, "-----BEGIN ")) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--", flag, "=", path, ": not a PEM file (no '-----BEGIN ' line)",
        pem.empty() ? "; the file is empty" : ""));
  }
  return pem;
}

// Printable ASCII without spaces: survives an HTTP/2 header unchanged.
absl::Status ValidateToken(absl::string_view token, absl::string_view origin) {
  if (token.size() < BearerTokenAuthenticator::kMinTokenLength) {
    return absl::InvalidArgumentError(absl::StrCat(
        origin, ": a token has ", token.size(), " characters; at least ",
        BearerTokenAuthenticator::kMinTokenLength, " are required"));
  }
  for (char c : token) {
    if (c <= 0x20 || c >= 0x7f) {
      return absl::InvalidArgumentError(absl::StrCat(
          origin, ": a token contains a space, control or non-ASCII character; "
                  "allowed: printable ASCII without spaces"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

bool ConstantTimeEquals(absl::string_view given, absl::string_view secret) {
  // Walk the whole secret whatever `given` holds; a length mismatch is folded
  // into the result instead of returning early.
  volatile unsigned char diff = given.size() == secret.size() ? 0 : 1;
  const size_t n = given.size();
  for (size_t i = 0; i < secret.size(); ++i) {
    const unsigned char g = n == 0 ? 0 : static_cast<unsigned char>(given[i % n]);
    diff = diff | (g ^ static_cast<unsigned char>(secret[i]));
  }
  return diff == 0;
}

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(
    const TlsFiles& files) {
  if (files.cert_file.empty() && files.key_file.empty()) {
    if (!files.client_ca_file.empty()) {
      return absl::InvalidArgumentError(
          "--tls_client_ca needs --tls_cert and --tls_key: mutual TLS runs over TLS");
    }
    return grpc::InsecureServerCredentials();
  }
  if (files.cert_file.empty() || files.key_file.empty()) {
    return absl::InvalidArgumentError(
        "TLS needs both --tls_cert and --tls_key (the server's certificate chain and its "
        "private key); only one was given");
  }
  absl::StatusOr<std::string> cert = ReadPem(files.cert_file, "tls_cert");
  if (!cert.ok()) return cert.status();
  absl::StatusOr<std::string> key = ReadPem(files.key_file, "tls_key");
  if (!key.ok()) return key.status();
  const bool mutual = !files.client_ca_file.empty();
  grpc::SslServerCredentialsOptions options(
      mutual ? GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY
             : GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE);
  if (mutual) {
    absl::StatusOr<std::string> ca = ReadPem(files.client_ca_file, "tls_client_ca");
    if (!ca.ok()) return ca.status();
    options.pem_root_certs = *std::move(ca);
  }
  options.pem_key_cert_pairs.push_back({*std::move(key), *std::move(cert)});
  return grpc::SslServerCredentials(options);
}

absl::StatusOr<std::unique_ptr<BearerTokenAuthenticator>> BearerTokenAuthenticator::Create(
    std::vector<std::string> tokens) {
  if (tokens.empty()) return absl::InvalidArgumentError("no bearer token given");
  for (const std::string& t : tokens) {
    absl::Status valid = ValidateToken(t, "bearer token");
    if (!valid.ok()) return valid;
  }
  return std::unique_ptr<BearerTokenAuthenticator>(
      new BearerTokenAuthenticator(std::move(tokens)));
}

absl::StatusOr<std::unique_ptr<BearerTokenAuthenticator>> BearerTokenAuthenticator::FromFile(
    const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::InvalidArgumentError(
        absl::StrCat("--auth_token_file=", path, ": cannot open the file"));
  }
  std::stringstream buffer;
  buffer << in.rdbuf();
  std::vector<std::string> tokens;
  for (absl::string_view line : absl::StrSplit(buffer.str(), '\n')) {
    line = absl::StripAsciiWhitespace(line);
    if (line.empty() || line.front() == '#') continue;
    absl::Status valid = ValidateToken(line, absl::StrCat("--auth_token_file=", path));
    if (!valid.ok()) return valid;
    tokens.emplace_back(line);
  }
  if (tokens.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--auth_token_file=", path, ": no token in the file (one per line; '#' comments)"));
  }
  return Create(std::move(tokens));
}

absl::Status BearerTokenAuthenticator::CheckAuthorization(absl::string_view authorization) const {
  constexpr absl::string_view kScheme = "bearer ";
  if (authorization.empty()) {
    return absl::UnauthenticatedError(
        "this server requires a bearer token: send the metadata 'authorization: Bearer <token>'");
  }
  if (authorization.size() <= kScheme.size() ||
      !absl::EqualsIgnoreCase(authorization.substr(0, kScheme.size()), kScheme)) {
    return absl::UnauthenticatedError(
        "the 'authorization' metadata is not of the form 'Bearer <token>'");
  }
  const absl::string_view given = absl::StripAsciiWhitespace(authorization.substr(kScheme.size()));
  // Check every token (no early exit) so the time does not tell which
  // position matched.
  bool match = false;
  for (const std::string& token : tokens_) match = ConstantTimeEquals(given, token) | match;
  if (!match) return absl::UnauthenticatedError("the bearer token is not valid for this server");
  return absl::OkStatus();
}

absl::Status BearerTokenAuthenticator::Check(
    const std::multimap<grpc::string_ref, grpc::string_ref>& metadata) const {
  const auto it = metadata.find("authorization");
  if (it == metadata.end()) return CheckAuthorization("");
  return CheckAuthorization(absl::string_view(it->second.data(), it->second.size()));
}

absl::StatusOr<std::unique_ptr<BearerTokenAuthenticator>> LoadAuthenticator(
    const std::string& token_file, const char* env_token) {
  const bool has_env = env_token != nullptr && *env_token != '\0';
  if (!token_file.empty() && has_env) {
    return absl::InvalidArgumentError(
        "both --auth_token_file and the DIKKAT_AUTH_TOKEN environment variable are set; "
        "use one");
  }
  if (!token_file.empty()) return BearerTokenAuthenticator::FromFile(token_file);
  if (!has_env) return nullptr;
  const absl::string_view token = absl::StripAsciiWhitespace(env_token);
  absl::Status valid = ValidateToken(token, "DIKKAT_AUTH_TOKEN");
  if (!valid.ok()) return valid;
  return BearerTokenAuthenticator::Create({std::string(token)});
}

}  // namespace dikkat::server
