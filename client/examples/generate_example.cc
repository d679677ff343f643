// A first program with the dikkat client library: connect, print what the
// server hosts, stream a generation, and embed a sentence.
//
//   generate_example [HOST:PORT] [PROMPT]
//
// Defaults: 127.0.0.1:50051 and "The meaning of attention is".
#include <cmath>
#include <cstdio>
#include <iostream>
#include <string>

#include "client/client.h"
#include "client/tensor.h"

namespace {

namespace client = dikkat::client;
namespace v1 = dikkat::v1;

int Fail(const char* what, const absl::Status& status) {
  std::cerr << what << " failed: " << absl::StatusCodeToString(status.code()) << ": "
            << status.message() << "\n";
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  client::ClientOptions options;
  if (argc > 1) options.targets = {argv[1]};
  const std::string prompt = argc > 2 ? argv[2] : "The meaning of attention is";
  options.default_timeout = absl::Seconds(60);
  absl::StatusOr<std::unique_ptr<client::Client>> created = client::Client::Create(options);
  if (!created.ok()) return Fail("Client::Create", created.status());
  client::Client& dikkat = **created;

  // 1. What does the server host?
  absl::StatusOr<v1::GetModelInfoResponse> info = dikkat.GetModelInfo();
  if (!info.ok()) return Fail("GetModelInfo", info.status());
  std::cout << "server " << info->server_version() << "\n";
  for (const v1::ModelInfo& model : info->models()) {
    std::cout << "  " << model.name() << (model.is_default() ? " (default)" : "") << ": "
              << model.architecture() << ", d_model " << model.d_model() << ", vocab "
              << model.vocab_size() << "\n";
  }

  // 2. Stream a generation: text appears as the server produces it.
  v1::GenerateRequest generate;
  *generate.mutable_input() = client::TextInput(prompt);
  generate.set_max_new_tokens(32);
  generate.mutable_sampling()->set_temperature(0.8f);
  generate.mutable_sampling()->set_seed(1);
  std::cout << "\n" << prompt;
  v1::FinishReason finish = v1::FINISH_REASON_UNSPECIFIED;
  absl::Status streamed =
      dikkat.GenerateStream(generate, [&](const v1::GenerateResponse& chunk) {
        std::cout << chunk.text() << std::flush;
        if (chunk.finish_reason() != v1::FINISH_REASON_UNSPECIFIED) finish = chunk.finish_reason();
        return true;  // false would cancel the generation
      });
  std::cout << "\n";
  if (!streamed.ok()) return Fail("Generate", streamed);
  std::cout << "[finished: " << client::FinishReasonName(finish) << "]\n";

  // 3. Embed a sentence and look at the vector.
  v1::EncodeRequest encode;
  *encode.add_inputs() = client::TextInput("Attention is all you need.");
  encode.set_normalize(true);
  absl::StatusOr<v1::EncodeResponse> encoded = dikkat.Encode(encode);
  if (!encoded.ok()) return Fail("Encode", encoded.status());
  absl::StatusOr<client::DecodedTensor> embedding =
      client::DecodeTensor(encoded->results(0).embedding());
  if (!embedding.ok()) return Fail("DecodeTensor", embedding.status());
  double norm = 0;
  for (float v : embedding->values) norm += static_cast<double>(v) * v;
  std::cout << "\nembedding: " << embedding->values.size() << " values, norm "
            << std::sqrt(norm) << ", first:";
  for (size_t i = 0; i < 4 && i < embedding->values.size(); ++i) {
    std::cout << " " << embedding->values[i];
  }
  std::cout << "\n";
  return 0;
}
