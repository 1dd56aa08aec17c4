// Object-store URIs: parsing and the errors a caller gets before any network is reached.
#include <cstdlib>

#include <catch2/catch.hpp>

#include "halite/checkpoint_location.h"
#include "objstore/object_uri.h"

using halite::StatusCode;
using halite::objstore::ParseObjectUri;
using halite::objstore::Scheme;

TEST_CASE("object URIs are parsed into scheme, container and key") {
  auto s3 = ParseObjectUri("s3://bucket/dir/ckpt.hlt");
  REQUIRE(s3.has_value());
  CHECK(s3->scheme == Scheme::kS3);
  CHECK(s3->container == "bucket");
  CHECK(s3->key == "dir/ckpt.hlt");
  auto rados = ParseObjectUri("rados://pool/name");
  REQUIRE(rados.has_value());
  CHECK(rados->scheme == Scheme::kRados);
  CHECK(rados->container == "pool");
  CHECK(rados->key == "name");
}

TEST_CASE("malformed object URIs are refused naming the URI") {
  for (const char* bad : {"s3://bucket", "s3://bucket/", "s3:///key", "rados://pool", "rados:///x", "http://a/b",
                          "s3://b/k\x01"}) {
    auto r = ParseObjectUri(bad);
    REQUIRE_FALSE(r.has_value());
    CHECK(r.error().code() == StatusCode::kInvalidArgument);
    CHECK(r.error().message().find(std::string(bad).substr(0, 8)) != std::string::npos);
  }
}

TEST_CASE("only s3:// and rados:// are object locations") {
  CHECK(halite::IsObjectStoreUri("s3://b/k"));
  CHECK(halite::IsObjectStoreUri("rados://p/n"));
  CHECK_FALSE(halite::IsObjectStoreUri("ckpt.hlt"));
  CHECK_FALSE(halite::IsObjectStoreUri("./s3://b/k"));
  CHECK_FALSE(halite::IsObjectStoreUri("S3://b/k"));
}

TEST_CASE("an s3:// checkpoint without credentials fails before any request, saying which variables") {
  const char* id = std::getenv("AWS_ACCESS_KEY_ID");
  std::string saved = id ? id : "";
  unsetenv("AWS_ACCESS_KEY_ID");
  auto f = halite::OpenCheckpointFile("s3://bucket/key.hlt");
  auto sink = halite::CreateCheckpointSink("s3://bucket/key.hlt");
  if (id) setenv("AWS_ACCESS_KEY_ID", saved.c_str(), 1);
  REQUIRE_FALSE(f.has_value());
  REQUIRE_FALSE(sink.has_value());
  CHECK(f.error().code() == StatusCode::kInvalidArgument);
  CHECK(f.error().message().find("AWS_ACCESS_KEY_ID") != std::string::npos);
  CHECK(sink.error().message().find("AWS_ACCESS_KEY_ID") != std::string::npos);
}

TEST_CASE("a malformed object URI is refused by the open and create entry points") {
  auto f = halite::OpenCheckpointFile("rados://pool-only");
  REQUIRE_FALSE(f.has_value());
  CHECK(f.error().code() == StatusCode::kInvalidArgument);
  auto sink = halite::CreateCheckpointSink("s3://bucket-only");
  REQUIRE_FALSE(sink.has_value());
  CHECK(sink.error().code() == StatusCode::kInvalidArgument);
}
