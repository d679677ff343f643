// dikkat: command-line client of the dikkat inference service.
//   dikkat [global flags] COMMAND [flags] [args]
// Global flags may also come after the command. See `dikkat --help`.
#include <signal.h>
#include <unistd.h>

#include <iostream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/cli/commands.h"

namespace dikkat::client::cli {
namespace {

std::vector<std::unique_ptr<Command>> AllCommands() {
  std::vector<std::unique_ptr<Command>> commands;
  commands.push_back(NewGenerateCommand());
  commands.push_back(NewEncodeCommand());
  commands.push_back(NewAttentionCommand());
  commands.push_back(NewInfoCommand());
  commands.push_back(NewTokenizeCommand());
  commands.push_back(NewDetokenizeCommand());
  commands.push_back(NewHealthCommand());
  commands.push_back(NewBenchCommand());
  return commands;
}

std::string GlobalHelp() {
  GlobalFlags globals;
  FlagSet set;
  RegisterGlobalFlags(&globals, &set);
  return set.Help();
}

void PrintOverview(const std::vector<std::unique_ptr<Command>>& commands) {
  std::cout << "dikkat: client of the dikkat Transformer inference service (gRPC)\n\n"
               "usage: dikkat [global flags] COMMAND [flags] [args]\n\n"
               "commands:\n";
  for (const auto& c : commands) {
    std::string name = c->name();
    name.resize(12, ' ');
    std::cout << "  " << name << c->summary() << "\n";
  }
  std::cout << "\nglobal flags (accepted before or after the command):\n"
            << GlobalHelp()
            << "\nRun 'dikkat COMMAND --help' for a command's flags. Exit codes: 0 success, "
               "1 RPC error (printed as 'error: CODE: message'), 2 usage error, 130 "
               "interrupted.\n";
}

void PrintCommandHelp(Command& command) {
  GlobalFlags globals;
  FlagSet own;
  command.RegisterFlags(&own);
  std::cout << command.description() << "\n\nflags:\n"
            << own.Help() << "\nglobal flags:\n"
            << GlobalHelp();
}

// Ctrl-C cancels the running calls through `handle` (the server then stops
// generating at once); a second Ctrl-C exits. SIGINT is blocked in every
// thread and taken by a watcher thread, because a signal handler may not
// lock the mutex that CancelHandle needs. Must run before gRPC starts threads.
void CancelOnInterrupt(std::shared_ptr<CancelHandle> handle) {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  std::thread([handle, set] {
    int signal_number = 0;
    sigwait(&set, &signal_number);
    handle->Cancel();
    sigwait(&set, &signal_number);
    _exit(kExitInterrupted);
  }).detach();
}

bool IsHelp(const std::string& arg) { return arg == "--help" || arg == "-h" || arg == "help"; }

int Main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  std::vector<std::unique_ptr<Command>> commands = AllCommands();

  // The command is the first argument that is neither a flag nor the value
  // of a global flag given as "--flag VALUE".
  GlobalFlags globals;
  FlagSet global_set;
  RegisterGlobalFlags(&globals, &global_set);
  size_t command_index = args.size();
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (IsHelp(arg)) break;
    if (arg.rfind("--", 0) == 0) {
      if (arg.find('=') == std::string::npos && global_set.TakesValue(arg.substr(2))) ++i;
      continue;
    }
    command_index = i;
    break;
  }
  if (command_index == args.size()) {
    PrintOverview(commands);
    const bool asked = !args.empty() && IsHelp(args.back());
    return asked || (!args.empty() && IsHelp(args.front())) ? kExitOk : kExitUsage;
  }
  Command* command = nullptr;
  for (const auto& c : commands) {
    if (c->name() == args[command_index]) command = c.get();
  }
  if (command == nullptr) {
    std::cerr << "dikkat: unknown command '" << args[command_index]
              << "'; run 'dikkat --help' for the list\n";
    return kExitUsage;
  }
  std::vector<std::string> rest;
  for (size_t i = 0; i < args.size(); ++i) {
    if (i == command_index) continue;
    if (args[i] == "--help" || args[i] == "-h") {
      PrintCommandHelp(*command);
      return kExitOk;
    }
    rest.push_back(args[i]);
  }

  FlagSet set;
  RegisterGlobalFlags(&globals, &set);
  command->RegisterFlags(&set);
  std::vector<std::string> positional;
  if (absl::Status s = set.Parse(rest, &positional); !s.ok()) {
    return UsageError(command->name(), std::string(s.message()));
  }

  auto interrupt = std::make_shared<CancelHandle>();
  CancelOnInterrupt(interrupt);
  absl::StatusOr<std::unique_ptr<Client>> client = MakeClient(globals);
  if (!client.ok()) return UsageError(command->name(), std::string(client.status().message()));
  CommandContext context{client->get(), &globals, interrupt};
  return command->Run(context, positional);
}

}  // namespace
}  // namespace dikkat::client::cli

int main(int argc, char** argv) { return dikkat::client::cli::Main(argc, argv); }
