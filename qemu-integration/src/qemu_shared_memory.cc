// --memory shared: QEMU's RAM backend on the image the host image server exports (qemu_shared_memory.h).
#include "halite/qemu/qemu_shared_memory.h"

#include <fmt/format.h>

#include "halite/image_server_process.h"

namespace halite::qemu {

std::string ConflictingMemoryArgument(const std::vector<std::string>& qemu_args) {
  for (size_t i = 0; i < qemu_args.size(); ++i) {
    const std::string& a = qemu_args[i];
    if (a == "-mem-path" || a == "-mem-prealloc" || a == "-numa" || a.find("memory-backend") != std::string::npos) {
      return a;
    }
  }
  return "";
}

std::vector<std::string> DiscardingDeviceWarnings(const std::vector<std::string>& qemu_args) {
  std::vector<std::string> out;
  for (const std::string& a : qemu_args) {
    if (a.find("virtio-balloon") != std::string::npos) {
      out.push_back("virtio-balloon: its inflation and free-page reporting discard guest RAM by punching holes in "
                    "the image, which the image server refuses: the balloon frees no host memory in this clone "
                    "(QEMU logs \"Failed to fallocate\"), and the other clones are unaffected");
    } else if (a.find("virtio-mem") != std::string::npos) {
      out.push_back("virtio-mem: unplugging memory discards it by punching holes in the image, which the image "
                    "server refuses: unplug requests fail in this clone");
    }
  }
  return out;
}

Result<SharedMemoryPlan> PrepareSharedMemory(const std::string& server_program, const std::string& checkpoint_path,
                                             const CheckpointReader& reader, const std::string& image_dir,
                                             const std::vector<std::string>& parent_dirs,
                                             const std::vector<std::string>& reader_flags) {
  auto region = reader.FindRegion(kSharedRamRegion);
  if (!region) {
    std::string names;
    for (const auto& r : reader.regions()) names += (names.empty() ? "" : ", ") + r.name;
    return Status::InvalidArgument(reader.name() + ": no RAMBlock " + kSharedRamRegion +
                                   " to share (--memory shared maps a pc or q35 machine's RAM; this one has " + names +
                                   ")");
  }
  ImageServerRequest request;
  request.program = server_program;
  request.checkpoint = checkpoint_path;
  request.image_dir = image_dir;
  request.parent_dirs = parent_dirs;
  request.reader_flags = reader_flags;
  HLT_ASSIGN_OR_RETURN(const ImageServerHandle server, FindOrStartImageServer(request, reader));
  SharedMemoryPlan plan;
  plan.image_path = ServedImagePath(server.mount, kSharedRamRegion);
  plan.shared_regions = {kSharedRamRegion};
  plan.started_server = server.started;
  const uint64_t size = reader.regions()[*region].size;
  plan.qemu_args = {"-object",
                    fmt::format("memory-backend-file,id={},size={},mem-path={},share=off", kSharedRamRegion, size,
                                plan.image_path),
                    "-machine", std::string("memory-backend=") + kSharedRamRegion};
  if (plan.image_path.find(',') != std::string::npos) {
    return Status::InvalidArgument(plan.image_path + ": a QEMU option value may not contain ','");
  }
  return plan;
}

}  // namespace halite::qemu
