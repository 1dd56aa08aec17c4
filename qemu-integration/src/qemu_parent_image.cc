// IsImageOfParent and ParentImageCheck (moved here from tools/hlt-save/parent_image.cc, unchanged).
#include "halite/qemu/qemu_parent_image.h"

#include <filesystem>

#include <nlohmann/json.hpp>

#include "halite/hint_files.h"  // ReadTextFile
#include "halite/stats_text.h"  // HexBytes

namespace halite::qemu {

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
    return f.value("checkpoint_file_id", "") == HexBytes(parent.file_id()) &&
           f.value("checkpoint_index_fingerprint", "") == HexBytes(parent.index_fingerprint()) &&
           f.value("region", "") == region;
  }
  return false;
}

std::function<Result<bool>(const std::string&, const std::string&)> ParentImageCheck(
    std::shared_ptr<const CheckpointReader> parent) {
  return [parent = std::move(parent)](const std::string& file, const std::string& region) {
    return IsImageOfParent(*parent, file, region);
  };
}

}  // namespace halite::qemu
