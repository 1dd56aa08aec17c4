// ExportCheckpointToPath (halite/xen/xen_checkpoint.h): where `hlt-restore xen -o OUT` writes the stream.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>

#include "halite/storage.h"
#include "halite/xen/xen_checkpoint.h"

namespace halite::xen {

bool StreamsToPath(const std::string& out) {
  struct stat st;
  return out == "-" || (::stat(out.c_str(), &st) == 0 && !S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode));
}

Status ExportCheckpointToPath(const CheckpointReader& reader, const std::string& out, bool sync,
                              const ExportOptions& options, ExportStats* stats) {
  const bool to_stdout = out == "-";
  if (!StreamsToPath(out)) {
    FileSinkOptions fo;
    fo.sync = sync;
    HLT_ASSIGN_OR_RETURN(auto file, CreateAtomicFileSink(out, fo));
    AppendSinkByteSink sink(std::move(file));
    HLT_RETURN_IF_ERROR(ExportCheckpointToStream(reader, sink, options, stats));
    return sink.Commit();
  }
  // A reader that goes away (xl restore failing, `| head`) must surface as an I/O error, not kill us silently.
  std::signal(SIGPIPE, SIG_IGN);
  const int fd = to_stdout ? STDOUT_FILENO : ::open(out.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return Status::IoError(out + ": cannot open for writing", errno);
  FdSink sink(fd, FdSinkOptions{to_stdout ? "stdout" : out});
  Status s = ExportCheckpointToStream(reader, sink, options, stats);
  if (s.ok()) s = sink.Flush();
  if (!to_stdout && ::close(fd) != 0 && s.ok()) s = Status::IoError(out + ": close failed", errno);
  if (s.ok()) return s;
  return s.WithContext(std::string("exporting to ") + (to_stdout ? "stdout" : out) + " (a partial stream was written)");
}

}  // namespace halite::xen
