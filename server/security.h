// Transport security (TLS, mutual TLS) and caller authentication (bearer
// tokens) for dikkat-server. See docs/security.md for the threat model.
//
// Authentication is checked by DikkatService at the start of every
// dikkat.v1.Dikkat call rather than by a grpc::AuthMetadataProcessor: gRPC
// only runs a metadata processor on secure ports, and it would also gate
// grpc.health.v1.Health, which probes (kubelet, load balancers) must reach
// without a token. One check in the service works the same on plaintext and
// TLS ports and leaves health (and reflection) open by construction.
#ifndef DIKKAT_SERVER_SECURITY_H_
#define DIKKAT_SERVER_SECURITY_H_

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <grpcpp/security/server_credentials.h>
#include <grpcpp/support/string_ref.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace dikkat::server {

// PEM files for the gRPC port. All empty: plaintext. cert and key: TLS.
// cert, key and client_ca: mutual TLS (a client certificate signed by the CA
// is requested and verified; a connection without one is refused).
struct TlsFiles {
  std::string cert_file;
  std::string key_file;
  std::string client_ca_file;
};

// Reads the files and builds the port's credentials. INVALID_ARGUMENT (naming
// the flag and file) when only one of cert/key is given, a client CA comes
// without them, or a file is missing, empty or not PEM.
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(
    const TlsFiles& files);

// Accepts calls whose `authorization` metadata is `Bearer <token>` for one of
// the configured tokens (several allow rotation without downtime). Tokens are
// compared in time that does not depend on how much of a guess matches.
// Immutable after construction; thread-safe.
class BearerTokenAuthenticator {
 public:
  // Each token: at least kMinTokenLength printable ASCII characters without
  // spaces (what an HTTP/2 header value can carry unchanged).
  static constexpr size_t kMinTokenLength = 16;

  static absl::StatusOr<std::unique_ptr<BearerTokenAuthenticator>> Create(
      std::vector<std::string> tokens);

  // The file holds one token per line; blank lines and lines starting with
  // '#' are ignored; surrounding whitespace is trimmed.
  static absl::StatusOr<std::unique_ptr<BearerTokenAuthenticator>> FromFile(
      const std::string& path);

  // UNAUTHENTICATED (saying what is missing or wrong, never echoing the token)
  // unless `authorization` holds a configured bearer token. The scheme name is
  // case-insensitive, as in RFC 6750.
  absl::Status CheckAuthorization(absl::string_view authorization) const;

  // Looks up the `authorization` entry of a call's client metadata.
  absl::Status Check(const std::multimap<grpc::string_ref, grpc::string_ref>& metadata) const;

  size_t token_count() const { return tokens_.size(); }

 private:
  explicit BearerTokenAuthenticator(std::vector<std::string> tokens)
      : tokens_(std::move(tokens)) {}

  std::vector<std::string> tokens_;
};

// The server's authenticator from its flags: the token file if given, else
// the token in `env_token` (DIKKAT_AUTH_TOKEN) if set, else none (nullptr:
// every caller is accepted). Both given is an error, so that a stale
// environment variable cannot silently widen access.
absl::StatusOr<std::unique_ptr<BearerTokenAuthenticator>> LoadAuthenticator(
    const std::string& token_file, const char* env_token);

// Constant-time equality of `given` with `secret`: the time depends only on
// secret.size(), not on the contents or length of `given`.
bool ConstantTimeEquals(absl::string_view given, absl::string_view secret);

}  // namespace dikkat::server

#endif  // DIKKAT_SERVER_SECURITY_H_
