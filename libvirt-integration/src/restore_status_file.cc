#include "halite/libvirt/restore_status_file.h"

#include <unistd.h>

#include <cstdio>
#include <fstream>

#include <nlohmann/json.hpp>


namespace halite::libvirt {

void StatusFile::Write(const std::string& state, const std::string& detail) const {
  if (path_.empty()) return;
  nlohmann::ordered_json j = {{"state", state}, {"domain", domain_}, {"uuid", uuid_}, {"pid", int(getpid())}};
  if (!detail.empty()) j[state == "failed" ? "error" : "note"] = detail;
  const std::string tmp = path_ + ".tmp";
  FILE* f = std::fopen(tmp.c_str(), "w");
  if (f == nullptr) return;
  const std::string text = j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace) + "\n";
  const bool ok = std::fwrite(text.data(), 1, text.size(), f) == text.size() && fflush(f) == 0 && fsync(fileno(f)) == 0;
  if (std::fclose(f) == 0 && ok) std::rename(tmp.c_str(), path_.c_str());
}

StatusFile::Contents StatusFile::Read(const std::string& path) {
  Contents c;
  std::ifstream f(path);
  const nlohmann::json j = nlohmann::json::parse(f, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return c;
  c.state = j.value("state", "");
  c.domain = j.value("domain", "");
  c.uuid = j.value("uuid", "");
  return c;
}

std::string DefaultStatusPath(const std::string& checkpoint, const std::string& name) {
  return checkpoint + "." + (name.empty() ? "restore" : name) + ".status";
}

}  // namespace halite::libvirt
