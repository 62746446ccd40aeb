// Checkpoint save (the collective commit protocol), load (by box, reading
// only the files it needs) and discovery. The format and the protocol are
// described in checkpoint.hpp, the manifest in manifest.hpp.
//
// Layout:   <root>/step_00000010/{rank_00000.safetensors, ..., manifest.json}
// Staging:  <root>/.step_00000010.tmp.<pid>/   (renamed into place when done;
//           <pid> is rank 0's, so a crashed job's leftovers are recognised)
//           holding also rank_<r>.pieces.json, each rank's sidecar, which
//           rank 0 folds into the manifest and deletes before committing
// Replaced: <root>/.step_00000010.old.<pid>/   (a committed dir of the same
//           step moved aside, removed once the new one is in place)
#include "trainer/checkpoint/checkpoint.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <set>

#include <unistd.h>

#include "kernels/core/error.hpp"
#include "parallel/collective_error.hpp"
#include "parallel/communicator.hpp"
#include "trainer/checkpoint/box_tiling.hpp"
#include "trainer/checkpoint/manifest.hpp"
#include "trainer/io/atomic_file.hpp"
#include "trainer/io/process.hpp"
#include "trainer/io/safetensors.hpp"

namespace gt {

TensorBox whole_box(const std::vector<int64_t>& global_shape) {
  if (global_shape.empty() || global_shape.size() > 2)
    fail("checkpoint tensors are 1-D or 2-D; shape ", shape_str(global_shape), " is not");
  return TensorBox{0, global_shape[0], 0, global_shape.size() == 2 ? global_shape[1] : 1};
}

std::vector<TensorPiece> whole_tensor_pieces(const std::vector<NamedTensor>& tensors) {
  std::vector<TensorPiece> out;
  out.reserve(tensors.size());
  for (const NamedTensor& t : tensors)
    out.push_back({t.name, t.shape, whole_box(t.shape), t.data, t.vocab_rows});
  return out;
}

namespace {

namespace fs = std::filesystem;
using namespace ckpt;

std::string step_dir_name(int64_t step) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "step_%08lld", static_cast<long long>(step));
  return buf;
}

std::string rank_file_name(int rank, const char* suffix) {
  char buf[48];
  std::snprintf(buf, sizeof(buf), "rank_%05d%s", rank, suffix);
  return buf;
}

// "step_<digits>" -> step; -1 for anything else.
int64_t parse_step_name(const std::string& name) {
  if (name.size() <= 5 || name.compare(0, 5, "step_") != 0 || name.size() > 5 + 18) return -1;
  int64_t step = 0;
  for (size_t i = 5; i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9') return -1;
    step = step * 10 + (name[i] - '0');
  }
  return step;
}

// ".step_<digits>.(tmp|old).<pid>" -> pid; -1 for anything else.
long parse_staging_pid(const std::string& name) {
  if (name.compare(0, 6, ".step_") != 0) return -1;
  for (const char* tag : {".tmp.", ".old."}) {
    const size_t at = name.rfind(tag);
    if (at == std::string::npos || at < 6) continue;
    const std::string pid = name.substr(at + 5);
    if (pid.empty() || pid.size() > 9 || pid.find_first_not_of("0123456789") != std::string::npos)
      continue;
    return std::stol(pid);
  }
  return -1;
}

bool is_one_d(const std::vector<int64_t>& shape) { return shape.size() == 1; }

// The safetensors entry of a piece: its name and box, and its shape in the
// tensor's own rank ([rows, cols] for 2-D, [rows] for 1-D).
std::string entry_name(const std::string& tensor, const TensorBox& b) {
  return tensor + "@" + std::to_string(b.row0) + "," + std::to_string(b.rows) + "," +
         std::to_string(b.col0) + "," + std::to_string(b.cols);
}

std::vector<int64_t> entry_shape(const std::vector<int64_t>& global_shape, const TensorBox& b) {
  if (is_one_d(global_shape)) return {b.rows};
  return {b.rows, b.cols};
}

// Checks a piece handed to save or load: a 1-D/2-D tensor, its box inside
// it, data for a non-empty box. `what` is "save_checkpoint" or "load_checkpoint".
void validate_piece(const TensorPiece& p, const char* what) {
  if (p.name.empty()) fail(what, ": a piece has an empty tensor name");
  if (p.global_shape.empty() || p.global_shape.size() > 2 ||
      std::any_of(p.global_shape.begin(), p.global_shape.end(), [](int64_t d) { return d < 0; }))
    fail(what, ": tensor ", p.name, " has shape ", shape_str(p.global_shape),
         "; checkpoint tensors are 1-D or 2-D");
  const TensorBox whole = whole_box(p.global_shape);
  if (!box_inside(p.box, whole))
    fail(what, ": tensor ", p.name, " (shape ", shape_str(p.global_shape), "): box ",
         box_str(p.box, false), " is not inside it");
  if (!box_empty(p.box) && p.data == nullptr)
    fail(what, ": tensor ", p.name, " piece ", box_str(p.box, is_one_d(p.global_shape)),
         " has no data (null pointer)");
}

void remove_tree(const std::string& path) {
  std::error_code ec;
  fs::remove_all(path, ec);
  if (ec) fail("cannot remove ", path, ": ", ec.message());
}

// Committed checkpoint directories under root, newest first.
std::vector<std::pair<int64_t, std::string>> list_step_dirs(const std::string& root) {
  std::vector<std::pair<int64_t, std::string>> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(root, ec)) {
    const int64_t step = parse_step_name(e.path().filename().string());
    if (step >= 0 && e.is_directory(ec)) out.emplace_back(step, e.path().string());
  }
  if (ec) fail("cannot list checkpoint directory ", root, ": ", ec.message());
  std::sort(out.begin(), out.end(), [](const auto& x, const auto& y) { return x.first > y.first; });
  return out;
}

// Deletes committed checkpoints beyond the newest `keep` (never `just_saved`)
// and staging directories whose owning process is gone.
void prune(const std::string& root, int keep, const std::string& just_saved, long own_pid) {
  if (keep > 0) {
    int kept = 0;
    std::error_code ec;
    for (const auto& [step, dir] : list_step_dirs(root)) {
      // Only committed directories count and are deleted; anything else
      // (a hand-made step_* without a manifest) is left for a human.
      if (!fs::exists(dir + "/" + kManifestFile, ec)) continue;
      if (dir == just_saved || kept < keep) {
        ++kept;
        continue;
      }
      remove_tree(dir);
    }
  }
  // Staging dirs of dead processes (a crash mid-save). A live pid's staging
  // dir may be another trainer writing into the same root: left alone.
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(root, ec)) {
    const long pid = parse_staging_pid(e.path().filename().string());
    if (pid > 0 && pid != own_pid && !process_alive(pid)) {
      std::error_code rec;
      fs::remove_all(e.path(), rec);  // best effort: a stale dir is harmless
    }
  }
  fsync_dir(root);
}

// One step of the save protocol. Runs `work` on this rank, then every rank
// agrees (an all-reduce, which is also the barrier between steps) on whether
// any rank failed. If one did, `cleanup` runs (best effort, never throws) and
// every rank throws: the failing rank its own message, the others one naming
// the lowest failing rank. Every rank reaches every agreement point, so one
// rank's error never leaves the others waiting.
void run_step(Communicator& world, int64_t step, const char* doing,
              const std::function<void()>& work, const std::function<void()>& cleanup) {
  std::string error;
  try {
    work();
  } catch (const std::exception& e) {
    error = e.what();
    if (error.empty()) error = "unknown error";
  }
  const int first_failed = lowest_failing_rank(world, !error.empty());
  if (first_failed < 0) return;
  try {
    cleanup();
  } catch (...) {
  }
  if (!error.empty()) throw Error(error);
  fail("checkpoint step ", step, " was not saved: rank ", first_failed, " failed while ", doing,
       " (its error is in its own output)");
}

// Rank 0: fold every rank's sidecar into the manifest, checking that the
// pieces of each tensor cover it exactly once.
Manifest gather_manifest(const std::string& staging, const CheckpointMeta& meta, int world_size) {
  Manifest m;
  m.meta = meta;
  std::map<std::string, std::vector<int>> piece_ranks;  // tensor -> rank of each piece
  std::map<std::string, int> shape_from;                // tensor -> rank that declared it first
  for (int r = 0; r < world_size; ++r) {
    const std::string path = staging + "/" + rank_file_name(r, ".pieces.json");
    std::error_code ec;
    if (!fs::exists(path, ec))
      fail("checkpoint step ", meta.step, ": rank ", r, "'s sidecar ", path,
           " is missing although the rank reported success: is the checkpoint directory on a "
           "filesystem every rank sees?");
    Sidecar s = read_sidecar(path);
    if (s.rank != r) fail(path, ": says rank ", s.rank, ", expected ", r);
    for (const FileRecord& f : s.files) check_size(staging, f);  // visible, complete
    m.files.insert(m.files.end(), s.files.begin(), s.files.end());
    for (auto& [name, t] : s.tensors) {
      auto [it, added] = m.tensors.emplace(name, TensorRecord{t.shape, {}});
      if (added) {
        shape_from[name] = r;
      } else if (it->second.shape != t.shape) {
        fail("checkpoint step ", meta.step, ": tensor ", name, " has shape ",
             shape_str(it->second.shape), " on rank ", shape_from[name], " but ",
             shape_str(t.shape), " on rank ", r);
      }
      for (PieceRecord& p : t.pieces) {
        it->second.pieces.push_back(std::move(p));
        piece_ranks[name].push_back(r);
      }
    }
  }
  for (const auto& [name, t] : m.tensors) {
    std::vector<TensorBox> boxes;
    for (const PieceRecord& p : t.pieces) boxes.push_back(p.box);
    const auto problem = find_tiling_problem(whole_box(t.shape), boxes);
    if (!problem) continue;
    const bool one_d = is_one_d(t.shape);
    const std::string head = "checkpoint step " + std::to_string(meta.step) + ": tensor " + name +
                             " (shape " + shape_str(t.shape) + "): ";
    if (!problem->overlap)
      fail(head, box_str(problem->where, one_d),
           " is in no rank's pieces; the pieces must cover every tensor exactly once");
    const auto& ranks = piece_ranks[name];
    fail(head, box_str(problem->where, one_d), " is in more than one piece: rank ",
         ranks[problem->first], "'s ", box_str(t.pieces[problem->first].box, one_d), " and rank ",
         ranks[problem->second], "'s ", box_str(t.pieces[problem->second].box, one_d),
         "; each element must be saved by exactly one rank (data-parallel replicas save once)");
  }
  return m;
}

}  // namespace

std::string save_checkpoint(const std::string& root, const CheckpointMeta& meta,
                            const std::vector<TensorPiece>& my_pieces, int keep,
                            Communicator& world,
                            const std::function<void(const char* phase)>& on_phase,
                            const ByteProgress& on_bytes) {
  const int rank = world.rank(), size = world.size();
  // Every rank must write into the same step directory; a disagreement would
  // otherwise surface as a missing sidecar, far from its cause.
  const int64_t step_lo = world.all_reduce_i64(meta.step, ReduceOp::min);
  const int64_t step_hi = world.all_reduce_i64(meta.step, ReduceOp::max);
  if (step_lo != step_hi)
    fail("save_checkpoint: the ranks pass different steps (", step_lo, " to ", step_hi,
         "); every rank must pass the same meta");
  if (meta.step < 0) fail("save_checkpoint: negative step ", meta.step);
  // Rank 0's pid names the staging directory (a sum with zeros elsewhere is
  // a broadcast of one integer).
  const long pid0 = static_cast<long>(
      world.all_reduce_i64(rank == 0 ? static_cast<int64_t>(::getpid()) : 0, ReduceOp::sum));

  const std::string name = step_dir_name(meta.step);
  const std::string final_dir = root + "/" + name;
  const std::string staging = root + "/." + name + ".tmp." + std::to_string(pid0);
  const std::string old_dir = root + "/." + name + ".old." + std::to_string(pid0);
  auto remove_staging = [&] {
    if (rank != 0) return;
    std::error_code ec;
    fs::remove_all(staging, ec);
  };

  // 1. Rank 0 creates the staging directory (and root, the first time).
  run_step(world, meta.step, "creating the staging directory", [&] {
    if (rank != 0) return;
    std::error_code ec;
    if (!fs::exists(root, ec)) {
      fs::create_directories(root, ec);
      if (ec) fail("cannot create checkpoint directory ", root, ": ", ec.message());
      fsync_dir(parent_dir(fs::absolute(root).lexically_normal().string()));
    }
    remove_tree(staging);  // leftover of an earlier failed attempt of this job
    if (!fs::create_directory(staging, ec))
      fail("cannot create ", staging, ": ", ec ? ec.message() : "already exists");
  }, remove_staging);

  // 2. Every rank writes its shard (if it owns anything) and its sidecar,
  //    each atomically (tmp name, fsync, rename, fsync dir).
  run_step(world, meta.step, "writing its shard", [&] {
    for (const TensorPiece& p : my_pieces) validate_piece(p, "save_checkpoint");
    Sidecar sidecar;
    sidecar.rank = rank;
    const std::string file = rank_file_name(rank, ".safetensors");
    SafetensorsWriter writer;
    for (const TensorPiece& p : my_pieces) {
      if (box_empty(p.box)) continue;
      const std::string entry = entry_name(p.name, p.box);
      writer.add_f32_view(entry, entry_shape(p.global_shape, p.box), p.data);
      TensorRecord& t = sidecar.tensors[p.name];
      t.shape = p.global_shape;
      t.pieces.push_back(PieceRecord{file, entry, p.box});
    }
    // A rank with pieces of a tensor only of empty boxes still declares its shape.
    for (const TensorPiece& p : my_pieces) {
      auto [it, added] = sidecar.tensors.emplace(p.name, TensorRecord{p.global_shape, {}});
      if (!added && it->second.shape != p.global_shape)
        fail("save_checkpoint: tensor ", p.name, " is passed with shapes ",
             shape_str(it->second.shape), " and ", shape_str(p.global_shape));
    }
    const bool owns_data = std::any_of(my_pieces.begin(), my_pieces.end(),
                                       [](const TensorPiece& p) { return !box_empty(p.box); });
    if (owns_data) {
      writer.set_metadata("format", "gt-checkpoint");
      writer.set_metadata("step", std::to_string(meta.step));
      writer.set_metadata("rank", std::to_string(rank));
      const WrittenFile w = writer.write_atomic(staging + "/" + file, on_bytes);
      sidecar.files.push_back(FileRecord{file, w.bytes, format_crc32c(w.crc32c)});
    }
    if (on_phase) on_phase("shard");
    write_file_atomic(staging + "/" + rank_file_name(rank, ".pieces.json"),
                      sidecar_text(sidecar));
  }, remove_staging);

  // 3. Rank 0 validates the pieces, writes the manifest and commits; only
  //    then are old checkpoints pruned.
  run_step(world, meta.step, "committing", [&] {
    if (rank != 0) return;
    const Manifest m = gather_manifest(staging, meta, size);
    for (int r = 0; r < size; ++r) remove_tree(staging + "/" + rank_file_name(r, ".pieces.json"));
    write_file_atomic(staging + "/" + kManifestFile, manifest_text(m));  // fsyncs staging
    if (on_phase) on_phase("manifest");

    // A committed dir of the same step is moved aside first (rename cannot
    // replace a non-empty directory), and removed only once the new one is
    // in place; if the second rename fails the old one goes back.
    std::error_code ec;
    const bool replacing = fs::exists(final_dir, ec);
    if (replacing) {
      remove_tree(old_dir);
      if (::rename(final_dir.c_str(), old_dir.c_str()) != 0)
        fail("cannot move old checkpoint ", final_dir, " aside: ", std::strerror(errno));
    }
    if (::rename(staging.c_str(), final_dir.c_str()) != 0) {
      const std::string why = std::strerror(errno);
      if (replacing) ::rename(old_dir.c_str(), final_dir.c_str());
      fail("cannot rename ", staging, " to ", final_dir, ": ", why);
    }
    fsync_dir(root);
    try {
      if (replacing) remove_tree(old_dir);
      prune(root, keep, final_dir, pid0);
    } catch (const Error& e) {
      fail("checkpoint ", final_dir, " was committed, but removing old checkpoints failed: ",
           e.what());
    }
  }, remove_staging);
  return final_dir;
}

CheckpointMeta load_checkpoint(const std::string& dir, const std::string& expected_signature,
                               const std::vector<TensorPiece>& wanted,
                               const ByteProgress& on_bytes) {
  Manifest m = read_manifest(dir);
  // Signature before checksums: a wrong model is reported without reading 500 MB.
  check_signature(dir, m.meta.model_signature, expected_signature);
  if (m.format_version == 1) load_v1_index(dir, &m);

  // Plan every copy (saved piece x wanted box) before touching any tensor file.
  struct Copy {
    const TensorPiece* want;
    const TensorRecord* tensor;
    const PieceRecord* src;
    TensorBox part;  // in global coordinates
  };
  std::vector<Copy> copies;
  std::set<std::string> needed;
  for (const TensorPiece& w : wanted) {
    validate_piece(w, "load_checkpoint");
    const auto it = m.tensors.find(w.name);
    if (it == m.tensors.end()) {
      std::string some;
      size_t shown = 0;
      for (const auto& kv : m.tensors) {
        if (shown == 5) {
          some += ", ...";
          break;
        }
        some += (shown++ ? ", " : "") + kv.first;
      }
      fail("tensor ", w.name, " not found in checkpoint ", dir, " (it has ", m.tensors.size(),
           " tensors: ", some.empty() ? "none" : some, ")");
    }
    const TensorRecord& t = it->second;
    const bool old_padding = w.vocab_rows && t.shape.size() == 2 && w.global_shape.size() == 2 &&
                             t.shape[1] == w.global_shape[1] && t.shape[0] > w.global_shape[0];
    if (t.shape != w.global_shape && !old_padding)
      fail("tensor ", w.name, " in checkpoint ", dir, ": expected shape ",
           shape_str(w.global_shape), ", got ", shape_str(t.shape));
    if (box_empty(w.box)) continue;
    std::vector<TensorBox> parts;
    for (const PieceRecord& p : t.pieces) {
      const TensorBox part = box_intersect(p.box, w.box);
      if (box_empty(part)) continue;
      copies.push_back(Copy{&w, &t, &p, part});
      parts.push_back(part);
      needed.insert(p.file);
    }
    const auto problem = find_tiling_problem(w.box, parts);
    if (!problem) continue;
    const bool one_d = is_one_d(t.shape);
    if (!problem->overlap)
      fail("tensor ", w.name, " (shape ", shape_str(t.shape), "): ",
           box_str(problem->where, one_d), " of the wanted ", box_str(w.box, one_d),
           " is not in checkpoint ", dir);
    fail(dir, "/", kManifestFile, " is corrupt: tensor ", w.name, ": ",
         box_str(problem->where, one_d), " is in two pieces (", t.pieces.size(),
         " pieces in all)");
  }

  // Only the files the copies need: their size and checksum, then the data.
  for (const FileRecord& f : m.files)
    if (needed.count(f.name)) check_checksum(dir, f);
  std::map<std::string, std::unique_ptr<SafetensorsReader>> readers;
  uint64_t total_bytes = 0, read_bytes = 0;
  for (const Copy& c : copies) total_bytes += uint64_t(c.part.rows * c.part.cols) * sizeof(float);
  for (const Copy& c : copies) {
    auto& reader = readers[c.src->file];
    if (!reader) reader = std::make_unique<SafetensorsReader>(dir + "/" + c.src->file);
    const SafetensorInfo& info = reader->info(c.src->entry);
    const std::vector<int64_t> want_shape = entry_shape(c.tensor->shape, c.src->box);
    if (info.shape != want_shape)
      fail("tensor ", c.want->name, ": entry ", c.src->entry, " in ", reader->path(),
           " has shape ", shape_str(info.shape), ", the manifest's box needs ",
           shape_str(want_shape));
    const TensorBox& w = c.want->box;
    float* dst = c.want->data + (c.part.row0 - w.row0) * w.cols + (c.part.col0 - w.col0);
    reader->read_f32_box(c.src->entry, c.part.row0 - c.src->box.row0, c.part.rows,
                         c.part.col0 - c.src->box.col0, c.part.cols, dst, w.cols);
    read_bytes += uint64_t(c.part.rows * c.part.cols) * sizeof(float);
    if (on_bytes) on_bytes(read_bytes, total_bytes);
  }
  return m.meta;
}

std::string find_latest_checkpoint(const std::string& root, std::vector<std::string>* skipped) {
  std::error_code ec;
  if (!fs::is_directory(root, ec)) return "";
  // Staging directories of saves that never committed (a kill mid-save):
  // never candidates, but said, so a resume explains why it went back further.
  if (skipped) {
    std::vector<std::string> staging;
    for (const auto& e : fs::directory_iterator(root, ec)) {
      const std::string name = e.path().filename().string();
      if (parse_staging_pid(name) >= 0 && name.find(".tmp.") != std::string::npos)
        staging.push_back(e.path().string());
    }
    std::sort(staging.begin(), staging.end());
    for (const auto& dir : staging)
      skipped->push_back(dir + ": uncommitted (a save that did not finish: its manifest was "
                               "never renamed into place); removed by the next save");
  }
  for (const auto& [step, dir] : list_step_dirs(root)) {
    try {
      const Manifest m = read_manifest(dir);
      if (m.meta.step != step)
        fail(dir, "/", kManifestFile, " says step ", m.meta.step, ", the directory name says ",
             step);
      for (const FileRecord& f : m.files) check_size(dir, f);
      return dir;
    } catch (const Error& e) {
      if (skipped) skipped->push_back(dir + ": " + e.what());
    }
  }
  return "";
}

}  // namespace gt
