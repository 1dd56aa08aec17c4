#include "hlt-save/parent_image.h"

#include <filesystem>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "halite/hint_files.h"  // ReadTextFile

namespace halite::save {
namespace {

template <size_t N>
std::string LowerHex(const std::array<uint8_t, N>& bytes) {
  std::string s;
  for (uint8_t b : bytes) s += fmt::format("{:02x}", b);
  return s;
}

}  // namespace

Result<bool> IsImageOfParent(const CheckpointReader& parent, const std::string& mapped_file, const std::string& region) {
  const std::filesystem::path file(mapped_file);
  const std::string stats_path = (file.parent_path() / ".stats").string();
  std::error_code ec;
  if (!std::filesystem::exists(stats_path, ec)) return false;  // not an image server's file
  HLT_ASSIGN_OR_RETURN(std::string text, ReadTextFile(stats_path));
  const nlohmann::json stats = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (stats.is_discarded() || !stats.contains("files") || !stats["files"].is_array()) {
    return Status::Corrupt(stats_path + ": expected the image server's statistics (a JSON object with \"files\")");
  }
  for (const auto& f : stats["files"]) {
    if (!f.is_object() || f.value("name", "") != file.filename().string()) continue;
    return f.value("checkpoint_file_id", "") == LowerHex(parent.file_id()) &&
           f.value("checkpoint_index_fingerprint", "") == LowerHex(parent.index_fingerprint()) &&
           f.value("region", "") == region;
  }
  return false;
}

}  // namespace halite::save
