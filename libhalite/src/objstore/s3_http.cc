// The only file that includes curl.h (CONTRIBUTING.md, dependency rule).
#include "objstore/s3_http.h"

#include <curl/curl.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstring>
#include <cstdlib>
#include <deque>
#include <optional>
#include <random>
#include <thread>

#include <fmt/format.h>

namespace halite::objstore {

namespace {

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::string(v) : std::string();
}

// Failures worth another attempt: the server was busy or broken (5xx, 429 SlowDown) or the network dropped the
// request. A 4xx is the request's own fault and is never retried.
bool TransientCurl(CURLcode c) {
  switch (c) {
    case CURLE_COULDNT_CONNECT:
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_OPERATION_TIMEDOUT:
    case CURLE_SEND_ERROR:
    case CURLE_RECV_ERROR:
    case CURLE_GOT_NOTHING:
    case CURLE_PARTIAL_FILE:
    case CURLE_HTTP2:
    case CURLE_HTTP2_STREAM:
      return true;
    default:
      return false;
  }
}
bool TransientHttp(long status) { return status >= 500 || status == 429; }

void Backoff(const S3Config& c, int attempt) {
  thread_local std::minstd_rand rng(std::random_device{}());
  const int base = c.first_backoff_ms << std::min(attempt - 1, 10);
  const int jitter = base / 4 > 0 ? static_cast<int>(rng() % static_cast<unsigned>(base / 2)) - base / 4 : 0;
  std::this_thread::sleep_for(std::chrono::milliseconds(base + jitter));
}

// Short text of an HTTP error answer: S3 puts the reason in <Code> and <Message>.
std::string ErrorText(long status, const std::string& body) {
  std::string code;
  const auto b = body.find("<Code>");
  const auto e = body.find("</Code>");
  if (b != std::string::npos && e != std::string::npos && e > b) code = " " + body.substr(b + 6, e - b - 6);
  return fmt::format("HTTP {}{}", status, code);
}

size_t DiscardingBody(char* data, size_t size, size_t n, void* user) {
  auto* out = static_cast<std::string*>(user);
  const size_t len = size * n;
  if (out->size() < 64 * 1024) out->append(data, std::min(len, 64 * 1024 - out->size()));
  return len;
}

size_t ResponseBody(char* data, size_t size, size_t n, void* user) {
  auto* out = static_cast<HttpResponse*>(user);
  const size_t len = size * n;
  if (out->body.size() < out->max_body) out->body.append(data, std::min(len, out->max_body - out->body.size()));
  return len;
}

size_t HeaderLine(char* data, size_t size, size_t n, void* user) {
  auto* out = static_cast<HttpResponse*>(user);
  const size_t len = size * n;
  std::string_view line(data, len);
  if (line.size() > 5 && (line.substr(0, 5) == "ETag:" || line.substr(0, 5) == "etag:")) {
    line.remove_prefix(5);
    while (!line.empty() && (line.front() == ' ' || line.front() == '\t')) line.remove_prefix(1);
    while (!line.empty() && (line.back() == '\r' || line.back() == '\n' || line.back() == ' ')) line.remove_suffix(1);
    out->etag = std::string(line);
  } else if (line.size() > 14 && (line.substr(0, 14) == "Content-Range:" || line.substr(0, 14) == "content-range:")) {
    const auto slash = line.rfind('/');
    if (slash != std::string_view::npos) out->range_total = std::strtoull(std::string(line.substr(slash + 1)).c_str(), nullptr, 10);
  }
  return len;
}

// One ranged GET: bytes [offset, offset + length) of a joined read, scattered into the buffers of its parts. A
// background read may be cut into several such pieces (DemandGate::Turn::TryStart says how large each may be).
struct Transfer {
  const CoalescedRead* read = nullptr;
  uint64_t offset = 0;
  uint64_t length = 0;
  std::string range;  // "A-B"
  CURL* handle = nullptr;
  size_t got = 0;    // body bytes received (the position in the piece)
  size_t part = 0;   // the first part not completely filled yet
  bool overflow = false;
  std::string error_body;
  int attempts = 0;
};

size_t RangeBody(char* data, size_t size, size_t n, void* user) {
  auto* t = static_cast<Transfer*>(user);
  const size_t len = size * n;
  long status = 0;
  curl_easy_getinfo(t->handle, CURLINFO_RESPONSE_CODE, &status);
  if (status != 206 && status != 200) return DiscardingBody(data, size, n, &t->error_body);
  if (t->got + len > t->length) {
    t->overflow = true;
    return 0;  // aborts the transfer: the server sent more than the range
  }
  // Bytes [got, got + len) of the piece: copy what falls in a part, skip the gaps between parts.
  const std::vector<ReadRequest*>& parts = t->read->parts;
  uint64_t at = t->offset + t->got;
  const uint64_t end = at + len;
  while (at < end && t->part < parts.size()) {
    ReadRequest* r = parts[t->part];
    const uint64_t r_end = r->offset + r->buffer.size();
    if (at >= r_end) {
      ++t->part;
      continue;
    }
    if (at < r->offset) {
      at = std::min(end, r->offset);  // a gap
      continue;
    }
    const uint64_t n_copy = std::min(end, r_end) - at;
    std::memcpy(r->buffer.data() + (at - r->offset), data + (at - (t->offset + t->got)), n_copy);
    at += n_copy;
  }
  t->got += len;
  return len;
}

std::once_flag global_init;

}  // namespace

Result<S3Config> S3ConfigFromEnv() {
  S3Config c;
  c.access_key = Env("AWS_ACCESS_KEY_ID");
  c.secret_key = Env("AWS_SECRET_ACCESS_KEY");
  c.session_token = Env("AWS_SESSION_TOKEN");
  if (std::string r = Env("AWS_REGION"); !r.empty()) {
    c.region = r;
  } else if (std::string d = Env("AWS_DEFAULT_REGION"); !d.empty()) {
    c.region = d;
  }
  c.endpoint = Env("AWS_ENDPOINT_URL_S3");
  if (c.endpoint.empty()) c.endpoint = Env("AWS_ENDPOINT_URL");
  while (!c.endpoint.empty() && c.endpoint.back() == '/') c.endpoint.pop_back();
  if (c.access_key.empty() || c.secret_key.empty()) {
    return Status::InvalidArgument("s3: AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY must be set to reach an s3:// URI");
  }
  return c;
}

// A multi handle keeps its own connection cache: a batch borrows a whole session (the multi handle and its easy
// handles) so connections survive from one batch to the next without sharing a cache between threads.
struct S3Client::Session {
  CURLM* multi = nullptr;
  std::vector<CURL*> free_handles;
};

S3Client::S3Client(S3Config config) : config_(std::move(config)) {
  std::call_once(global_init, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
  sigv4_ = "aws:amz:" + config_.region + ":s3";
  gate_ = DemandGate::ForServer(GateKey(config_), config_.lanes);
}

S3Client::~S3Client() {
  for (void* h : idle_) curl_easy_cleanup(static_cast<CURL*>(h));
  for (Session* s : idle_sessions_) {
    for (CURL* h : s->free_handles) curl_easy_cleanup(h);
    curl_multi_cleanup(s->multi);
    delete s;
  }
}

std::string S3Client::GateKey(const S3Config& config) {
  return "s3 " + (config.endpoint.empty() ? "aws " + config.region : config.endpoint);
}

std::string S3Client::Encode(const std::string& s, bool keep_slash) {
  std::string out;
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~' || (keep_slash && c == '/')) {
      out.push_back(static_cast<char>(c));
    } else {
      out += fmt::format("%{:02X}", c);
    }
  }
  return out;
}

std::string S3Client::ObjectUrl(const std::string& bucket, const std::string& key, const std::string& query) const {
  std::string url = config_.endpoint.empty()
                        ? fmt::format("https://{}.s3.{}.amazonaws.com/{}", bucket, config_.region, Encode(key, true))
                        : fmt::format("{}/{}/{}", config_.endpoint, Encode(bucket, false), Encode(key, true));
  if (!query.empty()) url += "?" + query;
  return url;
}

void* S3Client::AcquireHandle() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!idle_.empty()) {
      void* h = idle_.back();
      idle_.pop_back();
      return h;
    }
  }
  return curl_easy_init();
}

void S3Client::ReleaseHandle(void* handle) {
  std::lock_guard<std::mutex> lock(mu_);
  idle_.push_back(handle);
}

void S3Client::Prepare(void* handle, const std::string& method, const std::string& url, void* headers) {
  CURL* h = static_cast<CURL*>(handle);
  curl_easy_reset(h);  // keeps the connection
  curl_easy_setopt(h, CURLOPT_URL, url.c_str());
  curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(h, CURLOPT_AWS_SIGV4, sigv4_.c_str());
  // USERNAME/PASSWORD rather than USERPWD: a secret may contain a colon.
  curl_easy_setopt(h, CURLOPT_USERNAME, config_.access_key.c_str());
  curl_easy_setopt(h, CURLOPT_PASSWORD, config_.secret_key.c_str());
  curl_easy_setopt(h, CURLOPT_HTTPHEADER, static_cast<curl_slist*>(headers));
  curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, config_.connect_timeout_ms);
  curl_easy_setopt(h, CURLOPT_LOW_SPEED_LIMIT, 1L);
  curl_easy_setopt(h, CURLOPT_LOW_SPEED_TIME, config_.stall_timeout_s);
  // HTTP/1.1: curl 7.88 reuses cleartext HTTP/2 connections wrongly, and radosgw speaks 1.1 anyway.
  curl_easy_setopt(h, CURLOPT_HTTP_VERSION, static_cast<long>(CURL_HTTP_VERSION_1_1));
  if (method == "HEAD") {
    curl_easy_setopt(h, CURLOPT_NOBODY, 1L);
  } else if (method != "GET") {
    curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, method.c_str());
  }
}

namespace {
// Headers every request carries. radosgw refuses (403) a SigV4 request without x-amz-content-sha256.
curl_slist* BaseHeaders(const S3Config& c, bool with_body) {
  curl_slist* h = curl_slist_append(nullptr, "x-amz-content-sha256: UNSIGNED-PAYLOAD");
  // No "Expect:" to suppress 100-continue: curl 7.88 signs the header it then leaves out (403 SignatureDoesNotMatch).
  if (with_body) h = curl_slist_append(h, "Content-Type: application/octet-stream");
  if (!c.session_token.empty()) h = curl_slist_append(h, ("x-amz-security-token: " + c.session_token).c_str());
  return h;
}
}  // namespace

Status S3Client::Send(const std::string& method, const std::string& url, std::span<const uint8_t> body,
                      HttpResponse* out, const std::string& what, const std::string& range, size_t max_body) {
  const bool with_body = method == "PUT" || method == "POST";
  curl_slist* headers = BaseHeaders(config_, with_body);
  CURL* h = static_cast<CURL*>(AcquireHandle());
  Status result;
  for (int attempt = 1;; ++attempt) {
    *out = HttpResponse{};
    if (max_body) out->max_body = max_body;
    Prepare(h, method, url, headers);
    requests_.fetch_add(1, std::memory_order_relaxed);
    if (!range.empty()) curl_easy_setopt(h, CURLOPT_RANGE, range.c_str());
    if (with_body) {
      curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(body.size()));
      curl_easy_setopt(h, CURLOPT_POSTFIELDS, body.empty() ? "" : reinterpret_cast<const char*>(body.data()));
    }
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, ResponseBody);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, out);
    curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, HeaderLine);
    curl_easy_setopt(h, CURLOPT_HEADERDATA, out);
    const CURLcode c = curl_easy_perform(h);
    std::string reason;
    bool transient = false;
    if (c != CURLE_OK) {
      reason = curl_easy_strerror(c);
      transient = TransientCurl(c);
    } else {
      curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &out->status);
      curl_off_t len = 0;
      curl_easy_getinfo(h, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &len);
      out->content_length = len > 0 ? static_cast<uint64_t>(len) : 0;
      if (method == "GET") bytes_received_.fetch_add(out->body.size(), std::memory_order_relaxed);
      if (!TransientHttp(out->status)) break;
      reason = ErrorText(out->status, out->body);
      transient = true;
    }
    if (!transient || attempt >= config_.max_attempts) {
      result = Status::IoError(fmt::format("{}: {} (attempt {} of {})", what, reason, attempt, config_.max_attempts))
                   .set_retryable(transient);
      break;
    }
    Backoff(config_, attempt);
  }
  ReleaseHandle(h);
  curl_slist_free_all(headers);
  return result;
}

S3Client::Session* S3Client::AcquireSession() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!idle_sessions_.empty()) {
      Session* s = idle_sessions_.back();
      idle_sessions_.pop_back();
      return s;
    }
  }
  auto* s = new Session;
  s->multi = curl_multi_init();
  return s;
}

void S3Client::ReleaseSession(Session* session) {
  std::lock_guard<std::mutex> lock(mu_);
  idle_sessions_.push_back(session);
}

ReadCounters S3Client::counters() const {
  return ReadCounters{requests_.load(std::memory_order_relaxed), bytes_received_.load(std::memory_order_relaxed)};
}

// One GetRanges call: its pieces, on one borrowed session, demand reads at once, background ones as the gate
// lets them start.
class S3Client::RangeFetch {
 public:
  RangeFetch(S3Client& client, const std::string& url, std::span<const CoalescedRead> reads, const std::string& name,
             ReadLane lane)
      : client_(client), url_(url), reads_(reads), name_(name), lane_(lane),
        headers_(BaseHeaders(client.config_, false)), session_(client.AcquireSession()) {
    if (lane_ == ReadLane::kBackground) turn_.emplace(*client_.gate_);
    for (const CoalescedRead& r : reads_) {
      for (ReadRequest* p : r.parts) p->status = Status::Ok();
    }
  }
  ~RangeFetch() {
    client_.ReleaseSession(session_);
    curl_slist_free_all(headers_);
  }

  Status Run() {
    std::optional<DemandGate::Demand> demand;
    if (lane_ == ReadLane::kDemand && !reads_.empty()) {
      const CoalescedRead& last = reads_.back();
      demand.emplace(*client_.gate_, reads_.front().offset, last.offset + last.length - reads_.front().offset);
    }
    for (;;) {
      StartWhatMayStart();
      if (in_flight_ == 0) {
        if (Done() || !turn_) break;  // a demand read starts all it can at once
        turn_->Wait(std::chrono::seconds(1));  // held by the gate with nothing of ours in flight
        continue;
      }
      int running = 0;
      curl_multi_perform(session_->multi, &running);
      const bool progressed = CollectFinished();
      if (!progressed && running > 0) {
        // Pieces the gate holds are looked at again soon (the gate's changes wake nobody here); otherwise wait
        // for the network.
        const bool held = turn_ && !Done();
        curl_multi_poll(session_->multi, nullptr, 0, held ? int(kGatePoll.count()) : 1000, nullptr);
      }
    }
    return first_;
  }

 private:
  // Background pieces held by the gate are looked at again after at most this long.
  static constexpr std::chrono::milliseconds kGatePoll{1};

  bool Done() const { return next_read_ >= reads_.size(); }

  void StartWhatMayStart() {
    while (!Done() && in_flight_ < client_.config_.max_in_flight) {
      const CoalescedRead& r = reads_[next_read_];
      if (r.length == 0) {
        ++next_read_;
        continue;
      }
      uint64_t most = r.length - next_offset_;
      if (turn_) {
        const uint64_t allowed = turn_->TryStart();
        if (allowed == 0) break;
        most = std::min(most, allowed);
      }
      Transfer& t = transfers_.emplace_back();
      t.read = &r;
      t.offset = r.offset + next_offset_;
      t.length = most;
      t.range = fmt::format("{}-{}", t.offset, t.offset + t.length - 1);
      next_offset_ += most;
      if (next_offset_ == r.length) {
        ++next_read_;
        next_offset_ = 0;
      }
      if (session_->free_handles.empty()) {
        t.handle = curl_easy_init();
      } else {
        t.handle = session_->free_handles.back();
        session_->free_handles.pop_back();
      }
      ++in_flight_;
      Start(t);
    }
    if (Done() && turn_) turn_->Finished();
    UpdateFrontier();
  }

  // The gate's view of where this background read is: every byte of it until all have arrived (the reader
  // claims a batch's blocks once the whole batch is in, so until then a fault on any of them reads it itself).
  void UpdateFrontier() {
    if (!turn_ || reads_.empty()) return;
    const CoalescedRead& last = reads_.back();
    if (Done() && in_flight_ == 0) {
      turn_->SetFrontier(0, 0);
    } else {
      turn_->SetFrontier(reads_.front().offset, last.offset + last.length);
    }
  }

  void Start(Transfer& t) {
    t.got = 0;
    t.overflow = false;
    t.error_body.clear();
    ++t.attempts;
    // The first part the piece touches: the scatter starts there.
    const std::vector<ReadRequest*>& parts = t.read->parts;
    t.part = 0;
    while (t.part < parts.size() && parts[t.part]->offset + parts[t.part]->buffer.size() <= t.offset) ++t.part;
    client_.requests_.fetch_add(1, std::memory_order_relaxed);
    client_.Prepare(t.handle, "GET", url_, headers_);
    curl_easy_setopt(t.handle, CURLOPT_RANGE, t.range.c_str());
    curl_easy_setopt(t.handle, CURLOPT_WRITEFUNCTION, RangeBody);
    curl_easy_setopt(t.handle, CURLOPT_WRITEDATA, &t);
    curl_easy_setopt(t.handle, CURLOPT_PRIVATE, &t);
    curl_multi_add_handle(session_->multi, t.handle);
  }

  // A failed piece fails the parts it covers (the first error each part met stays).
  void Finish(Transfer& t, const Status& s) {
    if (!s.ok()) {
      for (ReadRequest* r : t.read->parts) {
        const bool overlaps = r->offset < t.offset + t.length && t.offset < r->offset + r->buffer.size();
        if (overlaps && r->status.ok()) r->status = s;
      }
      if (first_.ok()) first_ = s;
    }
    session_->free_handles.push_back(t.handle);
    t.handle = nullptr;
    --in_flight_;
    if (turn_) turn_->End();
    UpdateFrontier();
  }

  // Handles the transfers that ended: done, retried, or failed. True when any ended.
  bool CollectFinished() {
    bool progressed = false;
    int queued = 0;
    while (CURLMsg* msg = curl_multi_info_read(session_->multi, &queued)) {
      if (msg->msg != CURLMSG_DONE) continue;
      progressed = true;
      Transfer* t = nullptr;
      curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, reinterpret_cast<char**>(&t));
      const CURLcode c = msg->data.result;
      curl_multi_remove_handle(session_->multi, t->handle);
      long status = 0;
      curl_easy_getinfo(t->handle, CURLINFO_RESPONSE_CODE, &status);
      if (status == 206 || status == 200) client_.bytes_received_.fetch_add(t->got, std::memory_order_relaxed);
      std::string reason;
      bool transient = false;
      if (t->overflow) {
        reason = fmt::format("the server sent more than the {} bytes asked for", t->length);
      } else if (c != CURLE_OK) {
        reason = curl_easy_strerror(c);
        transient = TransientCurl(c);
      } else if ((status == 206 || (status == 200 && t->offset == 0)) && t->got == t->length) {
        Finish(*t, Status::Ok());
        continue;
      } else if (status == 206 || status == 200) {
        reason = fmt::format("HTTP {} with {} bytes", status, t->got);
        transient = true;  // a short body is a dropped connection
      } else {
        reason = ErrorText(status, t->error_body);
        transient = TransientHttp(status);
      }
      const int max_attempts = client_.config_.max_attempts;
      if (transient && t->attempts < max_attempts) {
        Backoff(client_.config_, t->attempts);
        Start(*t);
        continue;
      }
      const CoalescedRead& r = *t->read;
      const std::string blocks = r.parts.size() == 1 ? "" : fmt::format(" ({} reads joined)", r.parts.size());
      Finish(*t, Status::IoError(fmt::format("{}: ranged GET of {} bytes at offset {:#x}{}: {} (attempt {} of {})",
                                             name_, t->length, t->offset, blocks, reason, t->attempts, max_attempts))
                     .set_retryable(transient));
    }
    return progressed;
  }

  S3Client& client_;
  const std::string& url_;
  std::span<const CoalescedRead> reads_;
  const std::string& name_;
  const ReadLane lane_;
  curl_slist* headers_;
  Session* session_;
  std::optional<DemandGate::Turn> turn_;  // background reads only
  std::deque<Transfer> transfers_;        // stable addresses: curl holds pointers to them
  size_t next_read_ = 0;                  // the read whose next piece starts next
  uint64_t next_offset_ = 0;              // within it
  int in_flight_ = 0;
  Status first_;
};

Status S3Client::GetRanges(const std::string& url, std::span<const CoalescedRead> reads, const std::string& name,
                           ReadLane lane) {
  RangeFetch fetch(*this, url, reads, name, lane);
  return fetch.Run();
}

}  // namespace halite::objstore
