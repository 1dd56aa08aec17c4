// Storage interfaces: where checkpoint bytes are read from and written to.
//
// Reading is positional (a checkpoint is read lazily, block by block); writing is append-only (payloads, then
// the index, then the footer). The same interfaces serve local files (pread or io_uring), memory (tests and
// fuzzers), fault injection, and a remote object store doing ranged GETs.
#ifndef HALITE_STORAGE_H_
#define HALITE_STORAGE_H_

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "halite/export.h"
#include "halite/status.h"

namespace halite {

struct HALITE_EXPORT ReadRequest {
  uint64_t offset = 0;
  std::span<uint8_t> buffer;  // filled completely on success
  Status status;              // set by ReadBatch
};

// How a file is best read, as its backend knows it (RandomAccessFile::hints()).
struct HALITE_EXPORT ReadHints {
  // Bytes worth asking for in one ReadBatch: every request pays a round trip on an object store, so a reader
  // streaming many blocks gathers this many bytes of neighbouring ones into a batch, which the backend sends as
  // a few large requests, several in flight. 0: one read at a time is as good (a local file).
  uint64_t batch_bytes = 0;
  // The bytes come over a network from storage shared with other hosts (an object store): worth keeping in a
  // host block cache (halite/block_cache.h). False for local files and memory.
  bool remote = false;
};

// What a file's backend sent to storage so far (RandomAccessFile::counters()). Only grows.
struct HALITE_EXPORT ReadCounters {
  uint64_t requests = 0;  // read requests that reached storage (ranged GETs, RADOS reads, preads), retries included
  uint64_t bytes = 0;     // bytes those requests transferred
};

// A file that can be read at any offset. Implementations are thread-safe: ReadAt and ReadBatch may be called
// from several threads at once.
class HALITE_EXPORT RandomAccessFile {
 public:
  virtual ~RandomAccessFile() = default;
  virtual const std::string& name() const = 0;
  virtual uint64_t size() const = 0;
  // Reads exactly buffer.size() bytes at `offset`. Errors: kIoError (retryable when transient, e.g. EIO or a
  // short read), kInvalidArgument when the range is outside the file.
  virtual Status ReadAt(uint64_t offset, std::span<uint8_t> buffer) = 0;
  // Reads several ranges and sets each request's status; returns the first error (or ok). The default issues
  // ReadAt one after another; the io_uring backend submits the whole batch at once; the object stores send
  // adjacent ranges as one request and keep several in flight.
  virtual Status ReadBatch(std::span<ReadRequest> requests);
  // How this file is best read; the default suits a local file.
  virtual ReadHints hints() const { return {}; }
  // What reached storage so far; backends that do not count report zeros.
  virtual ReadCounters counters() const { return {}; }
};

// A byte stream read once, front to back: a pipe, a socket, a FIFO, standard input (a VMM's save or migration
// stream). One instance is used from one thread at a time.
class HALITE_EXPORT SequentialSource {
 public:
  virtual ~SequentialSource() = default;
  // Reads up to `len` bytes into `buf`; returns how many, 0 only at the end of the stream (or len == 0).
  // Errors: kIoError from the operating system (or kAborted when the source was told to stop).
  virtual Result<size_t> ReadSome(void* buf, size_t len) = 0;
};

// A byte stream written front to back. One instance is used from one thread at a time.
class HALITE_EXPORT SequentialSink {
 public:
  virtual ~SequentialSink() = default;
  // Appends all `len` bytes or fails (kIoError).
  virtual Status Write(const void* data, size_t len) = 0;
  // Pushes buffered bytes to the destination. Callers must Flush() before they are done with a sink.
  virtual Status Flush() { return Status::Ok(); }
};

struct HALITE_EXPORT FileOpenOptions {
  bool use_io_uring = true;  // for ReadBatch; falls back to pread when io_uring is unavailable
};

// Opens a local file for reading. Errors: kIoError naming the path.
HALITE_EXPORT Result<std::unique_ptr<RandomAccessFile>> OpenLocalFile(const std::string& path, FileOpenOptions options = {});
// A file held in memory (tests, fuzzers, checkpoints received over a network).
HALITE_EXPORT std::unique_ptr<RandomAccessFile> NewMemoryFile(std::string name, std::vector<uint8_t> bytes);

// An append-only destination. Not thread-safe: one writer thread appends.
class HALITE_EXPORT AppendSink {
 public:
  virtual ~AppendSink() = default;
  virtual const std::string& name() const = 0;
  // Appends all of `data` (buffered or queued; errors may surface on a later call or Commit).
  virtual Status Append(std::span<const uint8_t> data) = 0;
  virtual uint64_t position() const = 0;
  // Makes everything durable and visible under the final name, atomically. After a failed Commit nothing is
  // left behind.
  virtual Status Commit() = 0;
  // Discards everything; no file is left behind. Safe to call after Commit (does nothing then).
  virtual void Abort() = 0;
};

struct HALITE_EXPORT FileSinkOptions {
  bool use_io_uring = true;  // queue writes through io_uring when available
  bool sync = true;          // fsync the file and its directory on Commit
};

// Creates the file unnamed (O_TMPFILE) in the target's directory and links it into place on Commit; where the
// file system lacks O_TMPFILE, writes a temporary name and renames it. A crash or kill at any moment leaves
// either the previous file under `path` or nothing. Replacing an existing file goes through a temporary name and
// rename(2) (linkat cannot replace), so a kill in that short window leaves a ".NAME.hlt-tmp.PID.RANDOM" file
// beside the target (atomic_file_sink.cc). Destroying the sink without Commit aborts.
HALITE_EXPORT Result<std::unique_ptr<AppendSink>> CreateAtomicFileSink(const std::string& path, FileSinkOptions options = {});

// A file written at any offset, with the same all-or-nothing guarantee as the atomic sink. WriteAt is
// thread-safe (pwrite). The file starts as `size` bytes of zeros (sparse).
class HALITE_EXPORT PositionalOutputFile {
 public:
  virtual ~PositionalOutputFile() = default;
  virtual const std::string& name() const = 0;
  virtual Status WriteAt(uint64_t offset, std::span<const uint8_t> data) = 0;
  virtual Status Commit() = 0;
  virtual void Abort() = 0;
};
HALITE_EXPORT Result<std::unique_ptr<PositionalOutputFile>> CreateAtomicOutputFile(const std::string& path, uint64_t size,
                                                                     bool sync = true);

// Appends to memory; Commit makes `*out` hold the bytes. `out` must outlive the sink.
HALITE_EXPORT std::unique_ptr<AppendSink> NewMemorySink(std::string name, std::vector<uint8_t>* out);

}  // namespace halite

#endif  // HALITE_STORAGE_H_
