// Test vectors of the hint and trace file syntax (format-spec/hint-files.md), in format-spec/test-vectors/hints/.
// The same code regenerates the committed files (hlt-make-vectors) and checks them (tests/core/vectors_test.cc):
// the writer's files must come out byte for byte, every valid file must parse to exactly its .expected.txt, and
// every invalid file must fail with its expected message.
#ifndef HALITE_TESTS_HINT_VECTORS_H_
#define HALITE_TESTS_HINT_VECTORS_H_

#include <string>
#include <vector>

#include "halite/checkpoint_types.h"
#include "halite/status.h"

namespace halite::vectors {

enum class HintKind { kAccessTrace, kVaHints, kReplayTrace };

struct HintVector {
  std::string name;  // path under hints/, e.g. "valid/escaped-names.access-trace"
  HintKind kind;
  std::string text;  // the file
  bool valid;
  std::string message;  // invalid: a substring of the error
  std::string why;      // one line for the README
};

// The regions every hint vector is resolved against: QEMU-like names plus names with a space, '#' and '%'.
std::vector<Region> HintVectorRegions();
std::vector<HintVector> BuildHintVectors();
// The parse of `text` as `kind`, one line per run or access, or the error: what the .expected.txt files hold.
std::string DescribeHints(HintKind kind, const std::string& text, const std::string& file_name);

}  // namespace halite::vectors

#endif  // HALITE_TESTS_HINT_VECTORS_H_
