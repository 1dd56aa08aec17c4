// Where a checkpoint lives: a local path, s3://BUCKET/KEY or rados://POOL/NAME. Every place that takes a
// checkpoint path (CheckpointReader::Open, CheckpointWriter::Create, the C API, both tools) goes through these
// functions, so an object-store URI works wherever a file name does.
//
// s3://BUCKET/KEY (libcurl, SigV4): AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN (optional),
// AWS_REGION (default us-east-1), AWS_ENDPOINT_URL for a non-AWS server (addressed path-style).
// rados://POOL/NAME (librados): the cluster from ceph.conf / CEPH_CONF and its keyring (CEPH_ARGS may add --id,
// --keyring); the checkpoint is striped over objects of 4 MiB under a small head object NAME.
#ifndef HALITE_CHECKPOINT_LOCATION_H_
#define HALITE_CHECKPOINT_LOCATION_H_

#include <memory>
#include <string>
#include <string_view>

#include "halite/export.h"
#include "halite/status.h"
#include "halite/storage.h"

namespace halite {

// True when `path` starts with s3:// or rados://.
HALITE_EXPORT bool IsObjectStoreUri(std::string_view path);

// Opens a checkpoint for reading: OpenLocalFile for a local path. For an object: one request at open (an S3 HEAD,
// or the RADOS head object), then one ranged read per ReadAt; ReadBatch keeps many in flight. Transient failures
// (5xx, timeouts, connection resets) are retried with backoff, 4xx never. Thread-safe like every
// RandomAccessFile. Errors name the URI and the offset: kIoError, kNotFound (no such object), kInvalidArgument
// (malformed URI, missing credentials), kUnsupported (built without libcurl / librados).
HALITE_EXPORT Result<std::unique_ptr<RandomAccessFile>> OpenCheckpointFile(const std::string& path,
                                                                           FileOpenOptions options = {});

// Creates a checkpoint destination with the atomic sink's guarantee: CreateAtomicFileSink for a local path; for
// s3:// a multipart upload completed by Commit and aborted by Abort, a failed Commit or destruction; for rados://
// stripes under a name unique to this save, the head object written last. A failed, abandoned or killed save
// leaves no visible object (a killed S3 upload stays listed as incomplete until a lifecycle rule reaps it; killed
// RADOS stripes stay as unreachable objects NAME.s.*).
HALITE_EXPORT Result<std::unique_ptr<AppendSink>> CreateCheckpointSink(const std::string& path,
                                                                       FileSinkOptions options = {});

}  // namespace halite

#endif  // HALITE_CHECKPOINT_LOCATION_H_
