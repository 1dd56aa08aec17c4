// s3://BUCKET/KEY behind RandomAccessFile (ranged GETs) and AppendSink (multipart upload).
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "objstore/object_store.h"
#include "objstore/part_buffered_sink.h"
#include "objstore/s3_http.h"

namespace halite::objstore {

namespace {

// S3 wants every part but the last to be at least 5 MiB and allows 10000 parts: parts grow after every 1000 so
// an upload can reach ~80 TB while small checkpoints still use 8 MiB parts.
constexpr size_t kFirstPartSize = 8u << 20;
constexpr size_t kPartsPerSizeStep = 1000;

std::string Tag(const std::string& xml, const std::string& tag) {
  const std::string open = "<" + tag + ">";
  const std::string close = "</" + tag + ">";
  const auto b = xml.find(open);
  if (b == std::string::npos) return {};
  const auto e = xml.find(close, b + open.size());
  if (e == std::string::npos) return {};
  return xml.substr(b + open.size(), e - b - open.size());
}

Status HttpError(const std::string& what, const HttpResponse& r) {
  std::string code = Tag(r.body, "Code");
  std::string msg = Tag(r.body, "Message");
  std::string detail = code.empty() ? "" : " " + code + (msg.empty() ? "" : " (" + msg + ")");
  if (r.status == 404 && code.empty()) detail = " (no such object)";
  Status s = r.status == 404 ? Status::NotFound(fmt::format("{}: HTTP {}{}", what, r.status, detail))
                             : Status::IoError(fmt::format("{}: HTTP {}{}", what, r.status, detail));
  return s;
}

// The bytes fetched at open: the end of the object, where the footer and (usually) the whole index are.
constexpr size_t kTailSize = 256 * 1024;

// How a batch is read (bench/results/2026-11-26-objstore.md): a ranged GET from radosgw costs ~2-4 ms and server
// CPU whatever its size, so a reader streaming blocks asks for 8 MiB at a time, sent as requests of 256 KiB to
// 1 MiB (8 in flight), neighbouring blocks joined; a gap of up to 64 KiB between two of them (a block loaded
// already) is read and dropped rather than paying another request. Batches of 2, 4, 8 and 16 MiB replayed the
// bench's trace in 0.74-0.94, 0.55-0.69, 0.43-0.93 and 0.47-0.57 s on the loaded development machine: 2 MiB is
// too small, beyond that the machine's noise decides; 8 MiB keeps a restore's batch memory at 16 MiB (one batch
// decoded, the next in flight).
constexpr uint64_t kBatchBytes = 8u << 20;
constexpr uint64_t kMinJoinedRequest = 256u << 10;
constexpr uint64_t kMaxJoinedRequest = 1u << 20;
constexpr uint64_t kMaxJoinGap = 64u << 10;

class S3File final : public RandomAccessFile {
 public:
  S3File(std::string name, std::shared_ptr<S3Client> client, std::string url, uint64_t size, std::string tail)
      : name_(std::move(name)), client_(std::move(client)), url_(std::move(url)), size_(size),
        tail_(std::move(tail)), tail_offset_(size - tail_.size()) {}
  const std::string& name() const override { return name_; }
  uint64_t size() const override { return size_; }

  // A single read is someone waiting for it (a fault's block): the demand lane. A batch streams in the background
  // and yields to demand reads (demand_gate.h).
  Status ReadAt(uint64_t offset, std::span<uint8_t> buffer) override {
    ReadRequest r{offset, buffer, {}};
    return Read(std::span<ReadRequest>(&r, 1), ReadLane::kDemand);
  }

  Status ReadBatch(std::span<ReadRequest> requests) override { return Read(requests, ReadLane::kBackground); }

  ReadHints hints() const override { return ReadHints{kBatchBytes, true}; }
  ReadCounters counters() const override { return client_->counters(); }

 private:
  Status Read(std::span<ReadRequest> requests, ReadLane lane) {
    for (auto& r : requests) {
      if (r.offset > size_ || r.buffer.size() > size_ - r.offset) {
        return Status::InvalidArgument(fmt::format("{}: read of {} bytes at offset {:#x} is outside the object ({} bytes)",
                                                   name_, r.buffer.size(), r.offset, size_));
      }
    }
    // Reads inside the tail fetched at open cost nothing; the rest go out as one batch of ranged GETs, adjacent
    // reads joined.
    std::vector<ReadRequest> remote;
    std::vector<size_t> index;
    uint64_t remote_bytes = 0;
    for (size_t i = 0; i < requests.size(); ++i) {
      ReadRequest& r = requests[i];
      if (r.offset >= tail_offset_ && !r.buffer.empty()) {
        std::memcpy(r.buffer.data(), tail_.data() + (r.offset - tail_offset_), r.buffer.size());
        r.status = Status::Ok();
      } else {
        r.status = Status::Ok();  // an empty buffer is never sent
        remote.push_back(r);
        index.push_back(i);
        remote_bytes += r.buffer.size();
      }
    }
    if (remote.empty()) return Status::Ok();
    const auto gets = CoalesceReads(remote, LimitsForBatch(remote_bytes, unsigned(client_->config().max_in_flight),
                                                           kMinJoinedRequest, kMaxJoinedRequest, kMaxJoinGap));
    Status first = client_->GetRanges(url_, gets, name_, lane);
    for (size_t j = 0; j < remote.size(); ++j) requests[index[j]].status = remote[j].status;
    return first;
  }

  std::string name_;
  std::shared_ptr<S3Client> client_;
  std::string url_;
  uint64_t size_;
  std::string tail_;
  uint64_t tail_offset_;
};

class S3MultipartSink final : public PartBufferedSink {
 public:
  S3MultipartSink(std::string name, std::shared_ptr<S3Client> client, ObjectUri uri, std::string upload_id)
      : PartBufferedSink(std::move(name)), client_(std::move(client)), uri_(std::move(uri)),
        upload_id_(std::move(upload_id)) {
    buffer_.reserve(kFirstPartSize);
  }
  ~S3MultipartSink() override { Abort(); }

  Status Commit() override {
    HLT_RETURN_IF_ERROR(CheckOpen("Commit"));
    Status s = error_;
    if (s.ok() && (!buffer_.empty() || etags_.empty())) s = WritePart();
    if (s.ok()) s = Complete();
    if (!s.ok()) {
      Abort();
      return s;
    }
    done_ = true;
    return Status::Ok();
  }

  void Abort() override {
    if (done_) return;
    done_ = true;
    HttpResponse r;
    // Best effort: an upload left behind is invisible (no object) and a bucket lifecycle rule reaps it.
    (void)client_->Send("DELETE", Url("uploadId=" + S3Client::Encode(upload_id_, false)), {}, &r,
                        name_ + ": aborting the multipart upload");
  }

 private:
  size_t PartSize() const override { return kFirstPartSize << (etags_.size() / kPartsPerSizeStep); }
  std::string Url(const std::string& query) const { return client_->ObjectUrl(uri_.container, uri_.key, query); }

  // Uploads buffer_ as the next part.
  Status WritePart() override {
    const size_t number = etags_.size() + 1;
    if (number > 10000) return Status::InvalidArgument(name_ + ": more than 10000 parts");
    // The canonical query SigV4 signs: parameters sorted by name (curl 7.88 signs the query as given).
    const std::string url =
        Url(fmt::format("partNumber={}&uploadId={}", number, S3Client::Encode(upload_id_, false)));
    const std::string what =
        fmt::format("{}: uploading part {} ({} bytes at offset {:#x})", name_, number, buffer_.size(),
                    position_ - buffer_.size());
    HttpResponse r;
    HLT_RETURN_IF_ERROR(client_->Send("PUT", url, buffer_, &r, what));
    if (r.status != 200) return HttpError(what, r);
    if (r.etag.empty()) return Status::IoError(what + ": the answer has no ETag");
    etags_.push_back(r.etag);
    buffer_.clear();
    return Status::Ok();
  }

  Status Complete() {
    std::string xml = "<CompleteMultipartUpload>";
    for (size_t i = 0; i < etags_.size(); ++i) {
      xml += fmt::format("<Part><PartNumber>{}</PartNumber><ETag>{}</ETag></Part>", i + 1, etags_[i]);
    }
    xml += "</CompleteMultipartUpload>";
    const std::string what = fmt::format("{}: completing the multipart upload of {} parts", name_, etags_.size());
    HttpResponse r;
    HLT_RETURN_IF_ERROR(client_->Send("POST", Url("uploadId=" + S3Client::Encode(upload_id_, false)),
                                      std::span(reinterpret_cast<const uint8_t*>(xml.data()), xml.size()), &r, what));
    // S3 may answer 200 and still report an error in the body.
    if (r.status != 200 || r.body.find("<Error>") != std::string::npos) return HttpError(what, r);
    return Status::Ok();
  }

  std::shared_ptr<S3Client> client_;
  ObjectUri uri_;
  std::string upload_id_;
  std::vector<std::string> etags_;
};

Result<std::shared_ptr<S3Client>> Client() {
  HLT_ASSIGN_OR_RETURN(S3Config config, S3ConfigFromEnv());
  return std::make_shared<S3Client>(std::move(config));
}

}  // namespace

Result<std::unique_ptr<RandomAccessFile>> OpenS3File(const std::string& uri, const ObjectUri& parsed) {
  HLT_ASSIGN_OR_RETURN(auto client, Client());
  std::string url = client->ObjectUrl(parsed.container, parsed.key);
  // One request learns the size and brings the footer and the index (a suffix range: the last kTailSize bytes,
  // or the whole object when smaller), instead of a HEAD and then three reads.
  HttpResponse r;
  std::string what = uri + ": GET of the last " + std::to_string(kTailSize) + " bytes";
  HLT_RETURN_IF_ERROR(client->Send("GET", url, {}, &r, what, "-" + std::to_string(kTailSize), kTailSize));
  uint64_t size = 0;
  if (r.status == 206 && r.range_total >= r.body.size()) {
    size = r.range_total;
  } else if (r.status == 200) {  // a server ignoring the range sent the whole object: keep its tail only if whole
    size = r.content_length > 0 ? r.content_length : r.body.size();
    if (r.body.size() != size) r.body.clear();
    r.content_length = r.body.size();
  } else if (r.status == 416) {  // an empty object has no last bytes
    r.body.clear();
  } else {
    return HttpError(what, r);
  }
  if (r.body.size() > kTailSize || (r.status == 206 && r.content_length != r.body.size())) {
    return Status::IoError(fmt::format("{}: {} bytes received, {} announced", what, r.body.size(), r.content_length));
  }
  return std::unique_ptr<RandomAccessFile>(new S3File(uri, std::move(client), std::move(url), size, std::move(r.body)));
}

Result<std::unique_ptr<AppendSink>> CreateS3Sink(const std::string& uri, const ObjectUri& parsed) {
  HLT_ASSIGN_OR_RETURN(auto client, Client());
  // "uploads=" rather than "uploads": the form SigV4 canonicalises, which curl 7.88 does not do itself.
  const std::string url = client->ObjectUrl(parsed.container, parsed.key, "uploads=");
  const std::string what = uri + ": starting a multipart upload";
  HttpResponse r;
  HLT_RETURN_IF_ERROR(client->Send("POST", url, {}, &r, what));
  if (r.status != 200) return HttpError(what, r);
  std::string id = Tag(r.body, "UploadId");
  if (id.empty()) return Status::IoError(what + ": the answer has no UploadId");
  return std::unique_ptr<AppendSink>(new S3MultipartSink(uri, std::move(client), parsed, std::move(id)));
}

}  // namespace halite::objstore
