// Builds the format test vectors (format-spec/test-vectors/) deterministically, and describes any checkpoint
// as canonical text. The same code regenerates the committed files and checks them, so any byte difference
// (an unintended format change) fails the suite.
#ifndef HALITE_TESTS_VECTOR_BUILDER_H_
#define HALITE_TESTS_VECTOR_BUILDER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "halite/authentication.h"
#include "halite/checkpoint_reader.h"
#include "halite/status.h"

namespace halite::vectors {

struct ValidVector {
  std::string name;  // file name, e.g. "minimal.hlt"
  std::vector<uint8_t> bytes;
};

struct InvalidVector {
  std::string name;
  std::vector<uint8_t> bytes;
  StatusCode open_code;   // expected from CheckpointReader::Open, or kOk when Open succeeds
  StatusCode verify_code; // expected from VerifyAll when Open succeeds
  std::string message;    // a substring the error message must contain
  std::string why;        // one line for the README
};

// Incremental chains (format-spec 12), all in test-vectors/chains/: parents are found by their path hints, so
// the files are checked where they lie. Valid ones open and verify with their whole chain; invalid ones fail to
// open with `open_code` (or open and fail VerifyAll with `verify_code`), with a message containing `message` and
// naming `also_names` (the other file involved) besides the file itself.
struct ChainVector {
  std::string name;
  std::vector<uint8_t> bytes;
  bool valid = true;
  bool top = false;            // valid: described in NAME.expected.txt (the ends of chains)
  StatusCode open_code = StatusCode::kOk;
  StatusCode verify_code = StatusCode::kOk;
  std::string message;
  std::string also_names;
  std::string why;
};
Result<std::vector<ChainVector>> BuildChainVectors();

// The key of valid/authenticated.hlt: bytes 0x00, 0x01, ..., 0x1f (also in test-vectors/authenticated.key).
MacKey TestMacKey();

Result<std::vector<ValidVector>> BuildValidVectors();
Result<std::vector<InvalidVector>> BuildInvalidVectors(const std::vector<ValidVector>& valid);

// Canonical description of a checkpoint's decoded content: metadata, regions, every page's kind and content
// hash, blocks, blobs with content hashes, restore order. Used as the "expected decoded content" files.
Result<std::string> Describe(const CheckpointReader& reader);

}  // namespace halite::vectors

#endif  // HALITE_TESTS_VECTOR_BUILDER_H_
