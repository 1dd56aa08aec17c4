#include "hlt-save/va_report.h"

#include <cstdlib>

namespace halite::save {

void AddAccessWindowFlags(CLI::App& app, AccessWindowText* text) {
  app.add_option("--access-window", text->window);
  app.add_option("--access-interval", text->interval);
}

std::string ApplyAccessWindowFlags(const CLI::App& app, const AccessWindowText& t, qemu::AccessWindowOptions* window) {
  if (app.count("--access-window")) {
    char* end = nullptr;
    const double seconds = std::strtod(t.window.c_str(), &end);
    if (end == t.window.c_str() || *end != '\0' || !(seconds >= 0) || seconds > 3600) {
      return "--access-window: expected seconds from 0 to 3600, got \"" + t.window + "\"";
    }
    window->window_ms = int(seconds * 1000);
  }
  if (app.count("--access-interval")) {
    uint64_t ms = 0;
    if (!cli::ParseU64(t.interval, &ms) || ms < 1 || ms > 60000) {
      return "--access-interval: expected milliseconds from 1 to 60000, got \"" + t.interval + "\"";
    }
    window->interval_ms = int(ms);
  }
  return "";
}

}  // namespace halite::save
