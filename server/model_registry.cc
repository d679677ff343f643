#include "server/model_registry.h"

#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace dikkat::server {

absl::Status ModelRegistry::Add(std::string name, std::unique_ptr<Engine> engine) {
  if (name.empty()) return absl::InvalidArgumentError("model name is empty");
  if (engine == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("model '", name, "' has no engine"));
  }
  for (const Entry& e : entries_) {
    if (e.name == name) {
      return absl::InvalidArgumentError(absl::StrCat(
          "model name '", name, "' is used twice; give each model a distinct name (name=path)"));
    }
  }
  entries_.push_back(Entry{std::move(name), std::move(engine)});
  return absl::OkStatus();
}

absl::StatusOr<Engine*> ModelRegistry::Find(absl::string_view name) const {
  if (entries_.empty()) return absl::UnavailableError("the server hosts no model yet");
  if (name.empty()) return entries_.front().engine.get();
  for (const Entry& e : entries_) {
    if (e.name == name) return e.engine.get();
  }
  return absl::NotFoundError(absl::StrCat("model '", name, "' is not hosted here; hosted: ",
                                          absl::StrJoin(names(), ", "),
                                          " (empty = the default, '", default_name(), "')"));
}

absl::string_view ModelRegistry::ResolveName(absl::string_view name) const {
  if (name.empty() && !entries_.empty()) return entries_.front().name;
  return name;
}

const std::string& ModelRegistry::default_name() const {
  static const std::string kNone;
  return entries_.empty() ? kNone : entries_.front().name;
}

std::vector<std::string> ModelRegistry::names() const {
  std::vector<std::string> out;
  out.reserve(entries_.size());
  for (const Entry& e : entries_) out.push_back(e.name);
  return out;
}

void ModelRegistry::StopAcceptingAll() {
  for (Entry& e : entries_) e.engine->StopAccepting();
}

void ModelRegistry::ShutdownAll(absl::Duration grace) {
  std::vector<std::thread> threads;
  threads.reserve(entries_.size());
  for (Entry& e : entries_) {
    Engine* engine = e.engine.get();
    threads.emplace_back([engine, grace] { engine->Shutdown(grace); });
  }
  for (std::thread& t : threads) t.join();
}

absl::StatusOr<std::vector<ModelSpec>> ParseModelSpecs(const std::vector<std::string>& values) {
  std::vector<ModelSpec> specs;
  for (const std::string& value : values) {
    for (absl::string_view item : absl::StrSplit(value, ',')) {
      item = absl::StripAsciiWhitespace(item);
      if (item.empty()) {
        return absl::InvalidArgumentError(
            absl::StrCat("--model '", value, "' has an empty entry; use name=path or path"));
      }
      ModelSpec spec;
      const size_t eq = item.find('=');
      if (eq != absl::string_view::npos) {
        spec.name = std::string(item.substr(0, eq));
        spec.path = std::string(item.substr(eq + 1));
      } else {
        spec.path = std::string(item);
        absl::string_view trimmed = absl::StripSuffix(item, "/");
        const size_t slash = trimmed.rfind('/');
        spec.name = std::string(slash == absl::string_view::npos ? trimmed
                                                                 : trimmed.substr(slash + 1));
      }
      if (spec.name.empty() || spec.path.empty()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "--model entry '", item, "' needs a non-empty name and path (name=path or path)"));
      }
      for (const ModelSpec& other : specs) {
        if (other.name == spec.name) {
          return absl::InvalidArgumentError(
              absl::StrCat("--model names '", spec.name, "' twice (", other.path, " and ",
                           spec.path, "); give distinct names with name=path"));
        }
      }
      specs.push_back(std::move(spec));
    }
  }
  return specs;
}

}  // namespace dikkat::server
