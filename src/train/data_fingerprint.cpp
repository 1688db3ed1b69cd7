#include "normlab/train/data_fingerprint.hpp"

#include <fmt/format.h>

#include <filesystem>

#include "normlab/dist/communicator.hpp"
#include "normlab/error.hpp"
#include "normlab/io/atomic_file.hpp"
#include "normlab/io/json_strict.hpp"
#include "normlab/io/sha256.hpp"

namespace normlab::train {

namespace {

using nlohmann::json;

constexpr size_t kMaxDataRecordBytes = size_t{1} << 20;

bool is_sha256_hex(const json& value) {
  if (!value.is_string() || value.get<std::string>().size() != 64) return false;
  for (char c : value.get<std::string>())
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  return true;
}

// The first 12 hex digits: enough to tell two digests apart in a message.
std::string short_digest(const std::string& sha256) { return sha256.substr(0, 12) + "..."; }

}  // namespace

std::vector<std::pair<std::string, std::string>> data_file_paths(const RunConfig& config) {
  std::vector<std::pair<std::string, std::string>> paths;
  if (config.task.train_file) paths.emplace_back("task.train_file", *config.task.train_file);
  if (config.task.valid_file) paths.emplace_back("task.valid_file", *config.task.valid_file);
  return paths;
}

DataFile fingerprint_data_file(const std::string& key, const std::string& path, io::StopFlag stop) {
  const io::FileDigest digest = io::sha256_file(path, stop);
  return {key, path, digest.sha256, digest.bytes};
}

DataFingerprint fingerprint_data(const RunConfig& config, io::StopFlag stop) {
  DataFingerprint fingerprint;
  for (const auto& [key, path] : data_file_paths(config)) fingerprint.push_back(fingerprint_data_file(key, path, stop));
  return fingerprint;
}

nlohmann::ordered_json to_json(const DataFingerprint& fingerprint) {
  nlohmann::ordered_json out = nlohmann::ordered_json::object();
  for (const DataFile& file : fingerprint)
    out[file.key] = {{"path", file.path}, {"sha256", file.sha256}, {"bytes", file.bytes}};
  return out;
}

DataFingerprint fingerprint_from_json(const json& value, const std::string& where) {
  if (!value.is_object()) throw InputError(fmt::format("{}: must be a JSON object of data files", where));
  DataFingerprint fingerprint;
  for (const auto& [key, file] : value.items()) {
    if (key != "task.train_file" && key != "task.valid_file")
      throw InputError(fmt::format("{}: \"{}\" is not a data file key (task.train_file, task.valid_file)", where, key));
    if (!file.is_object() || !file.contains("path") || !file.at("path").is_string() || !file.contains("sha256") ||
        !is_sha256_hex(file.at("sha256")) || !file.contains("bytes") || !file.at("bytes").is_number_unsigned()) {
      throw InputError(
          fmt::format("{}: \"{}\" must be {{\"path\": string, \"sha256\": 64 lowercase hex digits, "
                      "\"bytes\": non-negative integer}}",
                      where, key));
    }
    fingerprint.push_back({key, file.at("path").get<std::string>(), file.at("sha256").get<std::string>(),
                           file.at("bytes").get<uint64_t>()});
  }
  return fingerprint;
}

std::string DataChange::describe() const {
  return fmt::format("{} ({}): its content changed (sha256 {} recorded, {} now)", path, key,
                     short_digest(recorded_sha256), short_digest(current_sha256));
}

std::vector<DataChange> changed_data(const DataFingerprint& recorded, const DataFingerprint& current) {
  std::vector<DataChange> changes;
  for (const DataFile& now : current) {
    for (const DataFile& then : recorded) {
      if (then.key == now.key && then.sha256 != now.sha256)
        changes.push_back({now.key, now.path, then.sha256, now.sha256});
    }
  }
  return changes;
}

std::string data_record_text(const DataRecord& record) {
  nlohmann::ordered_json out;
  out["files"] = to_json(record.files);
  out["accepted_changes"] = record.accepted_changes;
  return out.dump(2) + "\n";
}

std::optional<DataRecord> read_data_record(const std::string& run_dir) {
  const std::string path = (std::filesystem::path(run_dir) / "data.json").string();
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return std::nullopt;
  const json value = io::parse_strict(io::read_file(path, kMaxDataRecordBytes), path);
  if (!value.is_object() || !value.contains("files") || !value.contains("accepted_changes") ||
      !value.at("accepted_changes").is_array()) {
    throw InputError(fmt::format("{}: expected {{\"files\": {{...}}, \"accepted_changes\": [...]}}", path));
  }
  DataRecord record;
  record.files = fingerprint_from_json(value.at("files"), path + ": \"files\"");
  record.accepted_changes = value.at("accepted_changes");
  return record;
}

void record_accepted_changes(DataRecord& record, const std::vector<DataChange>& changes, int64_t step) {
  for (const DataChange& change : changes) {
    json entry = json::object();
    entry["step"] = step;
    entry["key"] = change.key;
    entry["path"] = change.path;
    entry["sha256_before"] = change.recorded_sha256;
    entry["sha256_after"] = change.current_sha256;
    record.accepted_changes.push_back(std::move(entry));
  }
}

std::string data_disagreement(dist::Communicator& comm, const DataFingerprint& files) {
  const std::vector<uint64_t> counts = comm.all_gather(files.size());
  for (size_t r = 1; r < counts.size(); ++r) {
    if (counts[r] != counts[0])
      return fmt::format(
          "data-parallel rank {} reads {} data file(s), rank 0 reads {}: every rank must run the same "
          "config",
          r, counts[r], counts[0]);
  }
  for (const DataFile& file : files) {
    // The first 64 bits of the digest: enough to tell two contents apart.
    const std::vector<uint64_t> digests = comm.all_gather(std::stoull(file.sha256.substr(0, 16), nullptr, 16));
    for (size_t r = 1; r < digests.size(); ++r) {
      if (digests[r] != digests[0]) {
        // Paths may differ between machines: rank 0's is the one its user can look at.
        return fmt::format(
            "data-parallel rank {}'s {} has other content than rank 0's {} (sha256 {:016x}... vs "
            "{:016x}...): every rank must read the same data",
            r, file.key, file.path, digests[r], digests[0]);
      }
    }
  }
  return "";
}

}  // namespace normlab::train
