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

// The key of valid/authenticated.hlt: bytes 0x00, 0x01, ..., 0x1f (also in test-vectors/authenticated.key).
MacKey TestMacKey();

Result<std::vector<ValidVector>> BuildValidVectors();
Result<std::vector<InvalidVector>> BuildInvalidVectors(const std::vector<ValidVector>& valid);

// Canonical description of a checkpoint's decoded content: metadata, regions, every page's kind and content
// hash, blocks, blobs with content hashes, restore order. Used as the "expected decoded content" files.
Result<std::string> Describe(const CheckpointReader& reader);

}  // namespace halite::vectors

#endif  // HALITE_TESTS_VECTOR_BUILDER_H_
