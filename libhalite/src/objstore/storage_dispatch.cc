// Chooses the storage behind a checkpoint path: s3:// and rados:// go to the object-store backends, anything
// else is a local file.
#include <fmt/format.h>

#include "halite/checkpoint_location.h"
#include "objstore/object_store.h"
#include "objstore/object_uri.h"
#if HALITE_HAVE_CURL
#include "objstore/s3_http.h"
#endif

namespace halite {

bool IsObjectStoreUri(std::string_view path) { return objstore::HasObjectScheme(path); }

Result<std::unique_ptr<RandomAccessFile>> OpenCheckpointFile(const std::string& path, FileOpenOptions options) {
  if (!objstore::HasObjectScheme(path)) return OpenLocalFile(path, options);
  HLT_ASSIGN_OR_RETURN(auto uri, objstore::ParseObjectUri(path));
  if (uri.scheme == objstore::Scheme::kS3) {
#if HALITE_HAVE_CURL
    return objstore::OpenS3File(path, uri);
#else
    return Status::Unsupported(path + ": this libhalite was built without libcurl (s3:// support)");
#endif
  }
#if HALITE_HAVE_RADOS
  return objstore::OpenRadosFile(path, uri);
#else
  return Status::Unsupported(path + ": this libhalite was built without librados (rados:// support)");
#endif
}

Result<std::unique_ptr<AppendSink>> CreateCheckpointSink(const std::string& path, FileSinkOptions options) {
  if (!objstore::HasObjectScheme(path)) return CreateAtomicFileSink(path, options);
  HLT_ASSIGN_OR_RETURN(auto uri, objstore::ParseObjectUri(path));
  if (uri.scheme == objstore::Scheme::kS3) {
#if HALITE_HAVE_CURL
    return objstore::CreateS3Sink(path, uri);
#else
    return Status::Unsupported(path + ": this libhalite was built without libcurl (s3:// support)");
#endif
  }
#if HALITE_HAVE_RADOS
  return objstore::CreateRadosSink(path, uri);
#else
  return Status::Unsupported(path + ": this libhalite was built without librados (rados:// support)");
#endif
}

namespace objstore {

Result<std::shared_ptr<DemandGate>> DemandGateFor(const std::string& uri,
                                                  const std::function<LanePolicy(LanePolicy)>& adjust) {
  [[maybe_unused]] const auto policy = [&](const LanePolicy& own) { return adjust ? adjust(own) : own; };
  HLT_ASSIGN_OR_RETURN(auto parsed, ParseObjectUri(uri));
  if (parsed.scheme == Scheme::kS3) {
#if HALITE_HAVE_CURL
    HLT_ASSIGN_OR_RETURN(S3Config config, S3ConfigFromEnv());
    return DemandGate::ForServer(S3Client::GateKey(config), policy(config.lanes));
#else
    return Status::Unsupported(uri + ": this libhalite was built without libcurl (s3:// support)");
#endif
  }
#if HALITE_HAVE_RADOS
  return DemandGate::ForServer(RadosGateKey(), policy(RadosLanes()));
#else
  return Status::Unsupported(uri + ": this libhalite was built without librados (rados:// support)");
#endif
}

}  // namespace objstore
}  // namespace halite
