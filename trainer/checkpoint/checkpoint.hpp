// Training checkpoints, written by any parallel layout and loadable into any
// other layout of the same model (saved at dp=2 x tp=2, resumed at fsdp=4).
//
// What is saved is described layout-free: every tensor is a global
// (unsharded, HF-named) tensor of at most 2 dimensions, and each rank hands
// over rectangular pieces of those tensors (TensorPiece). Each rank writes
// only the pieces it owns; a loader reads only the files whose pieces
// intersect the boxes it wants.
//
// On disk (format version 2), <root>/step_<8 digits>/ holds
//   rank_<5 digits>.safetensors   one per rank that owned a piece; entry
//                                 "<tensor>@<row0>,<rows>,<col0>,<cols>"
//                                 is that box of the tensor's 2-D view
//   manifest.json                 step, data position, seed, optimizer step,
//                                 layout, model signature, config; size and
//                                 CRC32C of every file; and the index:
//                                 tensor -> global shape and its pieces
//                                 {file, entry, box}
// Version 1 (one tensors.safetensors of whole tensors) still loads.
//
// Commit protocol (save_checkpoint is collective):
//   1. rank 0 creates the staging dir <root>/.step_<N>.tmp.<pid of rank 0>/
//   2. every rank writes its shard there atomically (tmp name, fsync,
//      rename) and a sidecar listing its pieces, size and checksum
//   3. rank 0 checks that the pieces of every tensor cover it exactly once,
//      writes manifest.json atomically, renames the staging dir to step_<N>
//      and fsyncs <root>; only then are checkpoints beyond `keep` pruned.
// After each step the ranks agree (an all-reduce) on whether any failed, so
// a failure on one rank becomes an error on every rank, never a hang. A
// directory without a manifest is never a checkpoint.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "trainer/io/progress.hpp"

namespace gt {

class Communicator;

// A whole tensor (host fp32, numel(shape) elements).
struct NamedTensor {
  std::string name;
  std::vector<int64_t> shape;
  float* data = nullptr;
  bool vocab_rows = false;  // as TensorPiece::vocab_rows
};

// A rectangle of a global tensor viewed as 2-D: a tensor of shape (R, C) is
// itself; a 1-D tensor of N elements is viewed as (N, 1). Global tensors are
// at most 2-D.
struct TensorBox {
  int64_t row0 = 0, rows = 0, col0 = 0, cols = 0;
};
bool operator==(const TensorBox& a, const TensorBox& b);

struct TensorPiece {
  std::string name;                   // "param.h.0.attn.c_attn.weight", "adam_m.wte.weight", ...
  std::vector<int64_t> global_shape;  // shape of the whole tensor
  TensorBox box;
  float* data = nullptr;              // rows*cols floats, the box's contents row-major
                                      // (source when saving, destination when loading)
  // The rows are the vocabulary's. Checkpoints hold its vocab_size real
  // rows; those written before 2026-12-06 also hold the zero padding rows
  // after them (then 128-row padding), which loading skips.
  bool vocab_rows = false;
};

struct CheckpointMeta {
  int64_t step = 0;             // optimizer steps completed
  int64_t sample_position = 0;  // global rows consumed by the train loader
  uint64_t seed = 0;
  std::string model_signature;  // gt::model_signature(cfg.model)
  std::string config_yaml;      // resolved config, for the record
  int64_t optimizer_step = 0;   // AdamW's t (skipped steps do not count), restored on resume;
                                // a version-1 checkpoint reads as optimizer_step = step
  std::string layout;           // "dp=2 x fsdp=1 x tp=2 (4 ranks)", informational
};

// The (rows, cols) view of a global shape: [R, C] -> (R, C), [N] -> (N, 1).
// Throws for more than 2 dimensions or none.
TensorBox whole_box(const std::vector<int64_t>& global_shape);

// One piece per tensor covering all of it.
std::vector<TensorPiece> whole_tensor_pieces(const std::vector<NamedTensor>& tensors);

// Collective over `world` (every rank calls it, same meta). Each rank passes
// the pieces it owns; together they must cover every tensor exactly once
// (data-parallel replicas pass their copy on one rank only). Empty boxes
// are ignored. Returns the committed directory on every rank, or throws
// gt::Error on every rank (the failing rank's own message there, "rank R
// failed ..." elsewhere) with nothing committed.
// on_phase (optional, for fault-injection tests) is called with "shard" on
// every rank once its shard is in the staging directory (before its sidecar),
// and with "manifest" on rank 0 once manifest.json is written there (before
// the rename that commits it).
std::string save_checkpoint(const std::string& root, const CheckpointMeta& meta,
                            const std::vector<TensorPiece>& my_pieces, int keep,
                            Communicator& world,
                            const std::function<void(const char* phase)>& on_phase = {},
                            const ByteProgress& on_bytes = {});

// Not collective: any process (a training rank, `trainer export`) fills
// `wanted` from the checkpoint. Checks the model signature first (listing
// every differing field), then the size and checksum of only the files whose
// pieces intersect the wanted boxes, and reads only those. Every element of
// every wanted box must be in the checkpoint, else an error naming the
// tensor and the uncovered rectangle; a global shape differing from the
// saved one is an error naming the tensor and both shapes.
// on_bytes hears the bytes read of the total as the copies go.
CheckpointMeta load_checkpoint(const std::string& dir, const std::string& expected_signature,
                               const std::vector<TensorPiece>& wanted,
                               const ByteProgress& on_bytes = {});

// The newest committed checkpoint under root ("" when there is none).
// Uncommitted or corrupt directories are reported through `skipped`
// ("<dir>: <reason>") and ignored. Checks sizes, not checksums.
std::string find_latest_checkpoint(const std::string& root, std::vector<std::string>* skipped);

}  // namespace gt
