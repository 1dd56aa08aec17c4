// The host image server over FUSE's low-level API (fuse_image_server.h).
#define FUSE_USE_VERSION 312
#include "halite/image_server/fuse_image_server.h"

#include <fcntl.h>
#include <fuse_lowlevel.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <thread>

#include <nlohmann/json.hpp>

#include "fuse_mount.h"
#include "page_cache_pin.h"

namespace halite::image_server {
namespace {

// Lower-case hex, as hlt-restore names an image server's mount after the checkpoint's file id.
template <size_t N>
std::string HexBytes(const std::array<uint8_t, N>& bytes) {
  static const char kDigits[] = "0123456789abcdef";
  std::string s;
  for (uint8_t b : bytes) {
    s += kDigits[b >> 4];
    s += kDigits[b & 15];
  }
  return s;
}

constexpr fuse_ino_t kRootIno = FUSE_ROOT_ID;  // 1
constexpr fuse_ino_t kFirstImageIno = 2;
constexpr uint64_t kPage = 4096;
constexpr double kAttrTimeout = 3600;  // the files never change
constexpr const char* kStatsName = ".stats";

// Per-file counters kept by the server (the image keeps its own).
struct FileCounters {
  std::atomic<uint64_t> pages_stored{0}, store_errors{0}, blocks_prefetched{0}, open_handles{0},
      refused_writes{0}, blocks_queued{0}, blocks_stored{0};
};

}  // namespace

class FuseImageServer::Impl {
 public:
  Impl(std::vector<ServedImage> images, ImageServerOptions options)
      : images_(std::move(images)), options_(std::move(options)), counters_(images_.size()), pins_(images_.size()) {}

  ~Impl() { Shutdown(); }

  Status Start() {
    std::vector<std::string> fuse_options = {"fsname=halite", "subtype=halite"};
    if (options_.allow_other) fuse_options.push_back("allow_other");
    fuse_lowlevel_ops ops{};
    ops.init = &Impl::OnInit;
    ops.lookup = &Impl::OnLookup;
    ops.getattr = &Impl::OnGetattr;
    ops.setattr = &Impl::OnSetattr;
    ops.open = &Impl::OnOpen;
    ops.read = &Impl::OnRead;
    ops.write = &Impl::OnWrite;
    ops.release = &Impl::OnRelease;
    ops.flush = &Impl::OnFlush;
    ops.fsync = &Impl::OnFsync;
    ops.opendir = &Impl::OnOpendir;
    ops.readdir = &Impl::OnReaddir;
    ops.fallocate = &Impl::OnFallocate;
    HLT_RETURN_IF_ERROR(mount_.Mount(fuse_options, ops, this, options_.mountpoint, "the image server", 16));
    storer_ = std::thread([this] { StoreLoop(); });
    if (options_.prefetch_bytes_per_s > 0) prefetcher_ = std::thread([this] { PrefetchLoop(); });
    return Status::Ok();
  }

  uint64_t open_handles() const {
    uint64_t n = 0;
    for (const auto& c : counters_) n += c.open_handles.load();
    return n;
  }

  Status Stop(bool force) {
    const uint64_t open = open_handles();
    if (open > 0 && !force) {
      return Status::Aborted("the image server at " + options_.mountpoint + " still has " + std::to_string(open) +
                             " open file(s): a clone maps one (stop the clones first)");
    }
    Shutdown();
    return Status::Ok();
  }

  void Wait() { mount_.Wait(); }

  std::vector<ServedImageStats> Stats() const {
    std::vector<ServedImageStats> out;
    for (size_t i = 0; i < images_.size(); ++i) {
      ServedImageStats s;
      s.name = images_[i].name;
      s.size = images_[i].image->size();
      // Which checkpoint's view the file is: an incremental save of a clone checks it (qemu_ram_mapping.h).
      const CheckpointReader& reader = images_[i].image->reader();
      s.checkpoint_file_id = HexBytes(reader.file_id());
      s.checkpoint_index_fingerprint = HexBytes(reader.index_fingerprint());
      s.region = images_[i].image->region_name();
      s.image = images_[i].image->Stats();
      s.pages_stored = counters_[i].pages_stored.load();
      s.store_errors = counters_[i].store_errors.load();
      s.blocks_to_store = counters_[i].blocks_queued.load() - counters_[i].blocks_stored.load();
      s.blocks_prefetched = counters_[i].blocks_prefetched.load();
      s.open_handles = counters_[i].open_handles.load();
      s.refused_writes = counters_[i].refused_writes.load();
      s.pages_pinned = pins_[i].pages_pinned();
      s.pin_errors = pins_[i].pin_errors();
      out.push_back(s);
    }
    return out;
  }

  std::string StatsJson() const {
    nlohmann::ordered_json files = nlohmann::ordered_json::array();
    for (const auto& s : Stats()) {
      files.push_back({{"name", s.name},
                       {"size", s.size},
                       {"checkpoint_file_id", s.checkpoint_file_id},
                       {"checkpoint_index_fingerprint", s.checkpoint_index_fingerprint},
                       {"region", s.region},
                       {"reads", s.image.reads},
                       {"bytes_read", s.image.bytes_read},
                       {"blocks_decoded", s.image.blocks_decoded},
                       {"distinct_blocks", s.image.distinct_blocks},
                       {"checkpoint_bytes", s.image.checkpoint_bytes},
                       {"zero_pages_read", s.image.zero_pages_read},
                       {"read_errors", s.image.read_errors},
                       {"pages_stored", s.pages_stored},
                       {"store_errors", s.store_errors},
                       {"blocks_to_store", s.blocks_to_store},
                       {"blocks_prefetched", s.blocks_prefetched},
                       {"open_handles", s.open_handles},
                       {"refused_writes", s.refused_writes},
                       {"pages_pinned", s.pages_pinned},
                       {"pin_errors", s.pin_errors}});
    }
    nlohmann::ordered_json j = {{"mountpoint", options_.mountpoint}, {"pid", getpid()}, {"files", files}};
    return j.dump(2) + "\n";
  }

 private:
  // A decoded block's pages waiting to be stored in the page cache of file `file`.
  struct StoreJob {
    size_t file;
    DecodedBlock block;
    uint64_t skip_from = 0, skip_to = 0;  // image range the read that decoded it answered itself
  };

  static Impl* Self(fuse_req_t req) { return static_cast<Impl*>(fuse_req_userdata(req)); }

  // Image index of an inode, or -1.
  long ImageOf(fuse_ino_t ino) const {
    if (ino < kFirstImageIno || ino >= kFirstImageIno + images_.size()) return -1;
    return static_cast<long>(ino - kFirstImageIno);
  }
  fuse_ino_t StatsIno() const { return kFirstImageIno + images_.size(); }

  bool Attr(fuse_ino_t ino, struct stat* st) const {
    std::memset(st, 0, sizeof *st);
    st->st_ino = ino;
    st->st_nlink = 1;
    st->st_uid = getuid();
    st->st_gid = getgid();
    if (ino == kRootIno) {
      st->st_mode = S_IFDIR | 0755;
      st->st_nlink = 2;
    } else if (long i = ImageOf(ino); i >= 0) {
      // Writable by mode so that QEMU's O_RDWR open works; writes themselves are refused.
      st->st_mode = S_IFREG | 0666;
      st->st_size = static_cast<off_t>(images_[i].image->size());
      st->st_blksize = kPage;
    } else if (ino == StatsIno()) {
      st->st_mode = S_IFREG | 0444;
      st->st_size = 0;  // generated on open: read with direct I/O
    } else {
      return false;
    }
    return true;
  }

  static void OnInit(void* userdata, fuse_conn_info* conn) {
    (void)userdata;
    // Large reads: a fault's readahead comes in one request.
    conn->max_readahead = 1 << 20;
  }

  static void OnLookup(fuse_req_t req, fuse_ino_t parent, const char* name) {
    Impl* self = Self(req);
    if (parent != kRootIno) {
      fuse_reply_err(req, ENOENT);
      return;
    }
    fuse_ino_t ino = 0;
    if (std::strcmp(name, kStatsName) == 0) ino = self->StatsIno();
    for (size_t i = 0; i < self->images_.size() && ino == 0; ++i) {
      if (self->images_[i].name == name) ino = kFirstImageIno + i;
    }
    if (ino == 0) {
      fuse_reply_err(req, ENOENT);
      return;
    }
    fuse_entry_param e{};
    e.ino = ino;
    e.attr_timeout = ino == self->StatsIno() ? 0 : kAttrTimeout;
    e.entry_timeout = kAttrTimeout;
    self->Attr(ino, &e.attr);
    fuse_reply_entry(req, &e);
  }

  static void OnGetattr(fuse_req_t req, fuse_ino_t ino, fuse_file_info*) {
    struct stat st;
    if (!Self(req)->Attr(ino, &st)) {
      fuse_reply_err(req, ENOENT);
      return;
    }
    fuse_reply_attr(req, &st, ino == Self(req)->StatsIno() ? 0 : kAttrTimeout);
  }

  static void OnSetattr(fuse_req_t req, fuse_ino_t ino, struct stat* attr, int to_set, fuse_file_info* fi) {
    Impl* self = Self(req);
    // Only a no-op is allowed (a truncate to the same size, as some openers do).
    struct stat st;
    if (!self->Attr(ino, &st)) {
      fuse_reply_err(req, ENOENT);
      return;
    }
    if ((to_set & ~FUSE_SET_ATTR_SIZE) == 0 && (to_set & FUSE_SET_ATTR_SIZE) && attr->st_size == st.st_size) {
      OnGetattr(req, ino, fi);
      return;
    }
    if (long i = self->ImageOf(ino); i >= 0) self->counters_[i].refused_writes++;
    fuse_reply_err(req, EROFS);
  }

  static void OnOpen(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
    Impl* self = Self(req);
    if (ino == self->StatsIno()) {
      if ((fi->flags & O_ACCMODE) != O_RDONLY) {
        fuse_reply_err(req, EACCES);
        return;
      }
      // The document as of this open, found by read through the file handle.
      auto text = std::make_shared<const std::string>(self->StatsJson());
      {
        std::lock_guard<std::mutex> lock(self->stats_mu_);
        fi->fh = ++self->last_stats_handle_;
        self->stats_snapshots_[fi->fh] = std::move(text);
      }
      fi->direct_io = 1;
      fuse_reply_open(req, fi);
      return;
    }
    const long i = self->ImageOf(ino);
    if (i < 0) {
      fuse_reply_err(req, ENOENT);
      return;
    }
    if (fi->flags & O_TRUNC) {
      self->counters_[i].refused_writes++;
      fuse_reply_err(req, EROFS);
      return;
    }
    // The page cache outlives this open: the next clone finds the pages the last one brought in.
    fi->keep_cache = 1;
    // The server's own opens (the prefetcher's, which keep the inode known to the kernel, and the pins') are not
    // clones.
    const pid_t opener = fuse_req_ctx(req)->pid;
    fi->fh = opener != self->prefetcher_tid_.load() && opener != self->storer_tid_.load();
    if (fi->fh) self->counters_[i].open_handles++;
    fuse_reply_open(req, fi);
  }

  static void OnRelease(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
    Impl* self = Self(req);
    if (ino == self->StatsIno()) {
      std::lock_guard<std::mutex> lock(self->stats_mu_);
      self->stats_snapshots_.erase(fi->fh);
    } else if (long i = self->ImageOf(ino); i >= 0 && fi->fh) {
      self->counters_[i].open_handles--;
    }
    fuse_reply_err(req, 0);
  }

  static void OnFlush(fuse_req_t req, fuse_ino_t, fuse_file_info*) { fuse_reply_err(req, 0); }
  static void OnFsync(fuse_req_t req, fuse_ino_t, int, fuse_file_info*) { fuse_reply_err(req, 0); }

  static void OnRead(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, fuse_file_info* fi) {
    Impl* self = Self(req);
    if (ino == self->StatsIno()) {
      // A reference of this read's own: the reader may close the file (and its release be served on another
      // thread) as soon as the kernel has the reply, while fuse_reply_buf has not returned yet.
      std::shared_ptr<const std::string> text;
      {
        std::lock_guard<std::mutex> lock(self->stats_mu_);
        auto found = self->stats_snapshots_.find(fi->fh);
        if (found != self->stats_snapshots_.end()) text = found->second;
      }
      if (text == nullptr) {
        fuse_reply_err(req, EBADF);
        return;
      }
      const size_t from = std::min<size_t>(static_cast<size_t>(off), text->size());
      fuse_reply_buf(req, text->data() + from, std::min(size, text->size() - from));
      return;
    }
    const long i = self->ImageOf(ino);
    if (i < 0) {
      fuse_reply_err(req, ENOENT);
      return;
    }
    self->reads_waiting_++;
    std::vector<uint8_t> buf(size);
    std::vector<DecodedBlock> decoded;
    Result<size_t> n = self->images_[i].image->Read(static_cast<uint64_t>(off), buf, &decoded);
    self->reads_waiting_--;
    if (!n) {
      // Corrupt or unreadable: never an answer with wrong bytes.
      fuse_reply_err(req, n.error().code() == StatusCode::kCorrupt ? EIO : (n.error().sys_errno() ? n.error().sys_errno() : EIO));
      return;
    }
    // Counted before the reply wakes the reader: whoever waits for the stores to settle sees them coming.
    self->counters_[i].blocks_queued += decoded.size();
    fuse_reply_buf(req, reinterpret_cast<const char*>(buf.data()), *n);
    // After the reply: the pages it covers are unlocked, and the store may take the page locks it needs.
    if (!decoded.empty()) {
      std::lock_guard<std::mutex> lock(self->mu_);
      for (auto& d : decoded) {
        self->store_queue_.push_back(StoreJob{static_cast<size_t>(i), std::move(d), static_cast<uint64_t>(off),
                                              static_cast<uint64_t>(off) + *n});
      }
      self->cv_.notify_all();
    }
  }

  static void OnWrite(fuse_req_t req, fuse_ino_t ino, const char*, size_t, off_t, fuse_file_info*) {
    Impl* self = Self(req);
    if (long i = self->ImageOf(ino); i >= 0) self->counters_[i].refused_writes++;
    fuse_reply_err(req, EROFS);
  }

  static void OnFallocate(fuse_req_t req, fuse_ino_t ino, int, off_t, off_t, fuse_file_info*) {
    // Hole punching (QEMU's ram_block_discard_range) would take pages away from every clone.
    Impl* self = Self(req);
    if (long i = self->ImageOf(ino); i >= 0) self->counters_[i].refused_writes++;
    fuse_reply_err(req, EOPNOTSUPP);
  }

  static void OnOpendir(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
    if (ino != kRootIno) {
      fuse_reply_err(req, ENOTDIR);
      return;
    }
    fuse_reply_open(req, fi);
  }

  static void OnReaddir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, fuse_file_info*) {
    Impl* self = Self(req);
    if (ino != kRootIno) {
      fuse_reply_err(req, ENOTDIR);
      return;
    }
    std::vector<std::pair<std::string, fuse_ino_t>> entries = {{".", kRootIno}, {"..", kRootIno}};
    for (size_t i = 0; i < self->images_.size(); ++i) entries.push_back({self->images_[i].name, kFirstImageIno + i});
    entries.push_back({kStatsName, self->StatsIno()});
    std::vector<char> buf(size);
    size_t used = 0;
    for (size_t e = static_cast<size_t>(off); e < entries.size(); ++e) {
      struct stat st;
      self->Attr(entries[e].second, &st);
      const size_t need = fuse_add_direntry(req, buf.data() + used, size - used, entries[e].first.c_str(), &st,
                                            static_cast<off_t>(e + 1));
      if (need > size - used) break;
      used += need;
    }
    fuse_reply_buf(req, buf.data(), used);
  }

  // Stores decoded blocks' pages in the page cache, one run at a time. On its own thread: a store waits for the
  // page locks of reads in flight, which the session's threads answer meanwhile.
  void StoreLoop() {
    storer_tid_ = gettid();
    if (options_.pin_page_cache) {
      for (size_t i = 0; i < images_.size(); ++i) {
        std::string error;
        if (!pins_[i].Map(options_.mountpoint + "/" + images_[i].name, images_[i].image->size(), &error)) {
          std::fprintf(stderr, "image server: %s; its pages are not pinned\n", error.c_str());
        }
      }
    }
    for (;;) {
      StoreJob job;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return stopping_ || !store_queue_.empty(); });
        if (stopping_) return;
        job = std::move(store_queue_.front());
        store_queue_.pop_front();
      }
      Store(job);
      counters_[job.file].blocks_stored++;
    }
  }

  void Store(const StoreJob& job) {
    const fuse_ino_t ino = kFirstImageIno + job.file;
    std::vector<uint8_t> run_bytes;
    for (const auto& run : job.block.runs) {
      // Pages the read answered are in the page cache already; store the rest in stretches around them.
      uint64_t p = 0;
      while (p < run.slots.size()) {
        const uint64_t at = run.image_offset + p * kPage;
        if (at >= job.skip_from && at < job.skip_to) {
          ++p;
          continue;
        }
        uint64_t q = p;
        run_bytes.clear();
        while (q < run.slots.size()) {
          const uint64_t here = run.image_offset + q * kPage;
          if (here >= job.skip_from && here < job.skip_to) break;
          const uint8_t* src = job.block.data->data() + uint64_t{run.slots[q]} * kPage;
          run_bytes.insert(run_bytes.end(), src, src + kPage);
          ++q;
        }
        fuse_bufvec bufv = FUSE_BUFVEC_INIT(run_bytes.size());
        bufv.buf[0].mem = run_bytes.data();
        const int rc = fuse_lowlevel_notify_store(mount_.session(), ino, static_cast<off_t>(at), &bufv,
                                                  static_cast<fuse_buf_copy_flags>(0));
        if (rc == 0) {
          counters_[job.file].pages_stored += q - p;
        } else {
          counters_[job.file].store_errors++;
          last_store_error_ = -rc;
          if (getenv("HLT_DEBUG_STORE")) fprintf(stderr, "notify_store ino %lu off %llu len %zu: %s\n", (unsigned long)ino, (unsigned long long)at, run_bytes.size(), strerror(-rc));
        }
        p = q;
      }
    }
    // Every page of the block, the ones the read answered too: no clone may have mapped them yet.
    for (const auto& run : job.block.runs) pins_[job.file].Pin(run.image_offset, run.slots.size() * kPage);
  }

  // Goes through each image's blocks in restore order, decoding and storing those not decoded yet, at the rate
  // limit; while a read waits it steps aside.
  void PrefetchLoop() {
    // The kernel only takes pages for an inode it knows: hold each file open while prefetching into it.
    prefetcher_tid_ = gettid();
    for (const auto& image : images_) {
      pinned_fds_.push_back(open((options_.mountpoint + "/" + image.name).c_str(), O_RDONLY | O_CLOEXEC));
    }
    const double rate = static_cast<double>(options_.prefetch_bytes_per_s);
    auto start = std::chrono::steady_clock::now();
    uint64_t bytes = 0;
    for (size_t i = 0; i < images_.size(); ++i) {
      for (uint32_t b : images_[i].image->RestoreOrder()) {
        for (;;) {
          {
            std::unique_lock<std::mutex> lock(mu_);
            if (stopping_) return;
          }
          const double allowed_s = static_cast<double>(bytes) / rate;
          const double elapsed_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
          if (reads_waiting_.load() == 0 && elapsed_s >= allowed_s && store_queue_size() < 8) break;
          std::this_thread::sleep_for(std::chrono::milliseconds(1));
        }
        if (images_[i].image->WasDecoded(b)) continue;
        Result<DecodedBlock> d = images_[i].image->Decode(b);
        if (!d) continue;  // a read of its pages will fail loudly; the prefetcher goes on
        bytes += d->pages() * kPage;
        counters_[i].blocks_prefetched++;
        counters_[i].blocks_queued++;
        std::lock_guard<std::mutex> lock(mu_);
        store_queue_.push_back(StoreJob{i, std::move(*d), 0, 0});
        cv_.notify_all();
      }
    }
  }

  size_t store_queue_size() {
    std::lock_guard<std::mutex> lock(mu_);
    return store_queue_.size();
  }

  void Shutdown() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stopping_) return;
      stopping_ = true;
      cv_.notify_all();
    }
    if (prefetcher_.joinable()) prefetcher_.join();
    if (storer_.joinable()) storer_.join();
    for (auto& pin : pins_) pin.Unmap();
    for (int fd : pinned_fds_) {
      if (fd >= 0) close(fd);
    }
    pinned_fds_.clear();
    mount_.Unmount();
  }

  std::vector<ServedImage> images_;
  ImageServerOptions options_;
  std::vector<FileCounters> counters_;
  FuseMount mount_;
  std::thread storer_, prefetcher_;
  std::vector<int> pinned_fds_;  // the prefetcher's opens of its own files
  std::vector<PageCachePin> pins_;  // one per image; only the store thread pins
  std::atomic<pid_t> prefetcher_tid_{-1};  // FUSE names the thread that opens
  std::atomic<pid_t> storer_tid_{-1};
  std::atomic<int> reads_waiting_{0};
  std::atomic<int> last_store_error_{0};
  std::mutex stats_mu_;  // the .stats documents of the opens not yet released, by file handle
  std::map<uint64_t, std::shared_ptr<const std::string>> stats_snapshots_;
  uint64_t last_stats_handle_ = 0;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<StoreJob> store_queue_;
  bool stopping_ = false;
};

Result<std::unique_ptr<FuseImageServer>> FuseImageServer::Start(std::vector<ServedImage> images,
                                                                ImageServerOptions options) {
  for (size_t i = 0; i < images.size(); ++i) {
    const std::string& n = images[i].name;
    if (n.empty() || n.find('/') != std::string::npos || n == "." || n == ".." || n == kStatsName ||
        images[i].image == nullptr) {
      return Status::InvalidArgument("image name \"" + n + "\": expected a file name (no '/', not .stats)");
    }
    for (size_t j = 0; j < i; ++j) {
      if (images[j].name == n) return Status::InvalidArgument("image name \"" + n + "\" given twice");
    }
  }
  auto impl = std::make_unique<Impl>(std::move(images), std::move(options));
  HLT_RETURN_IF_ERROR(impl->Start());
  return std::unique_ptr<FuseImageServer>(new FuseImageServer(std::move(impl)));
}

FuseImageServer::FuseImageServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
FuseImageServer::~FuseImageServer() = default;
uint64_t FuseImageServer::open_handles() const { return impl_->open_handles(); }
Status FuseImageServer::Stop(bool force) { return impl_->Stop(force); }
void FuseImageServer::Wait() { impl_->Wait(); }
std::vector<ServedImageStats> FuseImageServer::Stats() const { return impl_->Stats(); }
std::string FuseImageServer::StatsJson() const { return impl_->StatsJson(); }

}  // namespace halite::image_server
