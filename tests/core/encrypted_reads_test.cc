// The reader opens sealed units in place, in the payload buffer it read them into (format-spec 13.2): the AEADs
// decrypt in place and leave nothing of a unit whose tag fails; a unit changed on storage, with its checksum and
// the index tag recomputed so that only its own tag can catch it, is refused by every read path (ReadBlock whole
// or streamed, FetchBlocks + DecodeBlock) without a byte of it reported; and the buffers a refused read used serve
// the next read correctly.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "codec/aead.h"
#include "format/encryption_codec.h"
#include "halite/checkpoint_reader.h"
#include "halite/checkpoint_writer.h"
#include "halite/encryption.h"
#include "support/checksum_reseal.h"
#include "support/synthetic_memory.h"

using namespace halite;

namespace {

constexpr size_t kPage = 4096;
const std::string kMarker = "TENANT-SECRET-in-place";

EncryptionKey Key() {
  EncryptionKey k;
  for (size_t i = 0; i < k.size(); ++i) k[i] = uint8_t(0x5c + 7 * i);
  return k;
}

bool Contains(std::span<const uint8_t> hay, const std::string& needle) {
  return std::search(hay.begin(), hay.end(), needle.begin(), needle.end()) != hay.end();
}

std::vector<uint8_t> SaveEncrypted(const std::vector<uint8_t>& mem, Cipher cipher, uint32_t frame_pages) {
  std::vector<uint8_t> file;
  WriterOptions o;
  o.encryption_key = Key();
  o.cipher = cipher;
  o.block_pages = 16;
  o.frame_pages = frame_pages;
  o.threads = 2;
  auto w = CheckpointWriter::Create(NewMemorySink("enc.hlt", &file), o);
  REQUIRE(w.has_value());
  auto r = (*w)->AddRegion("ram", 0, mem.size());
  REQUIRE(r.has_value());
  for (size_t p = 0; p < mem.size() / kPage; ++p) {
    REQUIRE((*w)->PutPage(*r, p, std::span(mem.data() + p * kPage, kPage)).ok());
  }
  REQUIRE((*w)->Finish().has_value());
  return file;
}

std::unique_ptr<CheckpointReader> OpenWithKey(const std::vector<uint8_t>& file) {
  ReaderOptions ro;
  ro.keyring = std::make_shared<Keyring>();
  REQUIRE(ro.keyring->Add(Key()).ok());
  auto r = CheckpointReader::Open(NewMemoryFile("enc.hlt", file), ro);
  REQUIRE(r.has_value());
  return std::move(*r);
}

// The pages [first, end) of a block's unit that a changed byte at `at` (an offset in the payload) belongs to:
// its frame for a FRAMED block, the whole block otherwise.
std::pair<size_t, size_t> UnitPages(std::span<const uint8_t> payload, const BlockInfo& b, size_t at) {
  if (!b.framed()) return {0, b.page_count};
  auto frames = format::ParseFrameTable(payload, b, "test");
  REQUIRE(frames.has_value());
  for (const auto& f : *frames) {
    if (at >= f.offset && at < f.offset + f.sealed_length) return {f.first_page, f.first_page + f.pages};
  }
  FAIL("offset " << at << " is in no frame");
  return {0, 0};
}

}  // namespace

TEST_CASE("both AEADs open in place, refuse a shifted overlap, and leave no plaintext when a tag fails",
          "[encryption]") {
  std::vector<uint8_t> plain = testing::SyntheticBytes(5 * kPage, 3);
  std::memcpy(plain.data() + 777, kMarker.data(), kMarker.size());
  const uint8_t ad[56] = {1, 2, 3};
  for (auto alg : {codec::AeadAlgorithm::kAes256Gcm, codec::AeadAlgorithm::kXChaCha20Poly1305}) {
    INFO(codec::AeadAlgorithmName(alg));
    std::array<uint8_t, codec::kAeadKeySize> key{};
    key[0] = 9;
    auto k = codec::AeadKey::Create(alg, key);
    REQUIRE(k.has_value());
    codec::AeadNonce nonce{};
    nonce[4] = 42;
    std::vector<uint8_t> sealed(plain.size() + codec::kAeadTagSize);
    (*k)->Seal(nonce, ad, plain, sealed);
    REQUIRE(!Contains(sealed, kMarker));

    std::vector<uint8_t> buf = sealed;
    REQUIRE((*k)->Open(nonce, ad, buf, std::span(buf).first(plain.size())));
    CHECK(std::equal(plain.begin(), plain.end(), buf.begin()));

    // A changed ciphertext byte, tag byte or AD byte: refused, and the buffer holds zeros where the text was.
    for (int what = 0; what < 3; ++what) {
      INFO("changed " << (what == 0 ? "ciphertext" : what == 1 ? "tag" : "associated data"));
      buf = sealed;
      uint8_t other_ad[56];
      std::memcpy(other_ad, ad, sizeof ad);
      if (what == 0) buf[800] ^= 0x01;
      if (what == 1) buf[buf.size() - 3] ^= 0x80;
      if (what == 2) other_ad[55] ^= 0x01;
      CHECK(!(*k)->Open(nonce, other_ad, buf, std::span(buf).first(plain.size())));
      CHECK(std::all_of(buf.begin(), buf.begin() + long(plain.size()), [](uint8_t b) { return b == 0; }));
    }

    // Overlapping but not in place (the cipher would read bytes it already wrote): refused, nothing decrypted.
    buf = sealed;
    buf.push_back(0);
    CHECK(!(*k)->Open(nonce, ad, std::span(buf).first(sealed.size()), std::span(buf).subspan(1, plain.size())));
    CHECK(!Contains(buf, kMarker));
  }
}

TEST_CASE("a sealed unit changed on storage is refused by every read path, nothing of it reported",
          "[encryption]") {
  // Synthetic memory (some of it incompressible, stored raw) with the marker in every page.
  std::vector<uint8_t> mem = testing::SyntheticBytes(96 * kPage, 26);
  for (size_t p = 0; p < 96; ++p) std::memcpy(mem.data() + p * kPage + 100, kMarker.data(), kMarker.size());
  for (Cipher cipher : {Cipher::kAes256Gcm, Cipher::kXChaCha20Poly1305}) {
    for (uint32_t frame_pages : {0u, 4u}) {  // one unit a block, and FRAMED blocks of 4-page frames
      INFO((cipher == Cipher::kAes256Gcm ? "AES-256-GCM" : "XChaCha20-Poly1305") << ", frame_pages " << frame_pages);
      const std::vector<uint8_t> file = SaveEncrypted(mem, cipher, frame_pages);
      REQUIRE(!Contains(file, kMarker));
      auto good = OpenWithKey(file);
      const auto& blocks = good->blocks();
      // Every block decodes alike through ReadBlock and through FetchBlocks + DecodeBlock (the engine's path).
      std::vector<std::vector<uint8_t>> want(blocks.size());
      size_t framed = 0, compressed = 0;
      for (uint32_t b = 0; b < blocks.size(); ++b) {
        want[b].resize(blocks[b].raw_length());
        REQUIRE(good->ReadBlock(b, want[b]).ok());
        REQUIRE(Contains(want[b], kMarker));
        std::vector<FetchedBlock> fetched;
        const uint32_t one[] = {b};
        REQUIRE(good->FetchBlocks(one, &fetched).ok());
        std::vector<uint8_t> out(blocks[b].raw_length());
        REQUIRE(good->DecodeBlock(fetched[0], out, nullptr).ok());
        CHECK(out == want[b]);
        framed += blocks[b].framed();
        compressed += blocks[b].compressed();
      }
      CHECK(compressed > 0);
      CHECK((frame_pages == 0 ? framed == 0 : framed > 0));

      for (uint32_t b = 0; b < blocks.size(); ++b) {
        const BlockInfo& info = blocks[b];
        INFO("block " << b << (info.framed() ? " (framed)" : info.compressed() ? "" : " (raw)"));
        // A byte of the last unit's ciphertext changed, every checksum and the index tag recomputed (as only the
        // key's holder could): the unit's own tag is what must tell.
        const size_t at = info.stored_length - format::kSealTagSize - 2;
        const auto unit = UnitPages(std::span(file).subspan(info.offset, info.stored_length), info, at);
        std::vector<uint8_t> bad = file;
        bad[info.offset + at] ^= 0x04;
        testing::ResealWithKey(bad, Key());
        auto r = OpenWithKey(bad);
        std::vector<uint8_t> out(info.raw_length());
        CHECK(r->ReadBlock(b, out).code() == StatusCode::kAuthFailed);
        // Streamed from the first page (the changed unit last) and from a page of the changed unit.
        for (size_t first : {size_t(0), unit.first * kPage}) {
          bool reported_changed = false;
          Status st = r->ReadBlock(
              b, out, nullptr,
              [&](size_t begin, size_t end) {
                reported_changed = reported_changed || (end > unit.first * kPage && begin < unit.second * kPage);
                return Status::Ok();
              },
              first);
          CHECK(st.code() == StatusCode::kAuthFailed);
          CHECK(!reported_changed);
        }
        std::vector<FetchedBlock> fetched;
        const uint32_t one[] = {b};
        REQUIRE(r->FetchBlocks(one, &fetched).ok());
        CHECK(r->DecodeBlock(fetched[0], out, nullptr).code() == StatusCode::kAuthFailed);
        // The same reader and thread (the same reused buffers) then read the other blocks right.
        for (uint32_t o = 0; o < blocks.size(); ++o) {
          if (o == b) continue;
          std::vector<uint8_t> again(blocks[o].raw_length());
          REQUIRE(r->ReadBlock(o, again).ok());
          if (again != want[o]) FAIL("block " << o << " differs after block " << b << " was refused");
        }
      }
    }
  }
}
