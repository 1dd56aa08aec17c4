#include "io/uring_batch.h"

#include <unistd.h>

#include <cerrno>
#include <deque>
#include <vector>

#include "halite/bytes.h"

#ifdef HALITE_HAVE_URING
#include <liburing.h>

#include <fmt/format.h>
#endif

namespace halite::io {

#ifdef HALITE_HAVE_URING
namespace {

constexpr unsigned kRingEntries = 64;

class RingReader final : public UringBatchReader {
 public:
  explicit RingReader(int fd) : fd_(fd) {}
  io_uring* ring() { return &ring_; }
  ~RingReader() override {
    if (initialized) io_uring_queue_exit(&ring_);
  }
  bool initialized = false;

  Status Read(std::span<ReadRequest> requests, const std::string& name) override {
    // Progress per request; a short read is resubmitted for the rest.
    std::vector<size_t> done(requests.size(), 0);
    std::deque<size_t> pending;
    for (size_t i = 0; i < requests.size(); ++i) {
      requests[i].status = Status::Ok();
      if (!requests[i].buffer.empty()) pending.push_back(i);
    }
    size_t in_flight = 0;
    Status first;
    while (!pending.empty() || in_flight > 0) {
      while (!pending.empty() && in_flight < kRingEntries) {
        io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
        if (!sqe) break;
        size_t i = pending.front();
        pending.pop_front();
        auto& r = requests[i];
        io_uring_prep_read(sqe, fd_, r.buffer.data() + done[i], unsigned(r.buffer.size() - done[i]),
                           r.offset + done[i]);
        io_uring_sqe_set_data64(sqe, i);
        ++in_flight;
      }
      int rc = io_uring_submit_and_wait(&ring_, 1);
      if (rc < 0 && rc != -EINTR) {
        return Status::IoError(name + ": io_uring submit failed", -rc).set_retryable(true);
      }
      io_uring_cqe* cqe;
      unsigned head, seen = 0;
      io_uring_for_each_cqe(&ring_, head, cqe) {
        ++seen;
        --in_flight;
        size_t i = size_t(io_uring_cqe_get_data64(cqe));
        auto& r = requests[i];
        if (cqe->res < 0) {
          if (cqe->res == -EINTR || cqe->res == -EAGAIN) {
            pending.push_back(i);
            continue;
          }
          r.status = Status::IoError(name + ": read at offset " + fmt::format("{:#x}", r.offset + done[i]) + " failed", -cqe->res)
                         .set_retryable(cqe->res == -EIO);
          if (first.ok()) first = r.status;
        } else if (cqe->res == 0) {
          r.status = Status::IoError(name + ": short read at offset " + fmt::format("{:#x}", r.offset + done[i])).set_retryable(true);
          if (first.ok()) first = r.status;
        } else {
          done[i] += size_t(cqe->res);
          if (done[i] < r.buffer.size()) pending.push_back(i);
        }
      }
      io_uring_cq_advance(&ring_, seen);
    }
    return first;
  }

 private:
  int fd_;
  io_uring ring_;
};

class RingAppender final : public UringAppender {
 public:
  explicit RingAppender(int fd) : fd_(fd) {}
  io_uring* ring() { return &ring_; }
  bool initialized = false;
  ~RingAppender() override {
    if (!initialized) return;
    (void)Drain("");
    io_uring_queue_exit(&ring_);
  }

  Status Write(uint64_t offset, std::span<const uint8_t> data, const std::string& name) override {
    if (!error_.ok()) return error_;
    while (in_flight_ >= kMaxInFlight) HLT_RETURN_IF_ERROR(Reap(name, 1));
    auto buf = std::make_unique<Pending>();
    buf->offset = offset;
    buf->bytes.assign(data.begin(), data.end());
    return Submit(std::move(buf), name);
  }

  Status Drain(const std::string& name) override {
    while (in_flight_ > 0) {
      Status s = Reap(name, 1);
      if (!s.ok()) return s;
    }
    return error_;
  }

 private:
  struct Pending {
    uint64_t offset = 0;
    size_t done = 0;
    std::vector<uint8_t> bytes;
  };
  static constexpr size_t kMaxInFlight = 16;

  Status Submit(std::unique_ptr<Pending> p, const std::string& name) {
    io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
    if (!sqe) {
      HLT_RETURN_IF_ERROR(Reap(name, 1));
      sqe = io_uring_get_sqe(&ring_);
      if (!sqe) return Status::IoError(name + ": io_uring queue full");
    }
    Pending* raw = p.release();
    io_uring_prep_write(sqe, fd_, raw->bytes.data() + raw->done, unsigned(raw->bytes.size() - raw->done),
                        raw->offset + raw->done);
    io_uring_sqe_set_data(sqe, raw);
    ++in_flight_;
    int rc = io_uring_submit(&ring_);
    if (rc < 0) return error_ = Status::IoError(name + ": io_uring submit failed", -rc);
    return Status::Ok();
  }

  Status Reap(const std::string& name, unsigned want) {
    io_uring_cqe* cqe;
    int rc = io_uring_wait_cqe_nr(&ring_, &cqe, want);
    if (rc < 0 && rc != -EINTR) return error_ = Status::IoError(name + ": io_uring wait failed", -rc);
    unsigned head, seen = 0;
    std::vector<std::unique_ptr<Pending>> retry;
    io_uring_for_each_cqe(&ring_, head, cqe) {
      ++seen;
      --in_flight_;
      std::unique_ptr<Pending> p(static_cast<Pending*>(io_uring_cqe_get_data(cqe)));
      if (cqe->res < 0) {
        if (error_.ok()) {
          error_ = Status::IoError(name + ": write at offset " + fmt::format("{:#x}", p->offset + p->done) + " failed", -cqe->res);
        }
      } else if (cqe->res == 0) {
        if (error_.ok()) error_ = Status::IoError(name + ": write at offset " + fmt::format("{:#x}", p->offset + p->done) + " wrote nothing");
      } else {
        p->done += size_t(cqe->res);
        if (p->done < p->bytes.size()) retry.push_back(std::move(p));  // short write: send the rest
      }
    }
    io_uring_cq_advance(&ring_, seen);
    for (auto& p : retry) HLT_RETURN_IF_ERROR(Submit(std::move(p), name));
    return error_;
  }

  int fd_;
  io_uring ring_;
  size_t in_flight_ = 0;
  Status error_;
};

bool MakeRing(io_uring* ring) { return io_uring_queue_init(kRingEntries, ring, 0) == 0; }

}  // namespace

// The ring is initialised in place: liburing's struct must not be copied after setup.
std::unique_ptr<UringBatchReader> UringBatchReader::Create(int fd) {
  auto r = std::make_unique<RingReader>(fd);
  if (!MakeRing(r->ring())) return nullptr;
  r->initialized = true;
  return r;
}

std::unique_ptr<UringAppender> UringAppender::Create(int fd) {
  auto a = std::make_unique<RingAppender>(fd);
  if (!MakeRing(a->ring())) return nullptr;
  a->initialized = true;
  return a;
}

bool UringAvailable() {
  io_uring ring;
  if (!MakeRing(&ring)) return false;
  io_uring_queue_exit(&ring);
  return true;
}

#else  // !HALITE_HAVE_URING

std::unique_ptr<UringBatchReader> UringBatchReader::Create(int) { return nullptr; }
std::unique_ptr<UringAppender> UringAppender::Create(int) { return nullptr; }
bool UringAvailable() { return false; }

#endif

}  // namespace halite::io
