#pragma once
// The content fingerprint of a run's data: the SHA-256 (io/sha256.hpp) and size of every data file
// its config names (task.train_file, task.valid_file; the training file also defines a data-defined
// task's vocabulary and labels, and mlm_text's characters). Recorded in the run directory's
// data.json and in every checkpoint's metadata 'data' (docs/run-directory.md), so that
//   - `train --resume` refuses a file whose content changed since the checkpoint (unless
//     --accept-changed-data, which data.json records),
//   - `compare` reuses a run only when its data are the ones the grid reads now,
//   - a user can check a file against the run with `sha256sum FILE`.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "normlab/io/stop.hpp"
#include "normlab/train/config.hpp"

namespace normlab::dist {
class Communicator;  // dist/communicator.hpp
}

namespace normlab::train {

struct DataFile {
  std::string key;     // the config key naming it: "task.train_file"
  std::string path;    // as the config gives it (resolved against the config's folder)
  std::string sha256;  // 64 hex digits, as sha256sum prints them
  uint64_t bytes = 0;
};
using DataFingerprint = std::vector<DataFile>;  // in config key order; empty for generated data

// The config's data file paths, by key, without reading them.
std::vector<std::pair<std::string, std::string>> data_file_paths(const RunConfig& config);
// Reads and hashes every data file the config names. InputError "<path>: cannot read: ..." if one
// cannot be read; a stop request throws io::StopRequested.
DataFingerprint fingerprint_data(const RunConfig& config, io::StopFlag stop = nullptr);
// One file of it.
DataFile fingerprint_data_file(const std::string& key, const std::string& path, io::StopFlag stop = nullptr);

// {"task.train_file": {"path": ..., "sha256": ..., "bytes": ...}, ...}
nlohmann::ordered_json to_json(const DataFingerprint& fingerprint);
// InputError "<where>: ..." if `value` is not such an object.
DataFingerprint fingerprint_from_json(const nlohmann::json& value, const std::string& where);

// A file whose content is not the recorded one.
struct DataChange {
  std::string key, path;
  std::string recorded_sha256, current_sha256;
  // "/abs/train.jsonl (task.train_file): its content changed (sha256 0123456789ab... recorded,
  // 89abcdef0123... now)"
  std::string describe() const;
};
// The files of `current` whose key is in `recorded` with another digest (a key only one of them has
// is a config change, which the config checks report).
std::vector<DataChange> changed_data(const DataFingerprint& recorded, const DataFingerprint& current);

// data.json of a run directory: the fingerprint of the data the run reads now and the changes a
// resume accepted (--accept-changed-data), oldest first.
struct DataRecord {
  DataFingerprint files;
  nlohmann::json accepted_changes =
      nlohmann::json::array();  // [{"step", "key", "path", "sha256_before", "sha256_after"}]
};
std::string data_record_text(const DataRecord& record);
// std::nullopt if DIR/data.json does not exist (a run written before fingerprints); InputError
// "<path>: ..." if it is malformed.
std::optional<DataRecord> read_data_record(const std::string& run_dir);
// Appends `changes` (accepted at checkpoint step `step`) to record.accepted_changes.
void record_accepted_changes(DataRecord& record, const std::vector<DataChange>& changes, int64_t step);

// data-parallel, before anything is written: do all ranks read the same data? Every rank passes the
// fingerprint of the files it read (the same number on every rank: one config); rank 0's digests
// decide. Returns "" when every rank agrees, else one line naming the first differing rank and
// file, the same line on every rank (it is computed from the gathered digests), so all stop together.
std::string data_disagreement(dist::Communicator& comm, const DataFingerprint& files);

}  // namespace normlab::train
