// rados://POOL/NAME behind RandomAccessFile (asynchronous reads) and AppendSink (striped writes, head last).
// The only file that includes rados/librados.h (CONTRIBUTING.md, dependency rule).
//
// Layout: RADOS refuses single writes above 90 MiB and objects above 128 MiB, so a checkpoint is striped over
// objects of kStripeSize bytes named PREFIX.00000000, PREFIX.00000001, ... where PREFIX is unique to one save.
// The head object NAME is small text written last:
//   halite-rados-stripes 1\nstripe_size 4194304\nlength 268435456\nprefix NAME.s.0123456789abcdef\n
#include <rados/librados.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <condition_variable>
#include <deque>
#include <cstring>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "objstore/demand_gate.h"
#include "objstore/object_store.h"
#include "objstore/part_buffered_sink.h"
#include "objstore/read_coalescing.h"

namespace halite::objstore {

namespace {

constexpr uint64_t kStripeSize = 4u << 20;
constexpr size_t kMaxHeadSize = 4096;
constexpr const char* kHeadMagic = "halite-rados-stripes 1";
// How a batch is read: neighbouring blocks joined into reads of 256 KiB to 2 MiB (about a batch / 8 each, so that
// 8 or more are in flight at once), a gap of up to 64 KiB read and dropped. A read costs the OSD per operation
// much as it costs radosgw per request (shared/notes/object-store.md): a block each was 2,524 reads for a
// 281 MiB eager restore (bench/objstore --restore-all).
constexpr unsigned kReadsInFlight = 8;
constexpr uint64_t kMinJoinedRead = 256u << 10;
constexpr uint64_t kMaxJoinedRead = 2u << 20;
constexpr uint64_t kMaxJoinGap = 64u << 10;

// Background reads (ReadBatch) against a fault's read (ReadAt), demand_gate.h. They go through a second cluster
// connection, so that the OSD queues them as another client's instead of putting the fault's read behind every
// batch read sent before it on the same connection, and with a lower operation priority, so that its weighted
// queue (wpq, the default before Ceph 17; bookworm has 16.2) picks the fault's read about four times in five (63
// against 16) when both wait. Pieces of at most 512 KiB, three in flight (RadosLanes): a read costs the OSD little
// per operation, and a fault then waits for at most the pieces being read
// (bench/results/2026-11-27-fault-priority/README.md).
constexpr const char* kBackgroundOpPriority = "16";

// librados returns -errno; the Status carries the errno and its ToString() appends the text.
std::string ErrnoText(int r) { return fmt::format("error {}", -r); }

// One connection to the cluster per process, shared by every open file and sink, closed with the last of them.
class Cluster {
 public:
  ~Cluster() { rados_shutdown(handle_); }
  rados_t handle() const { return handle_; }

  // The connection for `lane`: one per lane and process.
  static Result<std::shared_ptr<Cluster>> Get(const std::string& uri, ReadLane lane = ReadLane::kDemand) {
    static std::mutex mu;
    static std::weak_ptr<Cluster> cached[2];
    std::lock_guard<std::mutex> lock(mu);
    std::weak_ptr<Cluster>& slot = cached[lane == ReadLane::kDemand ? 0 : 1];
    if (auto c = slot.lock()) return c;
    rados_t h = nullptr;
    int r = rados_create(&h, nullptr);  // client.admin unless CEPH_ARGS says --id
    if (r < 0) return Status::IoError(uri + ": rados_create: " + ErrnoText(r), -r);
    auto c = std::shared_ptr<Cluster>(new Cluster(h));
    // ceph.conf from $CEPH_CONF or the default places; CEPH_ARGS may override (--id, --keyring).
    r = rados_conf_read_file(h, nullptr);
    if (r < 0) {
      return Status::IoError(uri + ": cannot read ceph.conf (set CEPH_CONF): " + ErrnoText(r), -r);
    }
    (void)rados_conf_parse_env(h, nullptr);
    // A cluster that stops answering is an error after a bounded time, never a restore that hangs forever.
    for (const char* opt : {"rados_osd_op_timeout", "rados_mon_op_timeout", "client_mount_timeout"}) {
      (void)rados_conf_set(h, opt, "10");
    }
    if (lane == ReadLane::kBackground) (void)rados_conf_set(h, "osd_client_op_priority", kBackgroundOpPriority);
    r = rados_connect(h);
    if (r < 0) return Status::IoError(uri + ": cannot connect to the Ceph cluster: " + ErrnoText(r), -r);
    slot = c;
    return c;
  }

 private:
  explicit Cluster(rados_t h) : handle_(h) {}
  rados_t handle_;
};

struct Pool {
  std::shared_ptr<Cluster> cluster;
  rados_ioctx_t io = nullptr;
  ~Pool() {
    if (io) rados_ioctx_destroy(io);
  }
};

Result<std::shared_ptr<Pool>> OpenPool(const std::string& uri, const ObjectUri& parsed,
                                      ReadLane lane = ReadLane::kDemand) {
  auto pool = std::make_shared<Pool>();
  HLT_ASSIGN_OR_RETURN(pool->cluster, Cluster::Get(uri, lane));
  int r = rados_ioctx_create(pool->cluster->handle(), parsed.container.c_str(), &pool->io);
  if (r < 0) {
    pool->io = nullptr;
    return Status::IoError(fmt::format("{}: cannot open pool {}: {}", uri, parsed.container, ErrnoText(r)), -r);
  }
  return pool;
}

std::string StripeName(const std::string& prefix, uint64_t index) { return fmt::format("{}.{:08x}", prefix, index); }

struct Head {
  uint64_t stripe_size = 0;
  uint64_t length = 0;
  std::string prefix;
};

// Reads the head object; kNotFound when there is none.
Result<Head> ReadHead(const std::string& uri, Pool& pool, const std::string& name) {
  std::vector<char> buf(kMaxHeadSize + 1);
  const int r = rados_read(pool.io, name.c_str(), buf.data(), buf.size(), 0);
  if (r == -ENOENT) return Status::NotFound(uri + ": no such object");
  if (r < 0) return Status::IoError(uri + ": reading the head object: " + ErrnoText(r), -r);
  const std::string text(buf.data(), static_cast<size_t>(r));
  Head h;
  char prefix[kMaxHeadSize + 1] = {};
  unsigned long long stripe = 0, length = 0;
  if (static_cast<size_t>(r) > kMaxHeadSize || !text.starts_with(std::string(kHeadMagic) + "\n") ||
      std::sscanf(text.c_str() + std::strlen(kHeadMagic) + 1, "stripe_size %llu\nlength %llu\nprefix %4096s\n", &stripe,
                  &length, prefix) != 3 ||
      stripe == 0 || stripe > (64u << 20)) {
    return Status::Corrupt(fmt::format("{}: the head object ({} bytes) is not a halite stripe head (expected \"{}\", "
                                       "stripe_size, length, prefix)",
                                       uri, r, kHeadMagic));
  }
  h.stripe_size = stripe;
  h.length = length;
  h.prefix = prefix;
  return h;
}

// Completions of one Read's asynchronous reads. Shared with the callbacks, which may run a moment after the waiter
// saw the count reach zero.
struct InFlight {
  std::mutex mu;
  std::condition_variable cv;
  size_t pending = 0;
};

struct CompletionArg {
  std::shared_ptr<InFlight> in_flight;
  std::shared_ptr<DemandGate> gate;  // set for a background read: its slot is given back as soon as it ends
};

void OnReadComplete(rados_completion_t, void* arg) {
  std::unique_ptr<CompletionArg> a(static_cast<CompletionArg*>(arg));
  if (a->gate) a->gate->EndBackground();
  {
    std::lock_guard<std::mutex> lock(a->in_flight->mu);
    --a->in_flight->pending;
  }
  a->in_flight->cv.notify_all();
}

class RadosFile final : public RandomAccessFile {
 public:
  RadosFile(std::string name, std::shared_ptr<Pool> pool, std::shared_ptr<Pool> background_pool, Head head)
      : name_(std::move(name)), pool_(std::move(pool)), background_pool_(std::move(background_pool)),
        head_(std::move(head)), gate_(DemandGate::ForServer(RadosGateKey(), RadosLanes())) {}
  const std::string& name() const override { return name_; }
  uint64_t size() const override { return head_.length; }

  // A single read is someone waiting for it (a fault's block): the demand lane. A batch streams in the background
  // and yields to demand reads (demand_gate.h).
  Status ReadAt(uint64_t offset, std::span<uint8_t> buffer) override {
    ReadRequest r{offset, buffer, {}};
    return Read(std::span<ReadRequest>(&r, 1), ReadLane::kDemand);
  }

  Status ReadBatch(std::span<ReadRequest> requests) override { return Read(requests, ReadLane::kBackground); }

  // A batch's pieces go out several at once, so a reader streaming blocks asks for a few MiB at a time (librados
  // reads cost ~0.7 ms each at one in flight: ../shared/notes/object-store.md).
  ReadHints hints() const override { return ReadHints{8u << 20, true}; }
  ReadCounters counters() const override {
    return ReadCounters{requests_.load(std::memory_order_relaxed), bytes_.load(std::memory_order_relaxed)};
  }

 private:
  // One asynchronous read: part of a stripe object, into `dest`.
  struct Piece {
    size_t read;  // index into the Read call's joined reads
    uint64_t stripe;
    uint64_t in_stripe;
    std::span<uint8_t> dest;
    rados_completion_t completion = nullptr;
    std::string object;
  };

  // Neighbouring requests are joined into reads of up to kMaxJoinedRead bytes (a gap of up to kMaxJoinGap read and
  // dropped), cut at stripe boundaries. A demand read sends every piece at once; a background one as the gate
  // lets it, in pieces of at most the gate's background_piece bytes.
  Status Read(std::span<ReadRequest> requests, ReadLane lane) {
    uint64_t total = 0;
    for (auto& r : requests) {
      r.status = Status::Ok();
      if (r.offset > head_.length || r.buffer.size() > head_.length - r.offset) {
        return Status::InvalidArgument(fmt::format("{}: read of {} bytes at offset {:#x} is outside the object ({} bytes)",
                                                   name_, r.buffer.size(), r.offset, head_.length));
      }
      total += r.buffer.size();
    }
    const std::vector<CoalescedRead> reads =
        CoalesceReads(requests, LimitsForBatch(total, kReadsInFlight, kMinJoinedRead, kMaxJoinedRead, kMaxJoinGap));
    // A read of one whole request goes straight into its buffer; a joined one through scratch memory.
    std::vector<std::vector<uint8_t>> scratch(reads.size());
    std::vector<std::span<uint8_t>> dests(reads.size());
    for (size_t i = 0; i < reads.size(); ++i) {
      const CoalescedRead& cr = reads[i];
      if (cr.parts.size() == 1 && cr.parts[0]->buffer.size() == cr.length) {
        dests[i] = cr.parts[0]->buffer;
      } else {
        scratch[i].resize(cr.length);
        dests[i] = scratch[i];
      }
    }
    std::deque<Piece> pieces;
    auto in_flight = std::make_shared<InFlight>();
    if (lane == ReadLane::kDemand) {
      const uint64_t begin = reads.empty() ? 0 : reads.front().offset;
      const uint64_t end = reads.empty() ? 0 : reads.back().offset + reads.back().length;
      DemandGate::Demand demand(*gate_, begin, end - begin);
      for (size_t i = 0; i < reads.size(); ++i) {
        for (uint64_t at = 0; at < dests[i].size();) {
          at += Send(pool_->io, reads, dests, i, at, UINT64_MAX, nullptr, in_flight, pieces);
        }
      }
      WaitAll(*in_flight);
    } else {
      SendGated(reads, dests, in_flight, pieces);
    }
    Collect(reads, pieces);
    for (size_t i = 0; i < reads.size(); ++i) {
      if (scratch[i].empty()) continue;
      for (ReadRequest* r : reads[i].parts) {
        if (!r->status.ok()) continue;
        std::memcpy(r->buffer.data(), scratch[i].data() + (r->offset - reads[i].offset), r->buffer.size());
      }
    }
    Status first;
    for (auto& r : requests) {
      if (!r.status.ok() && first.ok()) first = r.status;
    }
    return first;
  }

  // Sends the piece of read `i` from byte `at` of its destination on: at most `most` bytes, cut at the stripe's
  // end. Returns its length. A piece that cannot be sent fails its read's requests at once.
  uint64_t Send(rados_ioctx_t io, const std::vector<CoalescedRead>& reads, std::span<const std::span<uint8_t>> dests,
                size_t i, uint64_t at, uint64_t most, std::shared_ptr<DemandGate> gate,
                const std::shared_ptr<InFlight>& in_flight, std::deque<Piece>& pieces) {
    const uint64_t off = reads[i].offset + at;
    const uint64_t stripe = off / head_.stripe_size;
    const uint64_t in_stripe = off % head_.stripe_size;
    const uint64_t n = std::min<uint64_t>({dests[i].size() - at, head_.stripe_size - in_stripe, most});
    Piece& p = pieces.emplace_back();
    p.read = i;
    p.stripe = stripe;
    p.in_stripe = in_stripe;
    p.dest = dests[i].subspan(at, n);
    p.object = StripeName(head_.prefix, stripe);
    requests_.fetch_add(1, std::memory_order_relaxed);
    {
      std::lock_guard<std::mutex> lock(in_flight->mu);
      ++in_flight->pending;
    }
    auto* arg = new CompletionArg{in_flight, std::move(gate)};
    int rc = rados_aio_create_completion2(arg, OnReadComplete, &p.completion);
    if (rc == 0) {
      rc = rados_aio_read(io, p.object.c_str(), p.completion, reinterpret_cast<char*>(p.dest.data()), p.dest.size(),
                          p.in_stripe);
      if (rc < 0) {
        rados_aio_release(p.completion);  // never submitted: its callback will not run
        p.completion = nullptr;
      }
    }
    if (rc < 0) {
      OnReadComplete(nullptr, arg);  // what the callback would have done
      Fail(reads, p, ErrnoText(rc), -rc);
    }
    return n;
  }

  // A background read: its pieces go out as the gate lets them, on the background connection.
  void SendGated(const std::vector<CoalescedRead>& reads, std::span<const std::span<uint8_t>> dests,
                 const std::shared_ptr<InFlight>& in_flight, std::deque<Piece>& pieces) {
    rados_ioctx_t io = background_pool_->io;
    DemandGate::Turn turn(*gate_);
    // Every byte of this read is on its path until all have arrived (see DemandGate::Demand): the reader claims a
    // batch's blocks once the whole batch is in, so until then a fault on any of them reads it itself.
    if (!reads.empty()) turn.SetFrontier(reads.front().offset, reads.back().offset + reads.back().length);
    size_t i = 0;
    uint64_t at = 0;
    while (i < reads.size()) {
      if (at == dests[i].size()) {
        ++i;
        at = 0;
        continue;
      }
      const uint64_t most = turn.TryStart();
      if (most == 0) {
        turn.Wait(std::chrono::seconds(1));
        continue;
      }
      at += Send(io, reads, dests, i, at, most, gate_, in_flight, pieces);
    }
    turn.Finished();
    WaitAll(*in_flight);
  }

  static void WaitAll(InFlight& in_flight) {
    std::unique_lock<std::mutex> lock(in_flight.mu);
    in_flight.cv.wait(lock, [&] { return in_flight.pending == 0; });
  }

  // The outcome of every piece sent; a failed piece fails every request of its read.
  void Collect(const std::vector<CoalescedRead>& reads, std::deque<Piece>& pieces) {
    for (Piece& p : pieces) {
      if (!p.completion) continue;
      rados_aio_wait_for_complete(p.completion);
      const int rc = rados_aio_get_return_value(p.completion);
      rados_aio_release(p.completion);
      p.completion = nullptr;
      if (rc > 0) bytes_.fetch_add(static_cast<uint64_t>(rc), std::memory_order_relaxed);
      if (rc < 0) {
        Fail(reads, p, ErrnoText(rc), -rc);
      } else if (static_cast<size_t>(rc) != p.dest.size()) {
        Fail(reads, p, fmt::format("short read ({} bytes)", rc), 0);
      }
    }
  }

  void Fail(const std::vector<CoalescedRead>& reads, const Piece& p, const std::string& why, int err) {
    for (ReadRequest* r : reads[p.read].parts) SetError(r, p.stripe, p.in_stripe, p.dest.size(), why, err);
  }

  void SetError(ReadRequest* r, uint64_t stripe, uint64_t in_stripe, size_t len, const std::string& why, int err) {
    if (!r->status.ok()) return;
    const uint64_t off = stripe * head_.stripe_size + in_stripe;
    // Timeouts and a missing OSD may pass; a missing stripe object will not.
    r->status = Status::IoError(fmt::format("{}: reading {} bytes at offset {:#x} (object {}): {}", name_, len, off,
                                            StripeName(head_.prefix, stripe), why),
                                err)
                    .set_retryable(err == ETIMEDOUT || err == EIO);
  }

  std::string name_;
  std::shared_ptr<Pool> pool_;             // demand reads
  std::shared_ptr<Pool> background_pool_;  // background reads: their own connection (or pool_, when it failed)
  Head head_;
  std::shared_ptr<DemandGate> gate_;
  std::atomic<uint64_t> requests_{0};  // rados_aio_read calls
  std::atomic<uint64_t> bytes_{0};
};

class RadosSink final : public PartBufferedSink {
 public:
  RadosSink(std::string name, std::shared_ptr<Pool> pool, std::string object, std::string prefix)
      : PartBufferedSink(std::move(name)), pool_(std::move(pool)), object_(std::move(object)),
        prefix_(std::move(prefix)) {
    buffer_.reserve(kStripeSize);
  }
  ~RadosSink() override { Abort(); }

  Status Commit() override {
    HLT_RETURN_IF_ERROR(CheckOpen("Commit"));
    Status s = error_;
    if (s.ok() && !buffer_.empty()) s = WritePart();
    auto old = ReadHead(name_, *pool_, object_);
    if (s.ok() && !old && old.error().code() != StatusCode::kNotFound) s = old.error();
    if (s.ok()) {
      const std::string head = fmt::format("{}\nstripe_size {}\nlength {}\nprefix {}\n", kHeadMagic, kStripeSize,
                                           position_, prefix_);
      const int r = rados_write_full(pool_->io, object_.c_str(), head.data(), head.size());
      if (r < 0) s = Status::IoError(name_ + ": writing the head object: " + ErrnoText(r), -r);
    }
    if (!s.ok()) {
      Abort();
      return s;
    }
    done_ = true;
    // The replaced checkpoint's stripes: nobody can reach them now (best effort; a leftover only wastes space).
    if (old && old->prefix != prefix_) {
      const uint64_t n = (old->length + old->stripe_size - 1) / old->stripe_size;
      for (uint64_t i = 0; i < n; ++i) (void)rados_remove(pool_->io, StripeName(old->prefix, i).c_str());
    }
    return Status::Ok();
  }

  void Abort() override {
    if (done_) return;
    done_ = true;
    for (uint64_t i = 0; i < stripes_written_; ++i) (void)rados_remove(pool_->io, StripeName(prefix_, i).c_str());
  }

 private:
  size_t PartSize() const override { return kStripeSize; }

  // Writes buffer_ as the next stripe object.
  Status WritePart() override {
    const std::string object = StripeName(prefix_, stripes_written_);
    const int r = rados_write_full(pool_->io, object.c_str(), reinterpret_cast<const char*>(buffer_.data()),
                                   buffer_.size());
    if (r < 0) {
      return Status::IoError(fmt::format("{}: writing {} bytes at offset {:#x} (object {}): {}", name_, buffer_.size(),
                                         position_ - buffer_.size(), object, ErrnoText(r)),
                             -r);
    }
    ++stripes_written_;
    buffer_.clear();
    return Status::Ok();
  }

  std::shared_ptr<Pool> pool_;
  std::string object_;
  std::string prefix_;
  uint64_t stripes_written_ = 0;
};

}  // namespace

// One cluster per process (Cluster::Get): one gate.
std::string RadosGateKey() { return "rados"; }

LanePolicy RadosLanes() {
  LanePolicy p;
  p.background_in_flight = 3;
  p.background_piece = 512u << 10;
  p.hold_off = std::chrono::microseconds(3000);
  return p;
}

Result<std::unique_ptr<RandomAccessFile>> OpenRadosFile(const std::string& uri, const ObjectUri& parsed) {
  HLT_ASSIGN_OR_RETURN(auto pool, OpenPool(uri, parsed));
  HLT_ASSIGN_OR_RETURN(Head head, ReadHead(uri, *pool, parsed.key));
  // The background connection is opened now, not at the first batch: connecting costs the client CPU for
  // 10-20 ms, which the first faults of a restore would otherwise share. Without it, background reads share the
  // demand connection (slower faults, same bytes).
  // With the gate off (HALITE_DEMAND_GATE=off), as before it: one connection for both.
  std::shared_ptr<Pool> background_pool = pool;
  if (PolicyFromEnv(RadosLanes()).demand_first) {
    auto background = OpenPool(uri, parsed, ReadLane::kBackground);
    if (background) background_pool = *background;
  }
  return std::unique_ptr<RandomAccessFile>(
      new RadosFile(uri, std::move(pool), std::move(background_pool), std::move(head)));
}

Result<std::unique_ptr<AppendSink>> CreateRadosSink(const std::string& uri, const ObjectUri& parsed) {
  for (unsigned char c : parsed.key) {
    if (std::isspace(c)) return Status::InvalidArgument(uri + ": a RADOS checkpoint name cannot contain white space");
  }
  HLT_ASSIGN_OR_RETURN(auto pool, OpenPool(uri, parsed));
  std::random_device rd;
  const uint64_t id = (static_cast<uint64_t>(rd()) << 32) | rd();
  std::string prefix = fmt::format("{}.s.{:016x}", parsed.key, id);
  return std::unique_ptr<AppendSink>(new RadosSink(uri, std::move(pool), parsed.key, std::move(prefix)));
}

}  // namespace halite::objstore
