// TLS and mutual TLS between the client and an in-process server, with a
// CA and certificates made by the openssl command at test time.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "client/client.h"
#include "fake_dikkat_server.h"
#include "grpcpp/security/server_credentials.h"

namespace dikkat::client {
namespace {

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

// CA, a server certificate for localhost / 127.0.0.1, a client certificate,
// and a second CA that signed nothing here.
class TlsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (std::system("openssl version >/dev/null 2>&1") != 0) return;
    char pattern[] = "/tmp/dikkat_tls_test_XXXXXX";
    ASSERT_NE(mkdtemp(pattern), nullptr);
    dir_ = new std::string(pattern);
    const std::string d = *dir_;
    const std::string key = "-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes";
    const std::string script = absl::StrCat(
        "set -e; cd ", d, "\n",
        "openssl req -x509 ", key, " -keyout ca.key -out ca.pem -days 2 -subj /CN=test-ca\n",
        "openssl req -x509 ", key, " -keyout other.key -out other.pem -days 2 -subj /CN=other\n",
        "openssl req ", key, " -keyout server.key -out server.csr -subj /CN=localhost\n",
        "printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\\n' > server.ext\n",
        "openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial ",
        "-out server.pem -days 2 -extfile server.ext\n",
        "openssl req ", key, " -keyout client.key -out client.csr -subj /CN=client\n",
        "printf 'extendedKeyUsage=clientAuth\\n' > client.ext\n",
        "openssl x509 -req -in client.csr -CA ca.pem -CAkey ca.key -CAcreateserial ",
        "-out client.pem -days 2 -extfile client.ext\n");
    std::ofstream(d + "/make.sh") << script;
    ASSERT_EQ(std::system(absl::StrCat("sh ", d, "/make.sh >", d, "/log 2>&1").c_str()), 0)
        << ReadFile(d + "/log");
  }
  static void TearDownTestSuite() {
    if (dir_ == nullptr) return;
    std::system(absl::StrCat("rm -rf ", *dir_).c_str());
    delete dir_;
    dir_ = nullptr;
  }
  void SetUp() override {
    if (dir_ == nullptr) GTEST_SKIP() << "the openssl command is not installed";
  }

  static std::string Pem(const std::string& name) { return ReadFile(*dir_ + "/" + name); }

  // A TLS server; with `require_client_cert`, mutual TLS.
  std::unique_ptr<grpc::Server> StartServer(bool require_client_cert, int* port) {
    grpc::SslServerCredentialsOptions ssl(
        require_client_cert ? GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY
                            : GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE);
    ssl.pem_root_certs = Pem("ca.pem");
    ssl.pem_key_cert_pairs.push_back({Pem("server.key"), Pem("server.pem")});
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::SslServerCredentials(ssl), port);
    builder.RegisterService(&service_);
    return builder.BuildAndStart();
  }

  absl::Status Call(ClientOptions options) {
    options.retry.max_attempts = 1;
    options.default_timeout = absl::Seconds(10);
    absl::StatusOr<std::unique_ptr<Client>> client = Client::Create(std::move(options));
    if (!client.ok()) return client.status();
    return (*client)->GetModelInfo().status();
  }

  static std::string* dir_;
  testing::FakeDikkatService service_{"tls"};
};

std::string* TlsTest::dir_ = nullptr;

TEST_F(TlsTest, ServerCertificateIsVerifiedAgainstTheGivenRoots) {
  int port = 0;
  auto server = StartServer(/*require_client_cert=*/false, &port);
  ClientOptions options;
  options.targets = {absl::StrCat("localhost:", port)};
  options.tls.enabled = true;
  options.tls.root_certs_pem = Pem("ca.pem");
  EXPECT_TRUE(Call(options).ok()) << Call(options);

  options.tls.root_certs_pem = Pem("other.pem");  // a CA that did not sign the server
  EXPECT_EQ(Call(options).code(), absl::StatusCode::kUnavailable);

  ClientOptions plaintext;  // TLS server, plaintext client
  plaintext.targets = options.targets;
  EXPECT_EQ(Call(plaintext).code(), absl::StatusCode::kUnavailable);
  server->Shutdown();
}

TEST_F(TlsTest, ServerNameOverrideChecksTheCertificateName) {
  int port = 0;
  auto server = StartServer(false, &port);
  ClientOptions options;
  options.targets = {absl::StrCat("127.0.0.1:", port), absl::StrCat("127.0.0.1:", port)};
  options.tls.enabled = true;
  options.tls.root_certs_pem = Pem("ca.pem");
  options.tls.server_name_override = "localhost";
  EXPECT_TRUE(Call(options).ok()) << Call(options);
  options.tls.server_name_override = "not-the-server.example";
  EXPECT_EQ(Call(options).code(), absl::StatusCode::kUnavailable);
  server->Shutdown();
}

TEST_F(TlsTest, MutualTlsNeedsTheClientCertificate) {
  int port = 0;
  auto server = StartServer(/*require_client_cert=*/true, &port);
  ClientOptions options;
  options.targets = {absl::StrCat("localhost:", port)};
  options.tls.enabled = true;
  options.tls.root_certs_pem = Pem("ca.pem");
  EXPECT_EQ(Call(options).code(), absl::StatusCode::kUnavailable);

  options.tls.client_cert_pem = Pem("client.pem");
  options.tls.client_key_pem = Pem("client.key");
  options.bearer_token = "t";
  EXPECT_TRUE(Call(options).ok()) << Call(options);
  EXPECT_EQ(service_.last().authorization, "Bearer t");
  server->Shutdown();
}

}  // namespace
}  // namespace dikkat::client
