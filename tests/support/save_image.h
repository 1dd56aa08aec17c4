// Saves a memory image as a checkpoint of one region "ram", every page put in order, with the writer options a
// test chooses (two threads and no fsync unless it says otherwise). Fails the test on any writer error; returns
// the writer's summary. Header-only: Catch2's REQUIRE must expand in the test's own file.
#ifndef HALITE_TESTS_SAVE_IMAGE_H_
#define HALITE_TESTS_SAVE_IMAGE_H_

#include <catch2/catch.hpp>

#include <cstdint>
#include <span>
#include <string>

#include "halite/checkpoint_writer.h"

namespace halite::testing {

inline WriteSummary SaveRamImage(const std::string& path, std::span<const uint8_t> image, WriterOptions o) {
  constexpr uint64_t kPageBytes = 4096;
  auto w = CheckpointWriter::Create(path, o);
  INFO((w ? std::string() : w.error().ToString()));
  REQUIRE(w);
  REQUIRE((*w)->AddRegion("ram", 0, image.size()));
  for (uint64_t p = 0; p < image.size() / kPageBytes; ++p) {
    REQUIRE((*w)->PutPage(0, p, image.subspan(p * kPageBytes, kPageBytes)).ok());
  }
  auto s = (*w)->Finish();
  INFO((s ? std::string() : s.error().ToString()));
  REQUIRE(s);
  return *s;
}

// The options these tests start from: two writer threads, no fsync (a test's files are scratch).
inline WriterOptions ScratchWriterOptions() {
  WriterOptions o;
  o.threads = 2;
  o.sink.sync = false;
  return o;
}

}  // namespace halite::testing

#endif  // HALITE_TESTS_SAVE_IMAGE_H_
