// Authenticated checkpoints (format-spec 5.8): any tampered byte, another key, or a missing MAC is refused with
// an authentication error when a key is given.
#include <catch2/catch.hpp>

#include "codec/mac.h"
#include "halite/checkpoint_reader.h"
#include "halite/checkpoint_writer.h"
#include "support/synthetic_memory.h"
#include "vectors/vector_builder.h"

using namespace halite;

namespace {

ReaderOptions WithKey(const MacKey& k) {
  ReaderOptions o;
  o.mac_key = k;
  return o;
}

Status OpenAndReadAll(const std::vector<uint8_t>& file, const ReaderOptions& o) {
  HLT_ASSIGN_OR_RETURN(auto r, CheckpointReader::Open(NewMemoryFile("auth.hlt", file), o));
  return r->VerifyAll();
}

std::vector<uint8_t> Authenticated() {
  auto valid = vectors::BuildValidVectors();
  REQUIRE(valid.has_value());
  for (auto& v : *valid) {
    if (v.name == "authenticated.hlt") return v.bytes;
  }
  FAIL("no authenticated vector");
  return {};
}

}  // namespace

TEST_CASE("an authenticated checkpoint opens with its key and without one", "[auth]") {
  auto f = Authenticated();
  CHECK(OpenAndReadAll(f, WithKey(vectors::TestMacKey())).ok());
  CHECK(OpenAndReadAll(f, {}).ok());
  auto r = CheckpointReader::Open(NewMemoryFile("a", f));
  REQUIRE(r.has_value());
  CHECK((*r)->authenticated());
}

TEST_CASE("a tampered byte anywhere is refused with a MAC error", "[auth]") {
  auto f = Authenticated();
  for (size_t i = 0; i < f.size(); ++i) {
    auto g = f;
    g[i] ^= 0x01;
    Status s = OpenAndReadAll(g, WithKey(vectors::TestMacKey()));
    if (s.ok()) FAIL("tampering at offset " << i << " was accepted");
    if (s.code() != StatusCode::kAuthFailed) FAIL("offset " << i << ": " << s.ToString());
  }
}

TEST_CASE("another key is refused, and so is a checkpoint without MAC", "[auth]") {
  auto f = Authenticated();
  MacKey other = vectors::TestMacKey();
  other[31] ^= 1;
  Status s = OpenAndReadAll(f, WithKey(other));
  CHECK(s.code() == StatusCode::kAuthFailed);
  CHECK_THAT(s.message(), Catch::Contains("MAC mismatch"));

  std::vector<uint8_t> plain;
  auto w = CheckpointWriter::Create(NewMemorySink("p", &plain), {});
  auto r = (*w)->AddRegion("ram", 0, 4096);
  std::vector<uint8_t> page(4096, 3);
  REQUIRE((*w)->PutPage(*r, 0, page).ok());
  REQUIRE((*w)->Finish().has_value());
  Status t = OpenAndReadAll(plain, WithKey(vectors::TestMacKey()));
  CHECK(t.code() == StatusCode::kAuthFailed);
  CHECK_THAT(t.message(), Catch::Contains("not authenticated"));
}

TEST_CASE("swapped blocks fail their MAC: each is bound to its position", "[auth]") {
  // Two incompressible pages, one per block, so both payloads are 4096 raw bytes and can be swapped in place.
  std::vector<uint8_t> out;
  WriterOptions o;
  o.mac_key = vectors::TestMacKey();
  o.block_pages = 1;
  o.dictionary = DictionaryMode::kOff;
  auto w = CheckpointWriter::Create(NewMemorySink("x", &out), o);
  auto r = (*w)->AddRegion("ram", 0, 2 * 4096);
  std::vector<uint8_t> page(4096);
  for (uint64_t p = 0; p < 2; ++p) {
    testing::SyntheticMemory(p).MakePage(testing::PageFlavor::kRandom, page.data());
    REQUIRE((*w)->PutPage(*r, p, page).ok());
  }
  REQUIRE((*w)->Finish().has_value());
  std::swap_ranges(out.begin() + 64, out.begin() + 64 + 4096, out.begin() + 64 + 4096);
  Status s = OpenAndReadAll(out, WithKey(vectors::TestMacKey()));
  CHECK(s.code() == StatusCode::kAuthFailed);
  CHECK_THAT(s.message(), Catch::Contains("block 0") && Catch::Contains("MAC mismatch"));
}

TEST_CASE("a failed sodium_init() is reported by the reader and the writer given a key", "[auth]") {
  auto f = Authenticated();
  codec::SetSodiumInitForTesting([] { return -1; });
  struct Restore {
    ~Restore() { codec::SetSodiumInitForTesting(nullptr); }
  } restore;

  auto r = CheckpointReader::Open(NewMemoryFile("auth.hlt", f), WithKey(vectors::TestMacKey()));
  REQUIRE_FALSE(r.has_value());
  INFO(r.error().ToString());
  CHECK(r.error().code() == StatusCode::kIoError);
  CHECK_THAT(r.error().message(), Catch::StartsWith("auth.hlt: ") && Catch::Contains("sodium_init() failed"));

  std::vector<uint8_t> out;
  WriterOptions o;
  o.mac_key = vectors::TestMacKey();
  auto w = CheckpointWriter::Create(NewMemorySink("w.hlt", &out), o);
  REQUIRE_FALSE(w.has_value());
  CHECK(w.error().code() == StatusCode::kIoError);
  CHECK_THAT(w.error().message(), Catch::Contains("sodium_init() failed"));

  // Without a key libsodium is not needed: both work.
  CHECK(OpenAndReadAll(f, {}).ok());
  CHECK(CheckpointWriter::Create(NewMemorySink("w.hlt", &out), {}).has_value());

  // Once it initialises, keys work again.
  codec::SetSodiumInitForTesting(nullptr);
  CHECK(OpenAndReadAll(f, WithKey(vectors::TestMacKey())).ok());
}
