// S3 requests over HTTP(S) with libcurl: SigV4 signing, a pool of reusable connections, ranged GETs many in
// flight, and retries with backoff. The only part of the tree that includes curl.h is s3_http.cc.
//
// Configuration comes from the environment the way AWS tools read it: AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY,
// AWS_SESSION_TOKEN (optional), AWS_REGION (or AWS_DEFAULT_REGION; default us-east-1), AWS_ENDPOINT_URL (or
// AWS_ENDPOINT_URL_S3). With an endpoint override, objects are addressed path-style (ENDPOINT/BUCKET/KEY), which
// every non-AWS server (radosgw, MinIO, ...) accepts; without one, virtual-hosted AWS style.
#ifndef HALITE_OBJSTORE_S3_HTTP_H_
#define HALITE_OBJSTORE_S3_HTTP_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "halite/status.h"
#include "halite/storage.h"
#include "objstore/demand_gate.h"
#include "objstore/read_coalescing.h"

namespace halite::objstore {

struct S3Config {
  std::string endpoint;  // "http://127.0.0.1:7480"; empty: AWS
  std::string region = "us-east-1";
  std::string access_key;
  std::string secret_key;
  std::string session_token;
  int max_attempts = 4;          // per request, for transient failures only (5xx, 429, timeouts, resets)
  int first_backoff_ms = 50;     // doubled after each failed attempt
  int max_in_flight = 8;         // ranged GETs in flight per GetRanges call
  LanePolicy lanes;              // background reads against demand reads (demand_gate.h)
  long connect_timeout_ms = 5000;
  long stall_timeout_s = 15;     // a transfer moving no byte for this long is a timeout
};

// Reads the configuration from the environment. Errors: kInvalidArgument when the credentials are missing.
Result<S3Config> S3ConfigFromEnv();

struct HttpResponse {
  long status = 0;
  std::string body;     // kept for small answers (XML); ignored for ranged GETs
  std::string etag;     // the ETag header, quotes included
  uint64_t range_total = 0;  // the object's size from a Content-Range header ("bytes A-B/TOTAL"), 0 without one
  size_t max_body = 64 * 1024;
  uint64_t content_length = 0;
};

// Thread-safe: requests may be sent from several threads at once; idle connections are shared through a pool.
class S3Client {
 public:
  explicit S3Client(S3Config config);
  ~S3Client();
  S3Client(const S3Client&) = delete;
  S3Client& operator=(const S3Client&) = delete;

  const S3Config& config() const { return config_; }
  // The URL of an object, `query` (already canonical: sorted, encoded, "name=value&...") appended when not empty.
  std::string ObjectUrl(const std::string& bucket, const std::string& key, const std::string& query = "") const;

  // Sends one request (GET, HEAD, PUT, POST, DELETE) with `body`, retrying transient failures. Any HTTP answer
  // that is not a transient failure is returned in `out` (the caller judges 4xx); its body is kept up to 64 KiB,
  // or up to `max_body` bytes when given. `range` ("A-B" or "-N") asks for part of the object. Errors: kIoError
  // naming `what` when no answer came or the last attempt was still a transient failure.
  Status Send(const std::string& method, const std::string& url, std::span<const uint8_t> body, HttpResponse* out,
              const std::string& what, const std::string& range = "", size_t max_body = 0);

  // One ranged GET per entry of `reads`, config().max_in_flight at a time on pooled connections; each fills the
  // buffers of its parts (the bytes between them are dropped) and sets their status; returns the first error.
  // `name` (the s3:// URI) and the offset are named in errors. A demand read goes out at once; background reads
  // go as the server's DemandGate lets them, cut into pieces of at most its policy's background_piece bytes.
  Status GetRanges(const std::string& url, std::span<const CoalescedRead> reads, const std::string& name,
                   ReadLane lane = ReadLane::kDemand);

  // The gate this client's reads go through (shared with every client of the same endpoint in this process).
  const DemandGate& gate() const { return *gate_; }

  // Requests sent so far (every attempt of Send and GetRanges) and the bytes received by ranged GETs.
  ReadCounters counters() const;

  // The key of the DemandGate of the server `config` reaches (its endpoint, or the AWS region).
  static std::string GateKey(const S3Config& config);

  // Percent-encodes `s` for a URL path or query (RFC 3986 unreserved characters kept; '/' kept when asked).
  static std::string Encode(const std::string& s, bool keep_slash);

 private:
  void* AcquireHandle();
  void ReleaseHandle(void* handle);
  void Prepare(void* handle, const std::string& method, const std::string& url, void* headers);
  struct Session;
  class RangeFetch;
  Session* AcquireSession();
  void ReleaseSession(Session* session);

  S3Config config_;
  std::string sigv4_;  // "aws:amz:REGION:s3"
  std::mutex mu_;
  std::vector<void*> idle_;  // CURL* easy handles for Send, each keeping its connection alive
  std::vector<Session*> idle_sessions_;  // for GetRanges
  std::atomic<uint64_t> requests_{0};
  std::atomic<uint64_t> bytes_received_{0};
  std::shared_ptr<DemandGate> gate_;
};

}  // namespace halite::objstore

#endif  // HALITE_OBJSTORE_S3_HTTP_H_
