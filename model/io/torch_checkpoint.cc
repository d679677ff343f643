// PyTorch zip checkpoints (`torch.save(state_dict)`).
//
// Why not torch::pickle_load: LibTorch 1.13's unpickler turns every
// collections.OrderedDict into None (it only expects them as a tensor's empty
// backward hooks), and `model.state_dict()` *is* an OrderedDict, so
// pickle_load fails on the most common checkpoint there is. Instead this file
// runs a small pickle machine over `data.pkl` that understands exactly what
// torch.save writes (dicts, lists, tuples, scalars, strings, OrderedDict,
// torch._utils._rebuild_tensor_v2 / _rebuild_parameter and storage persistent
// ids) and reads the storages with LibTorch's own zip reader. It never
// executes anything: unknown classes become opaque values that are dropped.
#include "model/io/torch_checkpoint.h"

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>
#include <ATen/ops/from_blob.h>
#include <c10/core/ScalarType.h>
#include <c10/util/Exception.h>
#include <caffe2/serialize/inline_container.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"
#include "common/status_macros.h"
#include "model/io/weights.h"

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "torch.save storages are little-endian; this reader uses them as-is"
#endif

namespace dikkat::model {
namespace {

// The legacy (pre-1.6) torch.save format starts with the pickled magic number
// 0x1950a86a20f9469cfc6c: PROTO 2, LONG1 of 10 bytes, little-endian.
constexpr unsigned char kLegacyMagic[] = {0x80, 0x02, 0x8a, 0x0a, 0x6c, 0xfc, 0x9c,
                                          0x46, 0xf9, 0x20, 0x6a, 0xa8, 0x50, 0x19};

// A storage record of the archive (`data/<key>`), shared by every tensor that
// views it (tied weights, slices).
struct Storage {
  std::shared_ptr<at::DataPtr> bytes;
  size_t nbytes = 0;
  at::ScalarType dtype = at::kFloat;
};

struct Value;
using ValuePtr = std::shared_ptr<Value>;

// One object on the pickle machine's stack. Values are shared because the
// memo refers to the same dict that later opcodes fill in.
struct Value {
  enum class Kind { kNone, kBool, kInt, kFloat, kString, kTuple, kList, kDict, kGlobal,
                    kStorage, kTensor, kOpaque };
  Kind kind = Kind::kNone;
  int64_t int_value = 0;                                // kBool, kInt
  double float_value = 0;                               // kFloat
  std::string text;                                     // kString; kGlobal: "module.name"
  std::vector<ValuePtr> items;                          // kTuple, kList
  std::vector<std::pair<ValuePtr, ValuePtr>> entries;   // kDict, in insertion order
  Storage storage;                                      // kStorage
  at::Tensor tensor;                                    // kTensor

  Value() = default;
  Value(const Value&) = delete;
  Value& operator=(const Value&) = delete;
  // Iterative: a pickle can nest containers as deep as its bytes allow (a
  // 1 MiB data.pkl, ~100k levels), and the default destructor would recurse
  // once per level and overflow the stack. Children whose last reference
  // this is are emptied here, so destroying them recurses no further.
  ~Value() {
    std::vector<ValuePtr> pending;
    TakeChildren(pending);
    while (!pending.empty()) {
      ValuePtr v = std::move(pending.back());
      pending.pop_back();
      if (v != nullptr && v.use_count() == 1) v->TakeChildren(pending);
    }
  }

 private:
  void TakeChildren(std::vector<ValuePtr>& out) {
    for (ValuePtr& item : items) out.push_back(std::move(item));
    for (auto& [key, value] : entries) {
      out.push_back(std::move(key));
      out.push_back(std::move(value));
    }
    items.clear();
    entries.clear();
  }
};

ValuePtr Make(Value::Kind kind) {
  auto v = std::make_shared<Value>();
  v->kind = kind;
  return v;
}

bool StorageDtype(const std::string& global, at::ScalarType* dtype) {
  static const std::map<std::string, at::ScalarType> kTypes = {
      {"torch.DoubleStorage", at::kDouble}, {"torch.FloatStorage", at::kFloat},
      {"torch.HalfStorage", at::kHalf},     {"torch.BFloat16Storage", at::kBFloat16},
      {"torch.LongStorage", at::kLong},     {"torch.IntStorage", at::kInt},
      {"torch.ShortStorage", at::kShort},   {"torch.CharStorage", at::kChar},
      {"torch.ByteStorage", at::kByte},     {"torch.BoolStorage", at::kBool},
      {"torch.ComplexFloatStorage", at::kComplexFloat},
      {"torch.ComplexDoubleStorage", at::kComplexDouble},
      {"torch.UntypedStorage", at::kByte},
  };
  auto it = kTypes.find(global);
  if (it == kTypes.end()) return false;
  *dtype = it->second;
  return true;
}

// Pickle opcodes (Python's Lib/pickletools.py documents each one).
enum Op : uint8_t {
  kMark = '(', kStop = '.', kPop = '0', kPopMark = '1', kDup = '2', kBinInt = 'J',
  kBinInt1 = 'K', kBinInt2 = 'M', kNoneOp = 'N', kBinPersId = 'Q', kReduce = 'R',
  kBinString = 'T', kShortBinString = 'U', kBinUnicode = 'X', kBinBytes = 'B',
  kShortBinBytes = 'C', kAppend = 'a', kBuild = 'b', kGlobalOp = 'c', kDictOp = 'd',
  kEmptyDict = '}', kAppends = 'e', kBinGet = 'h', kLongBinGet = 'j', kListOp = 'l',
  kEmptyList = ']', kBinPut = 'q', kLongBinPut = 'r', kSetItem = 's', kTupleOp = 't',
  kEmptyTuple = ')', kSetItems = 'u', kBinFloat = 'G', kProto = 0x80, kNewObj = 0x81,
  kTuple1 = 0x85, kTuple2 = 0x86, kTuple3 = 0x87, kNewTrue = 0x88, kNewFalse = 0x89,
  kLong1 = 0x8a, kLong4 = 0x8b, kShortBinUnicode = 0x8c, kBinUnicode8 = 0x8d,
  kBinBytes8 = 0x8e, kEmptySet = 0x8f, kAddItems = 0x90, kFrozenSet = 0x91,
  kNewObjEx = 0x92, kStackGlobal = 0x93, kMemoize = 0x94, kFrame = 0x95,
};

// Runs data.pkl of one archive. Not thread-safe; one instance per load.
class CheckpointUnpickler {
 public:
  CheckpointUnpickler(std::string path, const CheckpointRecordReader& records, const char* data,
                      size_t size)
      : path_(std::move(path)), records_(records), data_(data), size_(size) {}

  // A pickle can build containers that hold themselves: through the memo,
  // and without it (DUP a list, then APPEND it to itself). Shared references
  // never free such a cycle, and it need not stay reachable from the stack
  // or the memo (POP it, or pass it to REDUCE), so every container this
  // unpickler made is emptied here, which frees them all. (Found by
  // fuzz/torch_pickle_fuzzer.cc: walking from the stack and the memo leaked
  // the cycles left behind.) Call sites use the result of Run() (and the
  // tensors taken from it) before this runs.
  ~CheckpointUnpickler() {
    // Move the children out first, then drop them: clearing one value must
    // not free another that is still to be cleared. Once all are empty,
    // dropping them recurses nowhere.
    std::vector<ValuePtr> children;
    for (const ValuePtr& v : containers_) {
      for (ValuePtr& item : v->items) children.push_back(std::move(item));
      for (auto& [key, value] : v->entries) {
        children.push_back(std::move(key));
        children.push_back(std::move(value));
      }
      v->items.clear();
      v->entries.clear();
    }
  }

  absl::StatusOr<ValuePtr> Run() {
    bool done = false;
    while (!done) {
      DIKKAT_ASSIGN_OR_RETURN(absl::string_view op, Take(1));
      op_start_ = pos_ - 1;
      DIKKAT_RETURN_IF_ERROR(Step(static_cast<uint8_t>(op[0]), &done));
    }
    if (stack_.size() != 1) return Error("STOP with a stack that does not hold one object");
    return stack_.back();
  }

 private:
  absl::Status Error(absl::string_view what) const {
    return absl::InvalidArgumentError(
        absl::StrCat("checkpoint '", path_, "': data.pkl byte ", op_start_, ": ", what));
  }

  absl::StatusOr<absl::string_view> Take(size_t n) {
    if (n > size_ - pos_) return Error("unexpected end of data.pkl");
    absl::string_view bytes(data_ + pos_, n);
    pos_ += n;
    return bytes;
  }

  // Little-endian unsigned integer of n bytes.
  absl::StatusOr<uint64_t> TakeUint(size_t n) {
    DIKKAT_ASSIGN_OR_RETURN(absl::string_view bytes, Take(n));
    uint64_t v = 0;
    for (size_t i = 0; i < n; ++i) v |= uint64_t{static_cast<uint8_t>(bytes[i])} << (8 * i);
    return v;
  }

  absl::StatusOr<std::string> TakeLine() {
    const void* nl = std::memchr(data_ + pos_, '\n', size_ - pos_);
    if (nl == nullptr) return Error("unterminated GLOBAL name");
    const size_t n = static_cast<const char*>(nl) - (data_ + pos_);
    std::string line(data_ + pos_, n);
    pos_ += n + 1;
    return line;
  }

  absl::StatusOr<ValuePtr> Pop() {
    if (stack_.empty() || (!marks_.empty() && stack_.size() == marks_.back())) {
      return Error("stack underflow");
    }
    ValuePtr v = std::move(stack_.back());
    stack_.pop_back();
    return v;
  }

  absl::StatusOr<ValuePtr> Top(Value::Kind kind, const char* what) {
    if (stack_.empty() || stack_.back()->kind != kind) {
      return Error(absl::StrCat(what, " on a stack whose top is not the right container"));
    }
    return stack_.back();
  }

  absl::StatusOr<std::vector<ValuePtr>> PopToMark() {
    if (marks_.empty()) return Error("no MARK on the stack");
    const size_t mark = marks_.back();
    marks_.pop_back();
    std::vector<ValuePtr> items(std::make_move_iterator(stack_.begin() + mark),
                                std::make_move_iterator(stack_.end()));
    stack_.resize(mark);
    return items;
  }

  void Push(ValuePtr v) { stack_.push_back(std::move(v)); }

  // A tuple, list or dict, remembered so that the destructor can break the
  // cycles it may end up in.
  ValuePtr Container(Value::Kind kind) {
    ValuePtr v = Make(kind);
    containers_.push_back(v);
    return v;
  }

  void PushInt(int64_t v, Value::Kind kind = Value::Kind::kInt) {
    ValuePtr value = Make(kind);
    value->int_value = v;
    Push(std::move(value));
  }

  absl::Status PushString(size_t length_bytes) {
    DIKKAT_ASSIGN_OR_RETURN(uint64_t n, TakeUint(length_bytes));
    DIKKAT_ASSIGN_OR_RETURN(absl::string_view bytes, Take(n));
    ValuePtr value = Make(Value::Kind::kString);
    value->text = std::string(bytes);
    Push(std::move(value));
    return absl::OkStatus();
  }

  // Two's-complement little-endian integer (LONG1 / LONG4); weights files
  // never need more than 64 bits.
  absl::Status PushLong(size_t length_bytes) {
    DIKKAT_ASSIGN_OR_RETURN(uint64_t n, TakeUint(length_bytes));
    if (n > 8) return Error(absl::StrCat("integer of ", n, " bytes does not fit 64 bits"));
    DIKKAT_ASSIGN_OR_RETURN(uint64_t raw, TakeUint(n));
    if (n > 0 && n < 8 && (raw >> (8 * n - 1)) & 1) raw |= ~uint64_t{0} << (8 * n);
    PushInt(static_cast<int64_t>(raw));
    return absl::OkStatus();
  }

  absl::Status PushTuple(std::vector<ValuePtr> items) {
    ValuePtr tuple = Container(Value::Kind::kTuple);
    tuple->items = std::move(items);
    Push(std::move(tuple));
    return absl::OkStatus();
  }

  absl::Status PopTuple(size_t n) {
    std::vector<ValuePtr> items(n);
    for (size_t i = n; i > 0; --i) {
      DIKKAT_ASSIGN_OR_RETURN(items[i - 1], Pop());
    }
    return PushTuple(std::move(items));
  }

  absl::Status AddEntries(const ValuePtr& dict, std::vector<ValuePtr> flat) {
    if (flat.size() % 2 != 0) return Error("SETITEMS with an odd number of keys and values");
    for (size_t i = 0; i < flat.size(); i += 2) {
      dict->entries.emplace_back(std::move(flat[i]), std::move(flat[i + 1]));
    }
    return absl::OkStatus();
  }

  absl::Status Memo(uint64_t index) {
    if (stack_.empty()) return Error("PUT on an empty stack");
    memo_[index] = stack_.back();
    return absl::OkStatus();
  }

  absl::Status Recall(uint64_t index) {
    auto it = memo_.find(index);
    if (it == memo_.end()) return Error(absl::StrCat("GET of unknown memo entry ", index));
    Push(it->second);
    return absl::OkStatus();
  }

  absl::Status PushGlobal(std::string module, std::string name) {
    ValuePtr global = Make(Value::Kind::kGlobal);
    global->text = absl::StrCat(module, ".", name);
    Push(std::move(global));
    return absl::OkStatus();
  }

  absl::Status Step(uint8_t op, bool* done) {
    switch (op) {
      case kProto: return Take(1).status();
      case kFrame: return Take(8).status();
      case kStop: *done = true; return absl::OkStatus();
      case kMark: marks_.push_back(stack_.size()); return absl::OkStatus();
      case kPop: return Pop().status();
      case kPopMark: return PopToMark().status();
      case kDup:
        if (stack_.empty()) return Error("DUP on an empty stack");
        Push(stack_.back());
        return absl::OkStatus();
      case kNoneOp: Push(Make(Value::Kind::kNone)); return absl::OkStatus();
      case kNewTrue: PushInt(1, Value::Kind::kBool); return absl::OkStatus();
      case kNewFalse: PushInt(0, Value::Kind::kBool); return absl::OkStatus();
      case kBinInt: {
        DIKKAT_ASSIGN_OR_RETURN(uint64_t v, TakeUint(4));
        PushInt(static_cast<int32_t>(static_cast<uint32_t>(v)));
        return absl::OkStatus();
      }
      case kBinInt1:
      case kBinInt2: {
        DIKKAT_ASSIGN_OR_RETURN(uint64_t v, TakeUint(op == kBinInt1 ? 1 : 2));
        PushInt(static_cast<int64_t>(v));
        return absl::OkStatus();
      }
      case kLong1: return PushLong(1);
      case kLong4: return PushLong(4);
      case kBinFloat: {
        DIKKAT_ASSIGN_OR_RETURN(absl::string_view bytes, Take(8));
        uint64_t bits = 0;
        for (char c : bytes) bits = (bits << 8) | static_cast<uint8_t>(c);  // big-endian
        ValuePtr value = Make(Value::Kind::kFloat);
        std::memcpy(&value->float_value, &bits, sizeof(bits));
        Push(std::move(value));
        return absl::OkStatus();
      }
      case kShortBinString: case kShortBinBytes: case kShortBinUnicode: return PushString(1);
      case kBinString: case kBinBytes: case kBinUnicode: return PushString(4);
      case kBinUnicode8: case kBinBytes8: return PushString(8);
      case kEmptyTuple: return PushTuple({});
      case kTuple1: return PopTuple(1);
      case kTuple2: return PopTuple(2);
      case kTuple3: return PopTuple(3);
      case kTupleOp: {
        DIKKAT_ASSIGN_OR_RETURN(std::vector<ValuePtr> items, PopToMark());
        return PushTuple(std::move(items));
      }
      case kEmptyList: case kEmptySet: Push(Container(Value::Kind::kList)); return absl::OkStatus();
      case kListOp: case kFrozenSet: {
        DIKKAT_ASSIGN_OR_RETURN(std::vector<ValuePtr> items, PopToMark());
        ValuePtr list = Container(Value::Kind::kList);
        list->items = std::move(items);
        Push(std::move(list));
        return absl::OkStatus();
      }
      case kAppend: {
        DIKKAT_ASSIGN_OR_RETURN(ValuePtr v, Pop());
        DIKKAT_ASSIGN_OR_RETURN(ValuePtr list, Top(Value::Kind::kList, "APPEND"));
        list->items.push_back(std::move(v));
        return absl::OkStatus();
      }
      case kAppends: case kAddItems: {
        DIKKAT_ASSIGN_OR_RETURN(std::vector<ValuePtr> items, PopToMark());
        DIKKAT_ASSIGN_OR_RETURN(ValuePtr list, Top(Value::Kind::kList, "APPENDS"));
        for (ValuePtr& v : items) list->items.push_back(std::move(v));
        return absl::OkStatus();
      }
      case kEmptyDict: Push(Container(Value::Kind::kDict)); return absl::OkStatus();
      case kDictOp: {
        DIKKAT_ASSIGN_OR_RETURN(std::vector<ValuePtr> flat, PopToMark());
        ValuePtr dict = Container(Value::Kind::kDict);
        DIKKAT_RETURN_IF_ERROR(AddEntries(dict, std::move(flat)));
        Push(std::move(dict));
        return absl::OkStatus();
      }
      case kSetItem: {
        DIKKAT_ASSIGN_OR_RETURN(ValuePtr v, Pop());
        DIKKAT_ASSIGN_OR_RETURN(ValuePtr k, Pop());
        DIKKAT_ASSIGN_OR_RETURN(ValuePtr dict, Top(Value::Kind::kDict, "SETITEM"));
        dict->entries.emplace_back(std::move(k), std::move(v));
        return absl::OkStatus();
      }
      case kSetItems: {
        DIKKAT_ASSIGN_OR_RETURN(std::vector<ValuePtr> flat, PopToMark());
        DIKKAT_ASSIGN_OR_RETURN(ValuePtr dict, Top(Value::Kind::kDict, "SETITEMS"));
        return AddEntries(dict, std::move(flat));
      }
      case kBinPut: { DIKKAT_ASSIGN_OR_RETURN(uint64_t i, TakeUint(1)); return Memo(i); }
      case kLongBinPut: { DIKKAT_ASSIGN_OR_RETURN(uint64_t i, TakeUint(4)); return Memo(i); }
      case kMemoize: return Memo(memo_.size());
      case kBinGet: { DIKKAT_ASSIGN_OR_RETURN(uint64_t i, TakeUint(1)); return Recall(i); }
      case kLongBinGet: { DIKKAT_ASSIGN_OR_RETURN(uint64_t i, TakeUint(4)); return Recall(i); }
      case kGlobalOp: {
        DIKKAT_ASSIGN_OR_RETURN(std::string module, TakeLine());
        DIKKAT_ASSIGN_OR_RETURN(std::string name, TakeLine());
        return PushGlobal(std::move(module), std::move(name));
      }
      case kStackGlobal: {
        DIKKAT_ASSIGN_OR_RETURN(ValuePtr name, Pop());
        DIKKAT_ASSIGN_OR_RETURN(ValuePtr module, Pop());
        if (name->kind != Value::Kind::kString || module->kind != Value::Kind::kString) {
          return Error("STACK_GLOBAL needs two strings");
        }
        return PushGlobal(module->text, name->text);
      }
      case kReduce: {
        DIKKAT_ASSIGN_OR_RETURN(ValuePtr args, Pop());
        DIKKAT_ASSIGN_OR_RETURN(ValuePtr callable, Pop());
        DIKKAT_ASSIGN_OR_RETURN(ValuePtr result, Reduce(*callable, *args));
        Push(std::move(result));
        return absl::OkStatus();
      }
      case kNewObj: case kNewObjEx: {  // instances of arbitrary classes: kept opaque
        for (int i = op == kNewObj ? 2 : 3; i > 0; --i) DIKKAT_RETURN_IF_ERROR(Pop().status());
        Push(Make(Value::Kind::kOpaque));
        return absl::OkStatus();
      }
      case kBuild:  // object state (e.g. a state_dict's `_metadata`): not weights
        return Pop().status();
      case kBinPersId: {
        DIKKAT_ASSIGN_OR_RETURN(ValuePtr pid, Pop());
        DIKKAT_ASSIGN_OR_RETURN(ValuePtr storage, LoadStorage(*pid));
        Push(std::move(storage));
        return absl::OkStatus();
      }
      default:
        return Error(absl::StrFormat("unsupported pickle opcode 0x%02x", op));
    }
  }

  absl::StatusOr<ValuePtr> Reduce(const Value& callable, const Value& args) {
    if (callable.kind != Value::Kind::kGlobal || args.kind != Value::Kind::kTuple) {
      return Make(Value::Kind::kOpaque);
    }
    const std::string& f = callable.text;
    if (f == "collections.OrderedDict") {
      ValuePtr dict = Container(Value::Kind::kDict);
      // OrderedDict([(k, v), ...]); torch.save itself passes no arguments.
      if (!args.items.empty() && args.items[0]->kind == Value::Kind::kList) {
        for (const ValuePtr& pair : args.items[0]->items) {
          if (pair->kind == Value::Kind::kTuple && pair->items.size() == 2) {
            dict->entries.emplace_back(pair->items[0], pair->items[1]);
          }
        }
      }
      return dict;
    }
    if (f == "torch._utils._rebuild_tensor_v2" || f == "torch._utils._rebuild_tensor") {
      return RebuildTensor(args.items);
    }
    if ((f == "torch._utils._rebuild_parameter" ||
         f == "torch._utils._rebuild_parameter_with_state") &&
        !args.items.empty() && args.items[0]->kind == Value::Kind::kTensor) {
      return args.items[0];  // an nn.Parameter's data; requires_grad does not matter here
    }
    return Make(Value::Kind::kOpaque);
  }

  // pid = ('storage', torch.<T>Storage, key, location, numel)
  absl::StatusOr<ValuePtr> LoadStorage(const Value& pid) {
    if (pid.kind != Value::Kind::kTuple || pid.items.size() < 5 ||
        pid.items[0]->kind != Value::Kind::kString || pid.items[0]->text != "storage" ||
        pid.items[1]->kind != Value::Kind::kGlobal || pid.items[2]->kind != Value::Kind::kString ||
        pid.items[4]->kind != Value::Kind::kInt) {
      return Error("persistent id is not ('storage', type, key, location, numel)");
    }
    const std::string& key = pid.items[2]->text;
    auto cached = storages_.find(key);
    if (cached != storages_.end()) return cached->second;

    ValuePtr value = Make(Value::Kind::kStorage);
    if (!StorageDtype(pid.items[1]->text, &value->storage.dtype)) {
      return Error(absl::StrCat("storage '", key, "' has unsupported type ", pid.items[1]->text));
    }
    const std::string record = "data/" + key;
    absl::StatusOr<std::pair<at::DataPtr, size_t>> found = records_(record);
    if (!found.ok()) {
      if (found.status().code() == absl::StatusCode::kNotFound) {
        return Error(absl::StrCat("archive has no record '", record, "'"));
      }
      return found.status();
    }
    auto& [bytes, nbytes] = *found;
    const size_t itemsize = c10::elementSize(value->storage.dtype);
    const int64_t numel = pid.items[4]->int_value;
    if (numel < 0 || nbytes != static_cast<uint64_t>(numel) * itemsize) {
      return Error(absl::StrCat("storage '", key, "' record holds ", nbytes, " bytes, but ",
                                numel, " elements of ", pid.items[1]->text, " need ",
                                static_cast<uint64_t>(numel) * itemsize));
    }
    value->storage.bytes = std::make_shared<at::DataPtr>(std::move(bytes));
    value->storage.nbytes = nbytes;
    storages_.emplace(key, value);
    return value;
  }

  static bool IntTuple(const Value& v, std::vector<int64_t>* out) {
    if (v.kind != Value::Kind::kTuple) return false;
    for (const ValuePtr& item : v.items) {
      if (item->kind != Value::Kind::kInt || item->int_value < 0) return false;
      out->push_back(item->int_value);
    }
    return true;
  }

  // _rebuild_tensor_v2(storage, storage_offset, size, stride, requires_grad,
  // backward_hooks[, metadata]): a strided view of the storage.
  absl::StatusOr<ValuePtr> RebuildTensor(const std::vector<ValuePtr>& args) {
    std::vector<int64_t> sizes, strides;
    if (args.size() < 4 || args[0]->kind != Value::Kind::kStorage ||
        args[1]->kind != Value::Kind::kInt || args[1]->int_value < 0 ||
        !IntTuple(*args[2], &sizes) || !IntTuple(*args[3], &strides) ||
        sizes.size() != strides.size()) {
      return Error("tensor is not (storage, offset, sizes, strides, ...) with non-negative ints");
    }
    const Storage& storage = args[0]->storage;
    const uint64_t storage_numel = storage.nbytes / c10::elementSize(storage.dtype);
    // The view's last element must lie inside the storage.
    uint64_t last = static_cast<uint64_t>(args[1]->int_value);
    bool empty = false;
    for (size_t d = 0; d < sizes.size(); ++d) {
      if (sizes[d] == 0) empty = true;
      uint64_t span;
      if (sizes[d] > 0 &&
          (__builtin_mul_overflow(static_cast<uint64_t>(sizes[d] - 1),
                                  static_cast<uint64_t>(strides[d]), &span) ||
           __builtin_add_overflow(last, span, &last))) {
        return Error("tensor view overflows 64 bits");
      }
    }
    if (!empty && last >= storage_numel) {
      return Error(absl::StrCat("tensor view reaches element ", last, " of a storage of ",
                                storage_numel));
    }
    const auto options = at::TensorOptions().dtype(storage.dtype);
    std::shared_ptr<at::DataPtr> keep = storage.bytes;
    at::Tensor flat = at::from_blob(storage.bytes->get(),
                                    {static_cast<int64_t>(storage_numel)},
                                    [keep](void*) {}, options);
    ValuePtr value = Make(Value::Kind::kTensor);
    value->tensor = flat.as_strided(sizes, strides, args[1]->int_value);
    return value;
  }

  const std::string path_;
  const CheckpointRecordReader& records_;
  const char* const data_;
  const size_t size_;
  size_t pos_ = 0;
  size_t op_start_ = 0;
  std::vector<ValuePtr> stack_;
  std::vector<size_t> marks_;  // stack sizes at each MARK
  std::unordered_map<uint64_t, ValuePtr> memo_;
  std::map<std::string, ValuePtr> storages_;
  std::vector<ValuePtr> containers_;  // every tuple, list and dict made
};

absl::Status CheckZipSignature(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) {
    return absl::ErrnoToStatus(errno, absl::StrCat("cannot open checkpoint '", path, "'"));
  }
  unsigned char head[sizeof(kLegacyMagic)] = {};
  const size_t n = std::fread(head, 1, sizeof(head), f);
  std::fclose(f);
  if (n >= 2 && head[0] == 'P' && head[1] == 'K') return absl::OkStatus();
  if (n == sizeof(kLegacyMagic) && std::memcmp(head, kLegacyMagic, n) == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "checkpoint '", path,
        "' uses the legacy torch.save format; re-save with "
        "torch.save(..., _use_new_zipfile_serialization=True)"));
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "checkpoint '", path,
      "' is not a PyTorch zip checkpoint (no \"PK\" zip signature); expected a file written by "
      "torch.save"));
}

// Dicts nested deeper than this are refused: real checkpoints nest a few
// levels (model, optimizer state), and a dict that contains itself (the memo
// lets a pickle build one) would otherwise recurse until the stack overflows.
constexpr int kMaxDictNesting = 64;

// Flattening visits a value once for every path to it, and the memo lets a
// pickle refer to one dict many times: 60 levels of dicts that each hold the
// previous level twice are a 1.3 KB data.pkl with 2^60 paths (seen while
// writing fuzz/torch_pickle_fuzzer.cc, which reports it as a timeout: the
// load never ended). Every visit is
// therefore paid from a budget of one per byte of data.pkl, plus the
// nesting limit (so that a short pickle whose dict contains itself is still
// reported as such). A checkpoint without shared dicts needs one visit per
// dict entry, and every entry takes several bytes; saving one dict twice
// ({"model": sd, "ema": sd}) doubles that and still fits.
struct FlattenBudget {
  int64_t visits_left;
};

// Collects the tensors of a (possibly nested) dict; keys of nested dicts are
// joined with ".". Integer keys (e.g. optimizer state) are spelled in decimal.
absl::Status Flatten(const std::string& path, const std::string& prefix, const Value& value,
                     TensorMap& out, FlattenBudget& budget, int depth = 0) {
  if (depth > kMaxDictNesting) {
    return absl::InvalidArgumentError(absl::StrCat(
        "checkpoint '", path, "' nests dicts more than ", kMaxDictNesting,
        " levels deep (or holds a dict that contains itself); a state_dict is a flat or "
        "shallow dict of tensors"));
  }
  if (--budget.visits_left < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "checkpoint '", path, "' refers to the same dicts so often that flattening it would "
        "visit more entries than data.pkl has bytes; a state_dict holds each dict once"));
  }
  if (value.kind == Value::Kind::kTensor) {
    if (!out.emplace(prefix, value.tensor).second) {
      return absl::InvalidArgumentError(absl::StrCat(
          "checkpoint '", path, "': two entries flatten to the same name '", prefix, "'"));
    }
    return absl::OkStatus();
  }
  if (value.kind != Value::Kind::kDict) return absl::OkStatus();  // other leaves: not weights
  for (const auto& [key, child] : value.entries) {
    std::string name;
    if (key->kind == Value::Kind::kString) {
      name = key->text;
    } else if (key->kind == Value::Kind::kInt) {
      name = std::to_string(key->int_value);
    } else {
      continue;  // keys of other types cannot name a weight
    }
    DIKKAT_RETURN_IF_ERROR(Flatten(path, prefix.empty() ? name : absl::StrCat(prefix, ".", name),
                                   *child, out, budget, depth + 1));
  }
  return absl::OkStatus();
}

// The unpickler and Flatten over one data.pkl (ParseTorchCheckpointPickle
// without the exception guard).
absl::StatusOr<TensorMap> ParsePickle(absl::string_view data_pkl, const std::string& path,
                                      const CheckpointRecordReader& records) {
  CheckpointUnpickler unpickler(path, records, data_pkl.data(), data_pkl.size());
  DIKKAT_ASSIGN_OR_RETURN(ValuePtr root, unpickler.Run());
  if (root->kind != Value::Kind::kDict) {
    return absl::InvalidArgumentError(absl::StrCat(
        "checkpoint '", path, "' does not hold a dict; save a state_dict, not a module"));
  }
  TensorMap tensors;
  FlattenBudget budget{static_cast<int64_t>(data_pkl.size()) + kMaxDictNesting + 1};
  DIKKAT_RETURN_IF_ERROR(Flatten(path, "", *root, tensors, budget));
  if (tensors.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("checkpoint '", path, "' holds a dict without any tensors"));
  }
  return tensors;
}

absl::StatusOr<TensorMap> ReadCheckpointArchive(const std::string& path) {
  caffe2::serialize::PyTorchStreamReader reader(path);
  if (reader.hasRecord("byteorder")) {
    auto [bytes, n] = reader.getRecord("byteorder");
    if (std::string(static_cast<const char*>(bytes.get()), n) != "little") {
      return absl::InvalidArgumentError(
          absl::StrCat("checkpoint '", path, "' stores big-endian tensors; only little is read"));
    }
  }
  if (!reader.hasRecord("data.pkl")) {
    return absl::InvalidArgumentError(absl::StrCat(
        "checkpoint '", path, "' has no data.pkl (a TorchScript archive is not a state_dict)"));
  }
  auto [pickle, pickle_size] = reader.getRecord("data.pkl");
  const CheckpointRecordReader records =
      [&reader](const std::string& name) -> absl::StatusOr<std::pair<at::DataPtr, size_t>> {
    if (!reader.hasRecord(name)) return absl::NotFoundError(name);
    auto [bytes, nbytes] = reader.getRecord(name);
    return std::make_pair(std::move(bytes), nbytes);
  };
  return ParsePickle(absl::string_view(static_cast<const char*>(pickle.get()), pickle_size),
                     path, records);
}

}  // namespace

absl::StatusOr<TensorMap> ParseTorchCheckpointPickle(absl::string_view data_pkl,
                                                     const std::string& name,
                                                     const CheckpointRecordReader& records) {
  try {
    return ParsePickle(data_pkl, name, records);
  } catch (const c10::Error& e) {
    return absl::InvalidArgumentError(absl::StrCat("checkpoint '", name, "' cannot be read: ",
                                                   e.what_without_backtrace()));
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat("checkpoint '", name, "' cannot be read: ", e.what()));
  }
}

absl::StatusOr<TensorMap> ReadTorchCheckpoint(const std::string& path) {
  DIKKAT_RETURN_IF_ERROR(CheckZipSignature(path));
  try {
    return ReadCheckpointArchive(path);
  } catch (const c10::Error& e) {
    return absl::InvalidArgumentError(absl::StrCat("checkpoint '", path, "' cannot be read: ",
                                                   e.what_without_backtrace()));
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat("checkpoint '", path, "' cannot be read: ", e.what()));
  }
}

}  // namespace dikkat::model
