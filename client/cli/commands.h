// Subcommands of the `dikkat` command-line tool and what they share.
#ifndef DIKKAT_CLIENT_CLI_COMMANDS_H_
#define DIKKAT_CLIENT_CLI_COMMANDS_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "client/cli/flags.h"
#include "client/client.h"

namespace dikkat::client::cli {

// Exit codes.
inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;  // RPC error, not serving, ...
inline constexpr int kExitUsage = 2;    // bad flags or arguments
inline constexpr int kExitInterrupted = 130;

// Flags every subcommand accepts.
struct GlobalFlags {
  std::vector<std::string> targets;  // empty = 127.0.0.1:50051
  std::string model;
  double timeout_seconds = 30;
  std::string token;  // falls back to $DIKKAT_TOKEN
  bool tls = false;
  std::string tls_ca_file;
  std::string tls_cert_file;
  std::string tls_key_file;
  std::string tls_server_name;
  int attempts = 4;
  bool wait_for_ready = false;
  int max_message_mb = 64;
};

void RegisterGlobalFlags(GlobalFlags* flags, FlagSet* set);
// Reads the TLS files and builds the client.
absl::StatusOr<std::unique_ptr<Client>> MakeClient(const GlobalFlags& flags);

// What a command gets to run with.
struct CommandContext {
  Client* client;
  const GlobalFlags* globals;
  // Fired by Ctrl-C; pass it to calls (CallOptions::cancel).
  std::shared_ptr<CancelHandle> interrupt;

  CallOptions Call() const {
    CallOptions call;
    call.cancel = interrupt;
    return call;
  }
};

class Command {
 public:
  virtual ~Command() = default;
  virtual std::string name() const = 0;
  virtual std::string summary() const = 0;      // one line for `dikkat --help`
  virtual std::string description() const = 0;  // usage line and text for `dikkat CMD --help`
  virtual void RegisterFlags(FlagSet* flags) = 0;
  // Returns the exit code. Usage errors print their message and return
  // kExitUsage; RPC errors print "error: CODE: message" and return
  // kExitFailure.
  virtual int Run(const CommandContext& context, const std::vector<std::string>& args) = 0;
};

std::unique_ptr<Command> NewGenerateCommand();
std::unique_ptr<Command> NewEncodeCommand();
std::unique_ptr<Command> NewAttentionCommand();
std::unique_ptr<Command> NewInfoCommand();
std::unique_ptr<Command> NewTokenizeCommand();
std::unique_ptr<Command> NewDetokenizeCommand();
std::unique_ptr<Command> NewHealthCommand();
std::unique_ptr<Command> NewBenchCommand();

// ---- helpers shared by commands ----

// Prints "error: CODE: message" to stderr; returns kExitInterrupted for a
// Ctrl-C cancellation, else kExitFailure.
int ReportError(const absl::Status& status, const CommandContext& context);
// Prints "dikkat CMD: message" to stderr and returns kExitUsage.
int UsageError(const std::string& command, const std::string& message);
// The text argument of a command: the positional words joined by spaces;
// a single "-" reads standard input.
std::string JoinedText(const std::vector<std::string>& args);
// "float32" | "bfloat16" | "float16" -> DType.
absl::StatusOr<v1::DType> ParseDType(const std::string& name);
// A token string quoted for a terminal: "text" with escapes.
std::string Quoted(const std::string& token);

}  // namespace dikkat::client::cli

#endif  // DIKKAT_CLIENT_CLI_COMMANDS_H_
