// The shape of one forward over a batch of sequences of different lengths at
// different positions: each sequence's chunk (its new tokens, where they
// start, its KV block table, its cross-attention cache) and the index tensors
// every layer of the forward shares (BatchIndex).
//
// Used by the Transformer (model/transformer.h), which builds the index once
// per forward, and by the attention over a batch (model/attention.h), which
// reads it in every layer. Value types; nothing here owns model weights.
#ifndef DIKKAT_MODEL_FORWARD_BATCH_H_
#define DIKKAT_MODEL_FORWARD_BATCH_H_

#include <cstdint>
#include <vector>

#include <ATen/core/Tensor.h>

#include "absl/types/span.h"

namespace dikkat::model {

// Encoder-decoder: the cross-attention keys/values of one request, computed
// once from the encoder output and reused at every decode step.
struct CrossAttentionCache {
  std::vector<at::Tensor> keys;    // per decoder layer [Hkv, S, D]
  std::vector<at::Tensor> values;  // per decoder layer [Hkv, S, D]
  int64_t source_len = 0;
};

// One sequence's share of a forward: `tokens` at positions
// [start_pos, start_pos + tokens.size()).
struct SequenceChunk {
  absl::Span<const int32_t> tokens;
  int64_t start_pos = 0;
  // Decoder with cache: the sequence's block table, covering at least
  // start_pos + tokens.size() tokens; K/V of the new tokens are written into
  // it and attention reads positions [0, start_pos + n). Null: no cache, the
  // chunk attends only to itself (start_pos must be 0).
  const std::vector<int32_t>* block_table = nullptr;
  const CrossAttentionCache* cross = nullptr;  // encoder-decoder decoder only
  absl::Span<const int32_t> type_ids;          // encoder token types (BERT); empty = all 0
  // With ForwardOptions::last_logits: this chunk returns the logits of every
  // token, not only of its last (prompt log-probabilities).
  bool all_logits = false;
};

// Chunks of up to this many tokens that continue a cached context run their
// attention in the paged decode kernel, one row per token (no context gather).
inline constexpr int64_t kPagedChunkRows = 32;

// Per-forward index tensors, shared by every layer of the stack. The batch's
// tokens are packed row after row ([N, d], no padding).
struct BatchIndex {
  std::vector<int64_t> offsets;  // chunk i occupies rows [offsets[i], offsets[i] + lens[i])
  std::vector<int64_t> lens;
  at::Tensor positions;    // [N] long
  at::Tensor write_slots;  // [N] long: where each new token's K/V go (cache only)
  std::vector<int64_t> write_slot_list;  // the same on the host
  // Per chunk [start + n] long: the cache slots of every position it attends
  // to (cache, start > 0, and not a paged decode token); undefined otherwise.
  std::vector<at::Tensor> context_slots;
  // Chunks of up to this many rows over a cached context go through the paged kernel too.
  bool paged_decode = false;  // decode tokens (n == 1, start > 0) use PagedDecodeAttention
  int64_t total = 0;
};

// The index of `chunks`. block_size > 0: the chunks use the KV cache (each
// has a block table); 0: no cache. paged_decode: decode tokens will go
// through the paged kernel, which reads block tables itself (no slot list).
BatchIndex MakeBatchIndex(const std::vector<SequenceChunk>& chunks, int32_t block_size,
                          bool paged_decode, c10::Device device);

// A long [n] tensor on `device`.
at::Tensor LongTensor(const std::vector<int64_t>& values, c10::Device device);

}  // namespace dikkat::model

#endif  // DIKKAT_MODEL_FORWARD_BATCH_H_
