// A small command-line flag parser for the dikkat CLI. absl::flags has one
// global namespace of flags, but each subcommand here has its own flags and
// its own --help, so the CLI parses with one FlagSet per subcommand.
#ifndef DIKKAT_CLIENT_CLI_FLAGS_H_
#define DIKKAT_CLIENT_CLI_FLAGS_H_

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace dikkat::client::cli {

// Flags bound to variables owned by the caller, which must outlive the set.
// Accepted forms: --name=value, --name value, --name / --no-name for
// booleans; "--" ends the flags. Not thread-safe (used from main only).
class FlagSet {
 public:
  void String(std::string name, std::string* value, std::string help,
              std::string value_name = "TEXT");
  // Repeatable: every occurrence appends.
  void Strings(std::string name, std::vector<std::string>* values, std::string help,
               std::string value_name = "TEXT");
  void Int(std::string name, int* value, std::string help);
  void OptionalInt(std::string name, std::optional<int>* value, std::string help);
  void OptionalUint64(std::string name, std::optional<uint64_t>* value, std::string help);
  void Double(std::string name, double* value, std::string help);
  void OptionalDouble(std::string name, std::optional<double>* value, std::string help);
  void Bool(std::string name, bool* value, std::string help);
  // A boolean left unset unless given (--name or --no-name).
  void OptionalBool(std::string name, std::optional<bool>* value, std::string help);
  // Comma- or space-separated integers; repeatable, every occurrence appends.
  void IntList(std::string name, std::vector<int>* values, std::string help);
  // Comma- or space-separated ID=VALUE pairs (e.g. 50256=-100,13=2.5);
  // repeatable, every occurrence adds (a repeated id takes the last value).
  void IdValueMap(std::string name, std::map<int, double>* values, std::string help);

  // Parses `args`; non-flag arguments go to `positional` in order.
  // INVALID_ARGUMENT names the flag and the bad value.
  absl::Status Parse(const std::vector<std::string>& args,
                     std::vector<std::string>* positional) const;

  // True when `name` is a flag of this set that needs a value.
  bool TakesValue(absl::string_view name) const;

  // One line or more per flag: "  --name=VALUE  help (default: ...)".
  std::string Help() const;

 private:
  struct Flag {
    std::string name;
    std::string value_name;  // empty for booleans
    std::string help;
    std::string default_text;
    std::function<absl::Status(absl::string_view)> set;
  };
  void Add(Flag flag);
  const Flag* Find(absl::string_view name) const;

  std::vector<Flag> flags_;
};

// Parses "1,2, 3" or "1 2 3" into integers.
absl::Status ParseIntList(absl::string_view text, std::vector<int>* out);

// Parses "5=-100,7=2.5" (or space-separated) into id -> value.
absl::Status ParseIdValueMap(absl::string_view text, std::map<int, double>* out);

}  // namespace dikkat::client::cli

#endif  // DIKKAT_CLIENT_CLI_FLAGS_H_
