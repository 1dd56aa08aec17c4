#include "hlt-save/parent_image.h"

#include <cstdio>
#include <filesystem>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/cli.h"
#include "halite/hint_files.h"  // ReadTextFile

namespace halite::save {

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
    return f.value("checkpoint_file_id", "") == cli::HexBytes(parent.file_id()) &&
           f.value("checkpoint_index_fingerprint", "") == cli::HexBytes(parent.index_fingerprint()) &&
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

void PrintParentImage(const qemu::CheckpointSaveResult& r) {
  if (!r.parent_image.empty()) {
    std::printf("  parent's image   QEMU maps %s: %llu pages never written since (declared in the parent)\n",
                r.parent_image.c_str(), (unsigned long long)r.parent_image_unwritten_pages);
  } else if (!r.parent_image_note.empty()) {
    std::printf("  parent's image   not used: %s\n", r.parent_image_note.c_str());
  }
}

}  // namespace halite::save
