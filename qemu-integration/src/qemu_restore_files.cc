// The files of a restore into QEMU (moved here from tools/hlt-restore/restore_qemu.cc, unchanged: the files stay
// byte for byte).
#include "halite/qemu/qemu_restore_files.h"

#include <cerrno>
#include <chrono>
#include <cstdio>

#include <fmt/format.h>

#include "halite/hint_files.h"
#include "halite/qemu/qemu_restore_report.h"

namespace halite::qemu {
namespace {

Status WriteTextFile(const std::string& path, const std::string& text) {
  FILE* f = std::fopen(path.c_str(), "w");
  bool ok = f && std::fwrite(text.data(), 1, text.size(), f) == text.size();
  ok = f && std::fclose(f) == 0 && ok;
  return ok ? Status::Ok() : Status::IoError(path + ": cannot write", errno);
}

}  // namespace

int64_t WallClockUs() {
  return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

void AddRestoreProgress(CheckpointRestoreOptions* restore, decltype(CheckpointRestoreOptions::on_progress) fn,
                        int interval_ms) {
  auto before = std::move(restore->on_progress);
  restore->on_progress = [before, fn](const RestoreEngineStats& e, const PushRestoreStats& c) {
    if (before) before(e, c);
    fn(e, c);
  };
  if (restore->progress_interval_ms == 0 || restore->progress_interval_ms > interval_ms) {
    restore->progress_interval_ms = interval_ms;
  }
}

RestoreFiles::RestoreFiles(RestoreFilePaths paths)
    : paths_(std::move(paths)), progress_csv_(std::make_shared<std::string>()) {}

void RestoreFiles::Prepare(CheckpointRestoreOptions* restore) {
  restore->engine.record_timeline = !paths_.timeline.empty();
  if (paths_.progress_log.empty()) return;
  *progress_csv_ = "wall_us,faults_blocking,faults_zero,blocks_read,bytes_read,requests,pages_sent,stall_us\n";
  AddRestoreProgress(
      restore,
      [csv = progress_csv_](const RestoreEngineStats& e, const PushRestoreStats& c) {
        *csv += fmt::format("{},{},{},{},{},{},{},{}\n", WallClockUs(), e.faults_blocking, e.faults_zero,
                            e.blocks_read, e.bytes_read, c.requests,
                            c.preload_pages + c.request_pages + c.pushed_pages, e.stall_ns / 1000);
      },
      10);
}

Status RestoreFiles::Write(RestoreSession& session, const std::string& checkpoint,
                           int64_t caller_start_wall_us) const {
  const CheckpointRestoreResult& res = session.result();
  Status s = Status::Ok();
  if (!paths_.access_trace.empty()) {
    s = WriteTextFile(paths_.access_trace, FormatAccessTrace(res.requested, session.reader().regions()));
  }
  if (s.ok() && !paths_.progress_log.empty()) s = WriteTextFile(paths_.progress_log, *progress_csv_);
  if (s.ok() && !paths_.timeline.empty()) s = WriteTextFile(paths_.timeline, res.timeline_csv);
  if (s.ok() && !paths_.stats_json.empty()) {
    s = WriteTextFile(paths_.stats_json, RestoreSessionStatsJson(session, checkpoint, caller_start_wall_us));
  }
  return s;
}

}  // namespace halite::qemu
