#include "client/cli/flags.h"

#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"

namespace dikkat::client::cli {
namespace {

absl::Status BadValue(absl::string_view name, absl::string_view value, absl::string_view want) {
  return absl::InvalidArgumentError(
      absl::StrCat("--", name, "=", value, ": expected ", want));
}

std::string DoubleText(double v) { return absl::StrFormat("%g", v); }

}  // namespace

absl::Status ParseIntList(absl::string_view text, std::vector<int>* out) {
  for (absl::string_view piece : absl::StrSplit(text, absl::ByAnyChar(", "), absl::SkipEmpty())) {
    int value;
    if (!absl::SimpleAtoi(piece, &value)) {
      return absl::InvalidArgumentError(absl::StrCat("'", piece, "' is not an integer"));
    }
    out->push_back(value);
  }
  return absl::OkStatus();
}

absl::Status ParseIdValueMap(absl::string_view text, std::map<int, double>* out) {
  for (absl::string_view piece : absl::StrSplit(text, absl::ByAnyChar(", "), absl::SkipEmpty())) {
    const std::pair<absl::string_view, absl::string_view> kv =
        absl::StrSplit(piece, absl::MaxSplits('=', 1));
    int id;
    double value;
    if (!absl::SimpleAtoi(kv.first, &id) || !absl::SimpleAtod(kv.second, &value)) {
      return absl::InvalidArgumentError(absl::StrCat("'", piece, "' is not ID=VALUE"));
    }
    (*out)[id] = value;
  }
  return absl::OkStatus();
}

void FlagSet::Add(Flag flag) { flags_.push_back(std::move(flag)); }

const FlagSet::Flag* FlagSet::Find(absl::string_view name) const {
  for (const Flag& f : flags_) {
    if (f.name == name) return &f;
  }
  return nullptr;
}

bool FlagSet::TakesValue(absl::string_view name) const {
  const Flag* f = Find(name);
  return f != nullptr && !f->value_name.empty();
}

void FlagSet::String(std::string name, std::string* value, std::string help,
                     std::string value_name) {
  std::string default_text = value->empty() ? "" : absl::StrCat("\"", *value, "\"");
  Add({name, std::move(value_name), std::move(help), std::move(default_text),
       [value](absl::string_view v) {
         *value = std::string(v);
         return absl::OkStatus();
       }});
}

void FlagSet::Strings(std::string name, std::vector<std::string>* values, std::string help,
                      std::string value_name) {
  Add({name, std::move(value_name), std::move(help) + " (repeatable)", "",
       [values](absl::string_view v) {
         values->emplace_back(v);
         return absl::OkStatus();
       }});
}

void FlagSet::Int(std::string name, int* value, std::string help) {
  Add({name, "N", std::move(help), absl::StrCat(*value), [name, value](absl::string_view v) {
         return absl::SimpleAtoi(v, value) ? absl::OkStatus() : BadValue(name, v, "an integer");
       }});
}

void FlagSet::OptionalInt(std::string name, std::optional<int>* value, std::string help) {
  Add({name, "N", std::move(help), "", [name, value](absl::string_view v) {
         int parsed;
         if (!absl::SimpleAtoi(v, &parsed)) return BadValue(name, v, "an integer");
         *value = parsed;
         return absl::OkStatus();
       }});
}

void FlagSet::OptionalUint64(std::string name, std::optional<uint64_t>* value, std::string help) {
  Add({name, "N", std::move(help), "", [name, value](absl::string_view v) {
         uint64_t parsed;
         if (!absl::SimpleAtoi(v, &parsed)) return BadValue(name, v, "an unsigned integer");
         *value = parsed;
         return absl::OkStatus();
       }});
}

void FlagSet::Double(std::string name, double* value, std::string help) {
  Add({name, "X", std::move(help), DoubleText(*value), [name, value](absl::string_view v) {
         return absl::SimpleAtod(v, value) ? absl::OkStatus() : BadValue(name, v, "a number");
       }});
}

void FlagSet::OptionalDouble(std::string name, std::optional<double>* value, std::string help) {
  Add({name, "X", std::move(help), "", [name, value](absl::string_view v) {
         double parsed;
         if (!absl::SimpleAtod(v, &parsed)) return BadValue(name, v, "a number");
         *value = parsed;
         return absl::OkStatus();
       }});
}

void FlagSet::OptionalBool(std::string name, std::optional<bool>* value, std::string help) {
  Add({name, "", std::move(help), "", [name, value](absl::string_view v) {
         if (v == "true" || v == "1") {
           *value = true;
         } else if (v == "false" || v == "0") {
           *value = false;
         } else {
           return BadValue(name, v, "true or false");
         }
         return absl::OkStatus();
       }});
}

void FlagSet::Bool(std::string name, bool* value, std::string help) {
  Add({name, "", std::move(help), *value ? "true" : "", [name, value](absl::string_view v) {
         if (v == "true" || v == "1") {
           *value = true;
         } else if (v == "false" || v == "0") {
           *value = false;
         } else {
           return BadValue(name, v, "true or false");
         }
         return absl::OkStatus();
       }});
}

void FlagSet::IntList(std::string name, std::vector<int>* values, std::string help) {
  Add({name, "LIST", std::move(help), "", [name, values](absl::string_view v) {
         absl::Status s = ParseIntList(v, values);
         return s.ok() ? s : BadValue(name, v, "integers separated by commas");
       }});
}

void FlagSet::IdValueMap(std::string name, std::map<int, double>* values, std::string help) {
  Add({name, "ID=VALUE,...", std::move(help), "", [name, values](absl::string_view v) {
         absl::Status s = ParseIdValueMap(v, values);
         return s.ok() ? s : BadValue(name, v, "ID=VALUE pairs separated by commas");
       }});
}

absl::Status FlagSet::Parse(const std::vector<std::string>& args,
                            std::vector<std::string>* positional) const {
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg == "--") {
      positional->insert(positional->end(), args.begin() + i + 1, args.end());
      break;
    }
    if (arg.size() < 3 || arg.compare(0, 2, "--") != 0) {
      positional->push_back(arg);  // includes "-" (stdin) and negative numbers
      continue;
    }
    absl::string_view body = absl::string_view(arg).substr(2);
    const size_t eq = body.find('=');
    const absl::string_view name = body.substr(0, eq);
    const Flag* flag = Find(name);
    if (flag == nullptr && eq == absl::string_view::npos && name.substr(0, 3) == "no-") {
      const Flag* negated = Find(name.substr(3));
      if (negated != nullptr && negated->value_name.empty()) {
        if (absl::Status s = negated->set("false"); !s.ok()) return s;
        continue;
      }
    }
    if (flag == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("unknown flag --", name, "; see --help"));
    }
    absl::string_view value;
    if (eq != absl::string_view::npos) {
      value = body.substr(eq + 1);
    } else if (flag->value_name.empty()) {
      value = "true";
    } else if (i + 1 < args.size()) {
      value = args[++i];
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("--", name, " needs a value (", flag->value_name, ")"));
    }
    if (absl::Status s = flag->set(value); !s.ok()) return s;
  }
  return absl::OkStatus();
}

std::string FlagSet::Help() const {
  std::vector<std::string> heads;
  size_t width = 0;
  for (const Flag& f : flags_) {
    heads.push_back(f.value_name.empty() ? absl::StrCat("--", f.name)
                                         : absl::StrCat("--", f.name, "=", f.value_name));
    width = std::max(width, heads.back().size());
  }
  width = std::min<size_t>(width, 28);
  std::string out;
  for (size_t i = 0; i < flags_.size(); ++i) {
    const Flag& f = flags_[i];
    std::string line = absl::StrCat("  ", heads[i]);
    if (heads[i].size() > width) {
      absl::StrAppend(&line, "\n", std::string(width + 2, ' '));
    } else {
      line.append(width - heads[i].size(), ' ');
    }
    absl::StrAppend(&line, "  ", f.help);
    if (!f.default_text.empty()) absl::StrAppend(&line, " (default: ", f.default_text, ")");
    absl::StrAppend(&out, line, "\n");
  }
  return out;
}

}  // namespace dikkat::client::cli
