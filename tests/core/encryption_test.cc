// Encrypted checkpoints (format-spec section 13): round trips with each cipher, no plaintext in the file, keys by
// id (missing and wrong keys refused at open, naming the id), reading without the key, tampering anywhere refused,
// chains that mix keys, children coded against an encrypted parent (BASED) and rekeyed, and a writer whose staging never holds a plaintext page.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <unistd.h>

#include "codec/aead.h"
#include "halite/checkpoint_reader.h"
#include "halite/checkpoint_rekey.h"
#include "halite/checkpoint_writer.h"
#include "halite/encryption.h"
#include "support/checksum_reseal.h"
#include "support/memory_corpus.h"
#include "support/save_image.h"
#include "support/synthetic_memory.h"
#include "support/temp_dir.h"
#include "writer/page_store.h"

using namespace halite;
using halite::testing::SaveRamImage;
using halite::testing::ScratchWriterOptions;

namespace {

constexpr size_t kPage = 4096;
const std::string kMarker = "TENANT-SECRET-7f3a9c";  // in every stored page; must never appear in a file

EncryptionKey KeyOf(uint8_t seed) {
  EncryptionKey k;
  for (size_t i = 0; i < k.size(); ++i) k[i] = uint8_t(seed * 31 + i);
  return k;
}

std::shared_ptr<Keyring> RingOf(std::initializer_list<EncryptionKey> keys) {
  auto ring = std::make_shared<Keyring>();
  for (const auto& k : keys) REQUIRE(ring->Add(k).ok());
  return ring;
}

// Synthetic memory with the marker written into every non-zero page (and some incompressible pages, stored raw).
std::vector<uint8_t> Memory(size_t pages, uint64_t seed) {
  std::vector<uint8_t> mem = testing::SyntheticBytes(pages * kPage, seed);
  for (size_t p = 0; p < pages; ++p) {
    uint8_t* page = mem.data() + p * kPage;
    if (std::all_of(page, page + kPage, [](uint8_t b) { return b == 0; })) continue;
    std::memcpy(page + (p * 97) % (kPage - kMarker.size()), kMarker.data(), kMarker.size());
  }
  return mem;
}

struct Saved {
  std::vector<uint8_t> file;
  std::vector<uint8_t> memory;
};

Saved Save(const std::vector<uint8_t>& mem, WriterOptions o, bool blob = true) {
  Saved s;
  s.memory = mem;
  o.threads = 2;
  auto w = CheckpointWriter::Create(NewMemorySink("enc.hlt", &s.file), o);
  REQUIRE(w.has_value());
  auto r = (*w)->AddRegion("ram", 0, mem.size());
  REQUIRE(r.has_value());
  for (size_t p = 0; p < mem.size() / kPage; ++p) {
    REQUIRE((*w)->PutPage(*r, p, std::span(mem.data() + p * kPage, kPage)).ok());
  }
  if (blob) {
    std::string state = "device state with " + kMarker + " in it, repeated: ";
    for (int i = 0; i < 4; ++i) state += state;
    REQUIRE((*w)->AddBlob("qemu.device-state", std::span(reinterpret_cast<const uint8_t*>(state.data()), state.size())).ok());
    const uint8_t tiny[] = {1, 2, 3};
    REQUIRE((*w)->AddBlob("tiny", tiny).ok());
  }
  auto sum = (*w)->Finish();
  REQUIRE(sum.has_value());
  return s;
}

WriterOptions Encrypting(const EncryptionKey& key, Cipher cipher) {
  WriterOptions o;
  o.encryption_key = key;
  o.cipher = cipher;
  o.page_hashes = true;
  return o;
}

// Both ciphers on any CPU: OpenSSL computes AES-256-GCM with or without AES-NI.
std::vector<Cipher> Ciphers() { return {Cipher::kXChaCha20Poly1305, Cipher::kAes256Gcm}; }

bool Contains(const std::vector<uint8_t>& hay, const std::string& needle) {
  return std::search(hay.begin(), hay.end(), needle.begin(), needle.end()) != hay.end();
}

// Every page of the view read back and compared.
void CheckContent(const CheckpointReader& r, const std::vector<uint8_t>& mem) {
  std::vector<uint8_t> page(kPage);
  for (uint64_t g = 0; g < r.total_pages(); ++g) {
    REQUIRE(r.ReadPage(g, page).ok());
    if (!std::equal(page.begin(), page.end(), mem.begin() + long(g * kPage))) FAIL("page " << g << " differs");
  }
}

}  // namespace

TEST_CASE("encrypted checkpoints round-trip with each cipher, framed, with a dictionary, hashes and blobs",
          "[encryption]") {
  const auto mem = Memory(600, 3);
  for (Cipher cipher : Ciphers()) {
    for (bool dictionary : {false, true}) {
      INFO(CipherName(cipher) << (dictionary ? ", dictionary" : ", frames of 16 pages"));
      WriterOptions o = Encrypting(KeyOf(1), cipher);
      if (dictionary) {
        o.block_pages = 16;
        o.dictionary = DictionaryMode::kOn;
      } else {
        o.frame_pages = 16;  // FRAMED blocks, each frame sealed on its own (the defaults may choose one frame)
        o.dictionary = DictionaryMode::kOff;
      }
      Saved s = Save(mem, o);
      CHECK_FALSE(Contains(s.file, kMarker));
      ReaderOptions ro;
      ro.keyring = RingOf({KeyOf(2), KeyOf(1)});
      auto r = CheckpointReader::Open(NewMemoryFile("enc.hlt", s.file), ro);
      REQUIRE(r.has_value());
      CHECK((*r)->encrypted());
      CHECK((*r)->cipher() == cipher);
      CHECK((*r)->format_minor() == format::kFormatMinorPackedPageMap);  // encrypted (1.5), packed map (1.6)
      CHECK((*r)->key_id() == *ComputeKeyId(KeyOf(1)));
      CHECK((*r)->has_page_hashes());
      CHECK(((*r)->dictionary_size() > 0) == dictionary);
      CHECK(std::any_of((*r)->blocks().begin(), (*r)->blocks().end(), [](const BlockInfo& b) { return b.framed(); }) ==
            !dictionary);
      REQUIRE((*r)->VerifyAll().ok());
      CheckContent(**r, mem);
      auto blob = (*r)->ReadBlob("qemu.device-state");
      REQUIRE(blob.has_value());
      CHECK(Contains(*blob, kMarker));
      auto tiny = (*r)->ReadBlob("tiny");
      REQUIRE(tiny.has_value());
      CHECK(*tiny == std::vector<uint8_t>{1, 2, 3});
    }
  }
}

TEST_CASE("a framed encrypted block decodes from any frame first, each range final when reported", "[encryption]") {
  const auto mem = Memory(256, 5);
  Saved s = Save(mem, Encrypting(KeyOf(1), Cipher::kXChaCha20Poly1305), false);
  ReaderOptions ro;
  ro.keyring = RingOf({KeyOf(1)});
  auto r = CheckpointReader::Open(NewMemoryFile("enc.hlt", s.file), ro);
  REQUIRE(r.has_value());
  size_t framed = 0;
  for (uint32_t b = 0; b < (*r)->blocks().size(); ++b) {
    const BlockInfo& info = (*r)->blocks()[b];
    if (!info.framed()) continue;
    ++framed;
    std::vector<uint8_t> whole(info.raw_length());
    REQUIRE((*r)->ReadBlock(b, whole).ok());
    for (size_t page : {size_t(0), size_t(17), size_t(info.page_count - 1)}) {
      std::vector<uint8_t> pieces(whole.size(), 0xee);
      std::vector<int> covered(info.page_count, 0);
      bool final_when_reported = true;
      size_t first_begin = SIZE_MAX;
      REQUIRE((*r)->ReadBlock(
                      b, pieces, nullptr,
                      [&](size_t begin, size_t end) {
                        if (first_begin == SIZE_MAX) first_begin = begin;
                        final_when_reported = final_when_reported &&
                                              std::equal(pieces.begin() + long(begin), pieces.begin() + long(end),
                                                         whole.begin() + long(begin));
                        for (size_t p = begin / kPage; p < end / kPage; ++p) covered[p]++;
                        return Status::Ok();
                      },
                      page * kPage)
                  .ok());
      CHECK(final_when_reported);
      CHECK(pieces == whole);
      CHECK(first_begin == page / 16 * 16 * kPage);  // the page's own 16-page frame first
      CHECK(std::all_of(covered.begin(), covered.end(), [](int c) { return c == 1; }));
    }
  }
  CHECK(framed > 0);
}

TEST_CASE("a missing or wrong key is refused at open, naming the key id the file needs", "[encryption]") {
  const auto mem = Memory(64, 7);
  Saved s = Save(mem, Encrypting(KeyOf(1), Cipher::kXChaCha20Poly1305));
  const std::string id = KeyIdHex(*ComputeKeyId(KeyOf(1)));
  for (bool wrong : {false, true}) {
    ReaderOptions ro;
    if (wrong) ro.keyring = RingOf({KeyOf(2)});
    auto r = CheckpointReader::Open(NewMemoryFile("tenant.hlt", s.file), ro);
    REQUIRE_FALSE(r.has_value());
    CHECK(r.error().code() == StatusCode::kAuthFailed);
    CHECK_THAT(r.error().message(), Catch::Contains("tenant.hlt") && Catch::Contains(id));
  }
}

TEST_CASE("a key service is asked once per key id, and its failure is reported", "[encryption]") {
  const auto mem = Memory(64, 7);
  Saved s = Save(mem, Encrypting(KeyOf(4), Cipher::kXChaCha20Poly1305));
  auto ring = std::make_shared<Keyring>();
  int asked = 0;
  ring->SetFetch([&](const KeyId& id) -> Result<EncryptionKey> {
    ++asked;
    if (id == *ComputeKeyId(KeyOf(4))) return KeyOf(4);
    return Status::NotFound("vault has no such key");
  });
  ReaderOptions ro;
  ro.keyring = ring;
  for (int i = 0; i < 2; ++i) {
    auto r = CheckpointReader::Open(NewMemoryFile("enc.hlt", s.file), ro);
    REQUIRE(r.has_value());
  }
  CHECK(asked == 1);
  ring->SetFetch([](const KeyId&) -> Result<EncryptionKey> { return Status::IoError("key command exited with 3"); });
  Saved other = Save(mem, Encrypting(KeyOf(5), Cipher::kXChaCha20Poly1305));
  auto r = CheckpointReader::Open(NewMemoryFile("other.hlt", other.file), ro);
  REQUIRE_FALSE(r.has_value());
  CHECK(r.error().code() == StatusCode::kAuthFailed);
  CHECK_THAT(r.error().message(), Catch::Contains("key command exited with 3"));
  // A service that answers with another key than the id asked for is not believed.
  auto liar = std::make_shared<Keyring>();
  liar->SetFetch([](const KeyId&) -> Result<EncryptionKey> { return KeyOf(9); });
  ro.keyring = liar;
  CHECK_FALSE(CheckpointReader::Open(NewMemoryFile("other.hlt", other.file), ro).has_value());
}

TEST_CASE("without its key an encrypted file shows its structure and checks its checksums, and nothing else",
          "[encryption]") {
  const auto mem = Memory(200, 9);
  Saved s = Save(mem, Encrypting(KeyOf(1), Cipher::kXChaCha20Poly1305));
  ReaderOptions ro;
  ro.open_without_key = true;
  auto r = CheckpointReader::Open(NewMemoryFile("enc.hlt", s.file), ro);
  REQUIRE(r.has_value());
  CHECK((*r)->sealed());
  CHECK((*r)->encrypted());
  CHECK((*r)->total_pages() == 0);
  CHECK((*r)->regions().size() == 1);
  CHECK((*r)->regions()[0].size == mem.size());
  CHECK_FALSE((*r)->blocks().empty());
  CHECK((*r)->blobs().size() == 2);
  CHECK((*r)->VerifyAll().ok());
  std::vector<uint8_t> buf((*r)->blocks()[0].raw_length());
  Status read = (*r)->ReadBlock(0, buf);
  CHECK(read.code() == StatusCode::kAuthFailed);
  CHECK_THAT(read.message(), Catch::Contains(KeyIdHex(*ComputeKeyId(KeyOf(1)))));
  CHECK((*r)->ReadBlob("tiny").error().code() == StatusCode::kAuthFailed);
  // A damaged payload is found without the key.
  auto damaged = s.file;
  damaged[(*r)->blocks()[0].offset + 3] ^= 1;
  auto d = CheckpointReader::Open(NewMemoryFile("enc.hlt", damaged), ro);
  REQUIRE(d.has_value());
  CHECK((*d)->VerifyAll().code() == StatusCode::kCorrupt);
  // With the key in the keyring, open_without_key changes nothing.
  ro.keyring = RingOf({KeyOf(1)});
  auto k = CheckpointReader::Open(NewMemoryFile("enc.hlt", s.file), ro);
  REQUIRE(k.has_value());
  CHECK_FALSE((*k)->sealed());
  CheckContent(**k, mem);
}

TEST_CASE("a byte changed anywhere in an encrypted file is refused, never read as other content", "[encryption]") {
  std::vector<uint8_t> mem = Memory(40, 11);
  WriterOptions o = Encrypting(KeyOf(1), Cipher::kXChaCha20Poly1305);
  o.block_pages = 8;
  o.frame_pages = 4;
  Saved s = Save(mem, o);
  ReaderOptions ro;
  ro.keyring = RingOf({KeyOf(1)});
  // As damaged (the checksums catch it), then with every checksum recomputed (an adversary who forges XXH3: the
  // tags catch it), then also with the index tag recomputed (only the key's holder could: a unit's own tag, or a
  // rule behind the index tag, catches it).
  const uint64_t index_offset = halite::LoadLe64(&s.file[s.file.size() - 64]);
  for (int reseal = 0; reseal < 3; ++reseal) {
    INFO("reseal " << reseal);
    size_t auth = 0, corrupt = 0;
    for (size_t i = 0; i < s.file.size(); ++i) {
      // Every byte of the header, the index and the footer; payload bytes spaced out (each unit still hit).
      if (i >= 64 && i < index_offset && i % 11 != 0) continue;
      auto f = s.file;
      f[i] ^= 0x20;
      if (reseal == 1) testing::ResealAllChecksums(f);
      if (reseal == 2) testing::ResealWithKey(f, KeyOf(1));
      if (f == s.file) continue;  // the reseal restored the byte (it was a checksum)
      auto r = CheckpointReader::Open(NewMemoryFile("enc.hlt", f), ro);
      Status st = r.has_value() ? (*r)->VerifyAll() : r.error();
      if (st.ok()) {
        // Only a reseal with the key may leave a change the format does not see: none may change content.
        if (reseal < 2) FAIL("a change at offset " << i << " was accepted");
        CheckContent(**r, mem);
        continue;
      }
      if (st.code() == StatusCode::kAuthFailed) ++auth;
      else if (st.code() == StatusCode::kCorrupt || st.code() == StatusCode::kUnsupported) ++corrupt;
      else FAIL("offset " << i << ": " << st.ToString());
    }
    CHECK(corrupt > 0);
    if (reseal > 0) CHECK(auth > 0);
  }
}

TEST_CASE("the writer refuses a MAC key with encryption, and a chosen file id", "[encryption]") {
  std::vector<uint8_t> out;
  WriterOptions o = Encrypting(KeyOf(1), Cipher::kXChaCha20Poly1305);
  o.mac_key = KeyOf(2);
  CHECK(CheckpointWriter::Create(NewMemorySink("x", &out), o).error().code() == StatusCode::kInvalidArgument);
  o = Encrypting(KeyOf(1), Cipher::kXChaCha20Poly1305);
  o.file_id = FileId{1, 2, 3};
  CHECK(CheckpointWriter::Create(NewMemorySink("x", &out), o).error().code() == StatusCode::kInvalidArgument);
}

TEST_CASE("two saves of the same memory with the same key share no ciphertext", "[encryption]") {
  const auto mem = Memory(64, 13);
  Saved a = Save(mem, Encrypting(KeyOf(1), Cipher::kXChaCha20Poly1305), false);
  Saved b = Save(mem, Encrypting(KeyOf(1), Cipher::kXChaCha20Poly1305), false);
  REQUIRE(a.file.size() == b.file.size());
  // Fresh file ids give fresh file keys: the payload bytes have nothing in common beyond chance.
  size_t equal = 0;
  for (size_t i = 64; i < a.file.size() - 64; ++i) equal += a.file[i] == b.file[i];
  CHECK(equal < a.file.size() / 64);
}

TEST_CASE("a chain may mix keys: a child under one key of a parent under another", "[encryption][chain]") {
  testing::TempDir dir;
  auto mem = Memory(128, 17);
  {
    WriterOptions o = Encrypting(KeyOf(1), Cipher::kXChaCha20Poly1305);
    auto w = CheckpointWriter::Create(dir.File("base.hlt"), o);
    REQUIRE(w.has_value());
    auto r = (*w)->AddRegion("ram", 0, mem.size());
    for (size_t p = 0; p < 128; ++p) REQUIRE((*w)->PutPage(*r, p, std::span(mem.data() + p * kPage, kPage)).ok());
    REQUIRE((*w)->Finish().has_value());
  }
  for (size_t p = 0; p < 128; p += 9) std::memset(mem.data() + p * kPage, int(p), 100);  // some pages change
  ReaderOptions base_keys;
  base_keys.keyring = RingOf({KeyOf(1)});
  auto parent = CheckpointReader::Open(dir.File("base.hlt"), base_keys);
  REQUIRE(parent.has_value());
  {
    WriterOptions o = Encrypting(KeyOf(2), Cipher::kXChaCha20Poly1305);
    o.parent = std::shared_ptr<const CheckpointReader>(std::move(*parent));
    auto w = CheckpointWriter::Create(dir.File("child.hlt"), o);
    REQUIRE(w.has_value());
    auto r = (*w)->AddRegion("ram", 0, mem.size());
    for (size_t p = 0; p < 128; ++p) REQUIRE((*w)->PutPage(*r, p, std::span(mem.data() + p * kPage, kPage)).ok());
    auto sum = (*w)->Finish();
    REQUIRE(sum.has_value());
    CHECK(sum->in_parent_pages > 0);
  }
  ReaderOptions both;
  both.keyring = RingOf({KeyOf(1), KeyOf(2)});
  auto child = CheckpointReader::Open(dir.File("child.hlt"), both);
  REQUIRE(child.has_value());
  CHECK((*child)->chain().size() == 2);
  REQUIRE((*child)->VerifyAll().ok());
  CheckContent(**child, mem);
  // The child's key alone: refused at open, naming the parent's key id.
  ReaderOptions child_only;
  child_only.keyring = RingOf({KeyOf(2)});
  child_only.open_without_key = true;  // never applies to a parent
  auto refused = CheckpointReader::Open(dir.File("child.hlt"), child_only);
  REQUIRE_FALSE(refused.has_value());
  CHECK(refused.error().code() == StatusCode::kAuthFailed);
  CHECK_THAT(refused.error().message(), Catch::Contains(KeyIdHex(*ComputeKeyId(KeyOf(1)))) &&
                                            Catch::Contains("base.hlt"));
}

TEST_CASE("an encrypting writer's staging file never holds a plaintext page", "[encryption]") {
  testing::TempDir dir;
  for (bool encrypted : {false, true}) {
    writer::PageStore store;
    if (encrypted) REQUIRE(store.EncryptStaging(codec::AeadAlgorithm::kXChaCha20Poly1305).ok());
    const auto mem = Memory(600, 19);  // more than the staging buffer: some pages reach the file before Seal
    store.Resize(600);
    for (size_t p = 0; p < 600; ++p) REQUIRE(store.Put(p, std::span(mem.data() + p * kPage, kPage), dir.path()).ok());
    // A page given again (live saves resend dirty pages) is sealed anew, in place.
    std::vector<uint8_t> again(kPage, 0x5a);
    std::memcpy(again.data() + 100, kMarker.data(), kMarker.size());
    REQUIRE(store.Put(3, again, dir.path()).ok());
    REQUIRE(store.Seal().ok());
    const int fd = store.staging_fd_for_testing();
    REQUIRE(fd >= 0);
    std::vector<uint8_t> staged(size_t(lseek(fd, 0, SEEK_END)));
    REQUIRE(pread(fd, staged.data(), staged.size(), 0) == ssize_t(staged.size()));
    CHECK(Contains(staged, kMarker) == !encrypted);
    std::vector<uint8_t> page(kPage);
    for (size_t p = 0; p < 600; ++p) {
      if (store.state(p) != writer::PageState::kStaged) continue;
      REQUIRE(store.Read(p, page.data()).ok());
      const uint8_t* want = p == 3 ? again.data() : mem.data() + p * kPage;
      if (!std::equal(page.begin(), page.end(), want)) FAIL("page " << p << " read back differs");
    }
    if (encrypted) {
      // A staged slot changed on disk is refused, not read as other content.
      uint8_t byte;
      REQUIRE(pread(fd, &byte, 1, 10) == 1);
      byte ^= 1;
      REQUIRE(pwrite(fd, &byte, 1, 10) == 1);
      size_t refused = 0;
      for (size_t p = 0; p < 600; ++p) {
        if (store.state(p) != writer::PageState::kStaged) continue;
        if (!store.Read(p, page.data()).ok()) {
          ++refused;
          continue;
        }
        const uint8_t* want = p == 3 ? again.data() : mem.data() + p * kPage;
        if (!std::equal(page.begin(), page.end(), want)) FAIL("page " << p << " read back differs");
      }
      CHECK(refused == 1);
    }
  }
}

namespace {

// A child's pages coded against its parent (format-spec 5.4 BASED) under encryption: the base is the parent's
// plaintext, read with the parent's own key.
std::shared_ptr<const CheckpointReader> OpenKeyed(const std::string& path, std::initializer_list<EncryptionKey> keys) {
  ReaderOptions o;
  o.keyring = RingOf(keys);
  auto r = CheckpointReader::Open(path, o);
  INFO((r ? std::string() : r.error().ToString()));
  REQUIRE(r);
  return std::shared_ptr<const CheckpointReader>(std::move(*r));
}

WriteSummary SaveImage(const std::string& path, std::span<const uint8_t> image, std::optional<EncryptionKey> key,
                       std::shared_ptr<const CheckpointReader> parent) {
  WriterOptions o = ScratchWriterOptions();
  o.encryption_key = key;
  o.cipher = Cipher::kAes256Gcm;
  o.parent = std::move(parent);
  o.code_against_parent = true;
  return SaveRamImage(path, image, o);
}

// Every group of the view read once (as a restore reads them) and every page read alone.
void CheckWhole(const CheckpointReader& r, std::span<const uint8_t> image) {
  REQUIRE(r.total_pages() * kPage == image.size());
  std::vector<uint8_t> raw;
  for (uint32_t b = 0; b < r.blocks().size(); ++b) {
    raw.resize(r.blocks()[b].raw_length());
    REQUIRE(r.ReadBlock(b, raw).ok());
    for (const BlockMember& m : r.BlockMembers(b)) {
      INFO("page " << m.page << " block " << b << " slot " << m.slot);
      REQUIRE(std::memcmp(raw.data() + size_t(m.slot) * kPage, image.data() + size_t(m.page) * kPage, kPage) == 0);
    }
  }
  std::vector<uint8_t> page(kPage);
  for (uint64_t g = 0; g < r.total_pages(); ++g) {
    REQUIRE(r.ReadPage(g, page).ok());
    if (std::memcmp(page.data(), image.data() + g * kPage, kPage) != 0) FAIL("page " << g << " differs");
  }
}

std::vector<uint8_t> FileBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// The BASED blocks of the file itself (opened without its key: no parent followed, the file's own blocks).
uint64_t OwnBasedBlocks(const std::string& path) {
  ReaderOptions o;
  o.open_without_key = true;
  auto r = CheckpointReader::Open(path, o);
  REQUIRE(r);
  return uint64_t(std::count_if((*r)->blocks().begin(), (*r)->blocks().end(), [](const BlockInfo& b) { return b.based(); }));
}

}  // namespace

TEST_CASE("an encrypted child coded against its parent (BASED) is read and verified and rekeyed", "[encryption][chain]") {
  testing::TempDir dir;
  const auto pool = testing::GeneratedPool(uint64_t(4) << 18, 5);
  const std::vector<uint8_t> parent_image = testing::BuildMemoryImage(pool, 1024, testing::ImageRecipe{}, 5);
  std::vector<uint8_t> child_image = parent_image;
  REQUIRE(!testing::RewritePages(child_image, 0.03, 0.01, 7).empty());
  const EncryptionKey kp = KeyOf(11), kc = KeyOf(12), kr = KeyOf(13);
  for (bool parent_encrypted : {true, false}) {
    DYNAMIC_SECTION("parent " << (parent_encrypted ? "encrypted" : "not encrypted")) {
      SaveImage(dir.File("p.hlt"), parent_image, parent_encrypted ? std::optional(kp) : std::nullopt, nullptr);
      auto parent = OpenKeyed(dir.File("p.hlt"), {kp});
      const WriteSummary sum = SaveImage(dir.File("c.hlt"), child_image, kc, parent);
      CHECK(sum.based_blocks > 0);
      CHECK(OwnBasedBlocks(dir.File("c.hlt")) == sum.based_blocks);
      auto child = OpenKeyed(dir.File("c.hlt"), {kp, kc});
      REQUIRE((*child).VerifyAll().ok());
      CheckWhole(*child, child_image);
      // Without the parent's key the child is refused at open, naming the parent's key id.
      if (parent_encrypted) {
        ReaderOptions only_child;
        only_child.keyring = RingOf({kc});
        auto refused = CheckpointReader::Open(dir.File("c.hlt"), only_child);
        REQUIRE_FALSE(refused);
        CHECK(refused.error().code() == StatusCode::kAuthFailed);
        CHECK_THAT(refused.error().message(), Catch::Contains(KeyIdHex(*ComputeKeyId(kp))));
      }
      // Rekeyed: the same BASED blocks, sealed under the new key, still decoded against the parent's content.
      RekeyOptions ro;
      ro.reader.keyring = RingOf({kp, kc});
      ro.key = kr;
      ro.sink.sync = false;
      auto rekeyed = RekeyCheckpoint(dir.File("c.hlt"), dir.File("c2.hlt"), ro);
      INFO((rekeyed ? std::string() : rekeyed.error().ToString()));
      REQUIRE(rekeyed);
      CHECK(OwnBasedBlocks(dir.File("c2.hlt")) == sum.based_blocks);
      auto again = OpenKeyed(dir.File("c2.hlt"), {kp, kr});
      REQUIRE(again->VerifyAll().ok());
      CheckWhole(*again, child_image);
      // A byte of a sealed BASED block changed (checksums recomputed as anyone can): refused, never decoded.
      ReaderOptions sealed_view;
      sealed_view.open_without_key = true;
      auto own = CheckpointReader::Open(dir.File("c2.hlt"), sealed_view);
      REQUIRE(own);
      const auto& blocks = (*own)->blocks();
      const auto based = std::find_if(blocks.begin(), blocks.end(), [](const BlockInfo& b) { return b.based(); });
      REQUIRE(based != blocks.end());
      const uint64_t at = based->offset + based->stored_length / 2;
      own->reset();
      std::vector<uint8_t> file = FileBytes(dir.File("c2.hlt"));
      file[at] ^= 0x20;
      testing::ResealWithKey(file, kr);  // every checksum and the index tag: the block's own tag decides
      std::ofstream(dir.File("c2.hlt"), std::ios::binary | std::ios::trunc)
          .write(reinterpret_cast<const char*>(file.data()), std::streamsize(file.size()));
      auto tampered = OpenKeyed(dir.File("c2.hlt"), {kp, kr});
      const Status v = tampered->VerifyAll();
      CHECK(v.code() == StatusCode::kAuthFailed);
    }
  }
}
