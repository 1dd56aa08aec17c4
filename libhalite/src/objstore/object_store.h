// The object-store backends behind the storage seam (halite/storage.h). OpenCheckpointFile and
// CreateCheckpointSink (storage_dispatch.cc) choose one by the path's scheme.
#ifndef HALITE_OBJSTORE_OBJECT_STORE_H_
#define HALITE_OBJSTORE_OBJECT_STORE_H_

#include <functional>
#include <memory>
#include <string>

#include "halite/storage.h"
#include "objstore/demand_gate.h"
#include "objstore/object_uri.h"

namespace halite::objstore {

// s3://BUCKET/KEY: a HEAD at open for the size, then one ranged GET per read (ReadBatch: many in flight).
Result<std::unique_ptr<RandomAccessFile>> OpenS3File(const std::string& uri, const ObjectUri& parsed);
// A multipart upload, completed by Commit (the object appears atomically) and aborted by Abort, by a failed
// Commit, or by destroying the sink uncommitted: a failed save leaves no visible object.
Result<std::unique_ptr<AppendSink>> CreateS3Sink(const std::string& uri, const ObjectUri& parsed);

// rados://POOL/NAME: a head object NAME records the stripe size and length; the bytes are in objects of a few MiB.
Result<std::unique_ptr<RandomAccessFile>> OpenRadosFile(const std::string& uri, const ObjectUri& parsed);
// Writes the stripes under a name unique to this save, then the head object last (one atomic write_full): a
// failed or killed save leaves no head, so no visible checkpoint. Commit removes the stripes of the checkpoint it
// replaced.
Result<std::unique_ptr<AppendSink>> CreateRadosSink(const std::string& uri, const ObjectUri& parsed);

// The DemandGate (demand_gate.h) of the server behind an s3:// or rados:// URI: one per server and process, shared
// by every file reading from it, created by the first file opened with the backend's own policy - or by this call
// when it comes first, with `adjust` applied to that policy (tests hold a gate with a policy of their own while
// they open files). Errors: kInvalidArgument for another scheme or missing S3 credentials, kUnsupported for a
// backend not built.
Result<std::shared_ptr<DemandGate>> DemandGateFor(const std::string& uri,
                                                  const std::function<LanePolicy(LanePolicy)>& adjust = {});

// The gate's key and the policy of each backend (s3_http.cc, rados_storage.cc).
std::string RadosGateKey();
LanePolicy RadosLanes();

}  // namespace halite::objstore

#endif  // HALITE_OBJSTORE_OBJECT_STORE_H_
