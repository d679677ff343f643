// ModelRegistry: the engines a server hosts, by name. The first one added is
// the default (requests with an empty `model` field go to it).
//
// Owns the engines. Filled once at start-up, before the gRPC server starts,
// and read-only afterwards: the const lookups are then thread-safe without a
// lock. Add is not thread-safe.
#ifndef DIKKAT_SERVER_MODEL_REGISTRY_H_
#define DIKKAT_SERVER_MODEL_REGISTRY_H_

#include <memory>
#include <string>
#include "absl/strings/string_view.h"
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "server/engine.h"

namespace dikkat::server {

class ModelRegistry {
 public:
  struct Entry {
    std::string name;
    std::unique_ptr<Engine> engine;
  };

  ModelRegistry() = default;
  ModelRegistry(const ModelRegistry&) = delete;
  ModelRegistry& operator=(const ModelRegistry&) = delete;

  // INVALID_ARGUMENT for an empty or already used name, or a null engine.
  absl::Status Add(std::string name, std::unique_ptr<Engine> engine);

  // Empty name -> the default model. NOT_FOUND lists the hosted models.
  absl::StatusOr<Engine*> Find(absl::string_view name) const;

  // The name a request's `model` field resolves to ("" -> the default's name).
  absl::string_view ResolveName(absl::string_view name) const;

  bool empty() const { return entries_.empty(); }
  size_t size() const { return entries_.size(); }
  const std::vector<Entry>& entries() const { return entries_; }
  const std::string& default_name() const;
  std::vector<std::string> names() const;

  // Engine::Shutdown(grace) on every engine at once (in parallel, so the
  // total wait is one grace period, not one per model).
  // Every engine refuses new work from now on (returns at once).
  void StopAcceptingAll();
  void ShutdownAll(absl::Duration grace);

 private:
  std::vector<Entry> entries_;  // in the order added; [0] is the default
};

// One --model value: "name=path" or "path" (the name is then the folder's
// last component).
struct ModelSpec {
  std::string name;
  std::string path;
};

// Parses --model values; each may also be a comma-separated list.
// INVALID_ARGUMENT for an empty entry, name or path, or a repeated name.
absl::StatusOr<std::vector<ModelSpec>> ParseModelSpecs(const std::vector<std::string>& values);

}  // namespace dikkat::server

#endif  // DIKKAT_SERVER_MODEL_REGISTRY_H_
