// The checkpoint's metadata files: manifest.json (the commit record, format
// version 2; version 1 is still read) and the per-rank sidecars a save
// gathers into it. Parsing validates everything a loader later relies on
// (file names stay inside the directory, boxes lie inside their tensors,
// pieces name listed files); every error names the file it is about.
//
// manifest.json, version 2:
//   { "format_version": 2, "step": 10, "sample_position": 325,
//     "seed": "18446744073709551601",          (a string: exact for any uint64)
//     "optimizer_step": 9, "layout": "dp=2 x fsdp=1 x tp=2 (4 ranks)",
//     "model_signature": "...", "config_yaml": "...",
//     "files": [{"name": "rank_00000.safetensors", "bytes": 123,
//                "checksum": "crc32c:0123abcd"}, ...],
//     "tensors": {"param.wte.weight": {"shape": [256, 128], "pieces": [
//                   {"file": "rank_00000.safetensors",
//                    "entry": "param.wte.weight@0,128,0,128",
//                    "box": [0, 128, 0, 128]}, ...]}, ...} }
// Version 1 has no "tensors", "optimizer_step" or "layout": its one file
// tensors.safetensors holds whole tensors, and load_v1_index() reads the
// index from that file's header.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "trainer/checkpoint/checkpoint.hpp"

namespace gt::ckpt {

constexpr int kFormatVersion = 2;
constexpr const char* kManifestFile = "manifest.json";
constexpr const char* kV1TensorsFile = "tensors.safetensors";

struct FileRecord {
  std::string name;  // plain file name inside the checkpoint directory
  uint64_t bytes = 0;
  std::string checksum;  // "crc32c:xxxxxxxx"
};

struct PieceRecord {
  std::string file;   // one of the FileRecord names
  std::string entry;  // safetensors entry in that file
  TensorBox box;      // non-empty, inside the tensor's 2-D view
};

struct TensorRecord {
  std::vector<int64_t> shape;  // global shape, 1-D or 2-D
  std::vector<PieceRecord> pieces;
};

struct Manifest {
  int format_version = kFormatVersion;
  CheckpointMeta meta;
  std::vector<FileRecord> files;
  std::map<std::string, TensorRecord> tensors;  // empty for version 1 until load_v1_index
};

// One rank's contribution to a save: its file (none when it owned nothing)
// and its pieces.
struct Sidecar {
  int rank = 0;
  std::vector<FileRecord> files;  // 0 or 1
  std::map<std::string, TensorRecord> tensors;
};

// Reads and validates <dir>/manifest.json (version 1 or 2).
Manifest read_manifest(const std::string& dir);
// The version-2 manifest text.
std::string manifest_text(const Manifest& m);

std::string sidecar_text(const Sidecar& s);
Sidecar read_sidecar(const std::string& path);

// Version 1: fills m->tensors from the header of tensors.safetensors, one
// whole-tensor piece per entry. The file's size is checked first.
void load_v1_index(const std::string& dir, Manifest* m);

// Size only (cheap: discovery uses it), and size plus checksum (a full read).
void check_size(const std::string& dir, const FileRecord& r);
void check_checksum(const std::string& dir, const FileRecord& r);

// Throws listing every field of the "k=v,k=v" signatures that differs.
void check_signature(const std::string& dir, const std::string& saved,
                     const std::string& expected);

}  // namespace gt::ckpt
