// safetensors reading (mmap + validated JSON header) and writing.
//
// Format: an 8-byte little-endian header length N, N bytes of JSON mapping
// tensor names to {dtype, shape, data_offsets: [begin, end)} (offsets are
// relative to the data section, which starts at byte 8 + N), then raw
// little-endian tensor bytes. An optional "__metadata__" entry maps strings to
// strings.
#include "model/io/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/from_blob.h>
#include <c10/util/Exception.h>
#include <nlohmann/json.hpp>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "model/io/weights.h"

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "safetensors bytes are little-endian; this reader maps them as-is"
#endif

namespace dikkat::model {
namespace {

using json = nlohmann::json;

constexpr char kMetadataKey[] = "__metadata__";
constexpr size_t kLengthPrefixBytes = 8;
// The reference implementation refuses headers above 100 MB; a larger
// length is a corrupt file, not a big model.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;

struct DtypeInfo {
  const char* name;
  at::ScalarType type;
  size_t itemsize;
};

constexpr DtypeInfo kDtypes[] = {
    {"F64", at::kDouble, 8},  {"F32", at::kFloat, 4}, {"F16", at::kHalf, 2},
    {"BF16", at::kBFloat16, 2}, {"I64", at::kLong, 8}, {"I32", at::kInt, 4},
    {"I16", at::kShort, 2},   {"I8", at::kChar, 1},   {"U8", at::kByte, 1},
    {"BOOL", at::kBool, 1},
};

const DtypeInfo* DtypeByName(const std::string& name) {
  for (const DtypeInfo& d : kDtypes) {
    if (name == d.name) return &d;
  }
  return nullptr;
}

const DtypeInfo* DtypeByType(at::ScalarType type) {
  for (const DtypeInfo& d : kDtypes) {
    if (type == d.type) return &d;
  }
  return nullptr;
}

std::string AllowedDtypes() {
  std::vector<std::string> names;
  for (const DtypeInfo& d : kDtypes) names.push_back(d.name);
  return absl::StrJoin(names, ", ");
}

// A read-only private mapping of a whole file. Tensors that alias it hold a
// shared_ptr, so the mapping lives until the last such tensor is freed.
class MappedFile {
 public:
  static absl::StatusOr<std::shared_ptr<const MappedFile>> Open(const std::string& path) {
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      int err = errno;
      return absl::ErrnoToStatus(err, absl::StrCat("cannot open weights file '", path, "'"));
    }
    struct stat st;
    if (::fstat(fd, &st) != 0) {
      int err = errno;
      ::close(fd);
      return absl::ErrnoToStatus(err, absl::StrCat("cannot stat weights file '", path, "'"));
    }
    if (!S_ISREG(st.st_mode)) {
      ::close(fd);
      return absl::InvalidArgumentError(
          absl::StrCat("weights file '", path, "' is not a regular file"));
    }
    const size_t size = static_cast<size_t>(st.st_size);
    void* data = nullptr;
    if (size > 0) {  // mmap rejects a zero length; an empty file is reported by the parser
      data = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
      if (data == MAP_FAILED) {
        int err = errno;
        ::close(fd);
        return absl::ErrnoToStatus(err, absl::StrCat("cannot mmap weights file '", path, "'"));
      }
    }
    ::close(fd);  // the mapping keeps its own reference to the file
    return std::shared_ptr<const MappedFile>(new MappedFile(data, size));
  }

  ~MappedFile() {
    if (data_ != nullptr) ::munmap(data_, size_);
  }
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const char* data() const { return static_cast<const char*>(data_); }
  size_t size() const { return size_; }

 private:
  MappedFile(void* data, size_t size) : data_(data), size_(size) {}

  void* data_;
  size_t size_;
};

// One validated header entry.
struct TensorEntry {
  std::string name;
  const DtypeInfo* dtype;
  std::vector<int64_t> shape;
  uint64_t begin;  // offsets relative to the data section
  uint64_t end;
};

absl::Status EntryError(const std::string& path, const std::string& name,
                        const std::string& what) {
  return absl::InvalidArgumentError(
      absl::StrCat("safetensors file '", path, "': tensor '", name, "': ", what));
}

// Parses and checks one header entry on its own (dtype known, shape of
// non-negative ints, byte count == numel * itemsize). Range checks against the
// file and the other entries come later.
absl::StatusOr<TensorEntry> ParseEntry(const std::string& path, const std::string& name,
                                       const json& value) {
  if (!value.is_object()) {
    return EntryError(path, name, absl::StrCat("header entry is ", value.type_name(),
                                               ", expected an object with dtype, shape, "
                                               "data_offsets"));
  }
  TensorEntry entry;
  entry.name = name;

  auto dtype_it = value.find("dtype");
  if (dtype_it == value.end() || !dtype_it->is_string()) {
    return EntryError(path, name, "missing or non-string \"dtype\"");
  }
  const std::string dtype_name = dtype_it->get<std::string>();
  entry.dtype = DtypeByName(dtype_name);
  if (entry.dtype == nullptr) {
    return EntryError(path, name, absl::StrCat("unsupported dtype \"", dtype_name,
                                               "\"; supported: ", AllowedDtypes()));
  }

  auto shape_it = value.find("shape");
  if (shape_it == value.end() || !shape_it->is_array()) {
    return EntryError(path, name, "missing or non-array \"shape\"");
  }
  for (const json& dim : *shape_it) {
    if (!dim.is_number_unsigned() ||
        dim.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return EntryError(path, name, absl::StrCat("shape ", shape_it->dump(),
                                                 " must hold non-negative 64-bit integers"));
    }
    entry.shape.push_back(static_cast<int64_t>(dim.get<uint64_t>()));
  }
  // numel * itemsize, refusing anything that cannot be a byte count in a file.
  uint64_t expected_bytes = entry.dtype->itemsize;
  if (std::find(entry.shape.begin(), entry.shape.end(), 0) != entry.shape.end()) {
    expected_bytes = 0;
  } else {
    for (int64_t d : entry.shape) {
      if (expected_bytes > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) /
                               static_cast<uint64_t>(d)) {
        return EntryError(path, name, absl::StrCat("shape ", shape_it->dump(), " is too large"));
      }
      expected_bytes *= static_cast<uint64_t>(d);
    }
  }

  auto offsets_it = value.find("data_offsets");
  if (offsets_it == value.end() || !offsets_it->is_array() || offsets_it->size() != 2 ||
      !(*offsets_it)[0].is_number_unsigned() || !(*offsets_it)[1].is_number_unsigned()) {
    return EntryError(path, name, "\"data_offsets\" must be [begin, end] non-negative integers");
  }
  entry.begin = (*offsets_it)[0].get<uint64_t>();
  entry.end = (*offsets_it)[1].get<uint64_t>();
  if (entry.end < entry.begin) {
    return EntryError(path, name, absl::StrCat("data_offsets [", entry.begin, ", ", entry.end,
                                               "] end before they begin"));
  }
  if (entry.end - entry.begin != expected_bytes) {
    return EntryError(path, name,
                      absl::StrCat("data_offsets [", entry.begin, ", ", entry.end, "] hold ",
                                   entry.end - entry.begin, " bytes but dtype ",
                                   entry.dtype->name, " with shape ", shape_it->dump(),
                                   " needs ", expected_bytes));
  }
  return entry;
}

// Checks the entries against the data section and each other: every range
// inside the file, no two ranges sharing a byte.
absl::Status CheckRanges(const std::string& path, std::vector<TensorEntry>& entries,
                         uint64_t data_bytes) {
  std::sort(entries.begin(), entries.end(), [](const TensorEntry& a, const TensorEntry& b) {
    return std::tie(a.begin, a.end) < std::tie(b.begin, b.end);
  });
  const TensorEntry* previous = nullptr;
  for (const TensorEntry& e : entries) {
    if (e.end > data_bytes) {
      return absl::DataLossError(absl::StrCat(
          "safetensors file '", path, "': tensor '", e.name, "': data_offsets [", e.begin, ", ",
          e.end, "] end past the data section (", data_bytes, " bytes); the file is truncated"));
    }
    if (e.begin == e.end) continue;  // empty tensors occupy no bytes
    if (previous != nullptr && e.begin < previous->end) {
      return absl::InvalidArgumentError(absl::StrCat(
          "safetensors file '", path, "': tensors '", previous->name, "' [", previous->begin,
          ", ", previous->end, ") and '", e.name, "' [", e.begin, ", ", e.end,
          ") have overlapping data_offsets"));
    }
    previous = &e;
  }
  return absl::OkStatus();
}

// Makes the tensor for one entry: a view on the mapping when the bytes are
// aligned for the dtype, else an aligned copy.
at::Tensor MakeTensor(const std::shared_ptr<const MappedFile>& file, const char* data_section,
                      const TensorEntry& e) {
  const char* bytes = data_section + e.begin;
  const auto options = at::TensorOptions().dtype(e.dtype->type);
  if (reinterpret_cast<uintptr_t>(bytes) % e.dtype->itemsize != 0) {
    at::Tensor copy = at::empty(e.shape, options);
    if (e.end > e.begin) std::memcpy(copy.data_ptr(), bytes, e.end - e.begin);
    return copy;
  }
  // The mapping is PROT_READ: the const_cast only satisfies from_blob's
  // signature; writing through the tensor faults (see weights.h).
  return at::from_blob(const_cast<char*>(bytes), e.shape, [file](void*) {}, options);
}

// A BOOL byte other than 0 or 1 is undefined behaviour for at::kBool.
absl::Status CheckBoolBytes(const std::string& path, const char* data_section,
                            const TensorEntry& e) {
  for (uint64_t i = e.begin; i < e.end; ++i) {
    const auto byte = static_cast<unsigned char>(data_section[i]);
    if (byte > 1) {
      return EntryError(path, e.name, absl::StrCat("BOOL byte ", i - e.begin, " is ",
                                                   static_cast<int>(byte), "; allowed: 0 or 1"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<TensorMap> ParseSafetensors(const std::string& path,
                                           const std::shared_ptr<const MappedFile>& file) {
  const uint64_t file_size = file->size();
  if (file_size < kLengthPrefixBytes) {
    return absl::DataLossError(absl::StrCat("safetensors file '", path, "' is ", file_size,
                                            " bytes, shorter than the 8-byte header length"));
  }
  uint64_t header_bytes = 0;
  std::memcpy(&header_bytes, file->data(), kLengthPrefixBytes);  // little-endian host
  if (header_bytes > file_size - kLengthPrefixBytes) {
    return absl::DataLossError(absl::StrCat(
        "safetensors file '", path, "': header length ", header_bytes, " runs past the end of the ",
        file_size, "-byte file (truncated or not a safetensors file)"));
  }
  if (header_bytes > kMaxHeaderBytes) {
    return absl::InvalidArgumentError(absl::StrCat("safetensors file '", path,
                                                   "': header length ", header_bytes,
                                                   " exceeds the limit of ", kMaxHeaderBytes));
  }
  const char* header_begin = file->data() + kLengthPrefixBytes;
  json header = json::parse(header_begin, header_begin + header_bytes, /*cb=*/nullptr,
                            /*allow_exceptions=*/false);
  if (header.is_discarded() || !header.is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat("safetensors file '", path, "': header (", header_bytes,
                     " bytes) is not a JSON object"));
  }

  std::vector<TensorEntry> entries;
  entries.reserve(header.size());
  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() == kMetadataKey) continue;
    DIKKAT_ASSIGN_OR_RETURN(TensorEntry entry, ParseEntry(path, it.key(), it.value()));
    entries.push_back(std::move(entry));
  }
  const uint64_t data_bytes = file_size - kLengthPrefixBytes - header_bytes;
  DIKKAT_RETURN_IF_ERROR(CheckRanges(path, entries, data_bytes));

  const char* data_section = header_begin + header_bytes;
  TensorMap tensors;
  for (const TensorEntry& e : entries) {
    if (e.dtype->type == at::kBool) {
      DIKKAT_RETURN_IF_ERROR(CheckBoolBytes(path, data_section, e));
    }
    tensors.emplace(e.name, MakeTensor(file, data_section, e));
  }
  return tensors;
}

absl::Status WriteAll(std::FILE* f, const void* data, size_t size, const std::string& path) {
  if (size > 0 && std::fwrite(data, 1, size, f) != size) {
    return absl::ErrnoToStatus(errno, absl::StrCat("cannot write '", path, "'"));
  }
  return absl::OkStatus();
}

absl::Status WriteFile(const std::string& path, const std::string& header,
                       const std::vector<at::Tensor>& contiguous) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) {
    return absl::ErrnoToStatus(errno, absl::StrCat("cannot create '", path, "'"));
  }
  const uint64_t header_bytes = header.size();
  absl::Status status = WriteAll(f, &header_bytes, sizeof(header_bytes), path);
  if (status.ok()) status = WriteAll(f, header.data(), header.size(), path);
  for (const at::Tensor& t : contiguous) {
    if (!status.ok()) break;
    status = WriteAll(f, t.data_ptr(), t.nbytes(), path);
  }
  if (std::fclose(f) != 0 && status.ok()) {
    status = absl::ErrnoToStatus(errno, absl::StrCat("cannot write '", path, "'"));
  }
  return status;
}

}  // namespace

absl::StatusOr<TensorMap> ReadSafetensors(const std::string& path) {
  DIKKAT_ASSIGN_OR_RETURN(std::shared_ptr<const MappedFile> file, MappedFile::Open(path));
  try {
    return ParseSafetensors(path, file);
  } catch (const c10::Error& e) {
    return absl::InternalError(absl::StrCat("safetensors file '", path,
                                            "': ", e.what_without_backtrace()));
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("safetensors file '", path, "': ", e.what()));
  }
}

absl::StatusOr<std::map<std::string, std::vector<std::string>>> ParseSafetensorsIndex(
    absl::string_view index_json, const std::string& index_path) {
  namespace fs = std::filesystem;
  json index = json::parse(index_json.begin(), index_json.end(), /*cb=*/nullptr,
                           /*allow_exceptions=*/false);
  if (index.is_discarded() || !index.is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat("safetensors index '", index_path, "' is not a JSON object"));
  }
  auto map_it = index.find("weight_map");
  if (map_it == index.end() || !map_it->is_object() || map_it->empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "safetensors index '", index_path, "' has no \"weight_map\" object (tensor -> shard)"));
  }

  // Shard name -> tensor names it should hold; each shard is read once.
  std::map<std::string, std::vector<std::string>> names_by_shard;
  for (auto it = map_it->begin(); it != map_it->end(); ++it) {
    if (!it.value().is_string() || it.value().get<std::string>().empty()) {
      return absl::InvalidArgumentError(absl::StrCat("safetensors index '", index_path,
                                                     "': weight_map entry '", it.key(),
                                                     "' must name a shard file"));
    }
    const std::string shard = it.value().get<std::string>();
    const fs::path shard_rel(shard);
    const bool climbs = std::any_of(shard_rel.begin(), shard_rel.end(),
                                    [](const fs::path& part) { return part == ".."; });
    if (shard_rel.is_absolute() || climbs) {
      return absl::InvalidArgumentError(
          absl::StrCat("safetensors index '", index_path, "': shard '", shard, "' for tensor '",
                       it.key(), "' must be a path inside the index's folder (no '..')"));
    }
    names_by_shard[shard].push_back(it.key());
  }
  return names_by_shard;
}

absl::StatusOr<TensorMap> ReadSafetensorsIndex(const std::string& index_path) {
  namespace fs = std::filesystem;
  std::FILE* f = std::fopen(index_path.c_str(), "rb");
  if (f == nullptr) {
    return absl::ErrnoToStatus(errno,
                               absl::StrCat("cannot open safetensors index '", index_path, "'"));
  }
  std::string text;
  char buffer[1 << 16];
  size_t n;
  while ((n = std::fread(buffer, 1, sizeof(buffer), f)) > 0) text.append(buffer, n);
  std::fclose(f);
  DIKKAT_ASSIGN_OR_RETURN(auto names_by_shard, ParseSafetensorsIndex(text, index_path));

  const fs::path dir = fs::path(index_path).parent_path();
  TensorMap tensors;
  for (const auto& [shard, names] : names_by_shard) {
    const std::string shard_path = (dir / shard).string();
    DIKKAT_ASSIGN_OR_RETURN(TensorMap shard_tensors, ReadSafetensors(shard_path));
    for (const std::string& name : names) {
      auto it = shard_tensors.find(name);
      if (it == shard_tensors.end()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "safetensors index '", index_path, "' puts tensor '", name, "' in shard '",
            shard_path, "', which has no such tensor"));
      }
      tensors.emplace(name, std::move(it->second));
    }
  }
  return tensors;
}

absl::Status WriteSafetensors(const std::string& path, const TensorMap& tensors,
                              const std::map<std::string, std::string>& metadata) {
  try {
    json header = json::object();
    if (!metadata.empty()) header[kMetadataKey] = metadata;
    // Widest dtypes first (then by name): with an 8-aligned data section every
    // tensor then starts aligned for its dtype, so readers can map instead of copy.
    std::vector<std::pair<const std::string*, const DtypeInfo*>> order;
    for (const auto& [name, tensor] : tensors) {
      if (name == kMetadataKey || name.empty()) {
        return absl::InvalidArgumentError(
            absl::StrCat("cannot write '", path, "': invalid tensor name '", name, "'"));
      }
      if (!tensor.defined()) {
        return absl::InvalidArgumentError(
            absl::StrCat("cannot write '", path, "': tensor '", name, "' is undefined"));
      }
      const DtypeInfo* dtype = DtypeByType(tensor.scalar_type());
      if (dtype == nullptr) {
        return absl::InvalidArgumentError(absl::StrCat(
            "cannot write '", path, "': tensor '", name, "' has dtype ",
            c10::toString(tensor.scalar_type()), "; supported: ", AllowedDtypes()));
      }
      order.emplace_back(&name, dtype);
    }
    std::stable_sort(order.begin(), order.end(), [](const auto& a, const auto& b) {
      return a.second->itemsize > b.second->itemsize;
    });

    std::vector<at::Tensor> contiguous;
    contiguous.reserve(order.size());
    uint64_t offset = 0;
    for (const auto& [name, dtype] : order) {
      at::Tensor t = tensors.at(*name).to(at::kCPU).contiguous();
      const uint64_t bytes = t.nbytes();
      header[*name] = {{"dtype", dtype->name},
                       {"shape", t.sizes().vec()},
                       {"data_offsets", {offset, offset + bytes}}};
      offset += bytes;
      contiguous.push_back(std::move(t));
    }
    std::string header_text = header.dump();
    // Spaces pad the header so that the data section starts 8-aligned, which
    // lets readers (this one included) map every dtype without copying.
    header_text.append((8 - header_text.size() % 8) % 8, ' ');
    return WriteFile(path, header_text, contiguous);
  } catch (const c10::Error& e) {
    return absl::InternalError(
        absl::StrCat("cannot write '", path, "': ", e.what_without_backtrace()));
  } catch (const std::exception& e) {  // e.g. a tensor name that is not UTF-8
    return absl::InvalidArgumentError(absl::StrCat("cannot write '", path, "': ", e.what()));
  }
}

}  // namespace dikkat::model
