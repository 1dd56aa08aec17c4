// halite/bytes.h: byte order and the bounded reader the format, QEMU and Xen parsers share.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "halite/bytes.h"

using namespace halite;

TEST_CASE("loads and stores spell out both byte orders", "[bytes]") {
  const uint8_t b[8] = {0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x88};
  CHECK(LoadLe16(b) == 0x0201);
  CHECK(LoadLe32(b) == 0x04030201u);
  CHECK(LoadLe64(b) == 0x8807060504030201ull);
  CHECK(LoadBe16(b) == 0x0102);
  CHECK(LoadBe32(b) == 0x01020304u);
  CHECK(LoadBe64(b) == 0x0102030405060788ull);
  uint8_t out[8] = {};
  StoreLe64(out, 0x8807060504030201ull);
  CHECK(std::equal(out, out + 8, b));
  StoreBe64(out, 0x0102030405060788ull);
  CHECK(std::equal(out, out + 8, b));
  StoreBe16(out, 0xa1b2);
  StoreLe16(out + 2, 0xa1b2);
  StoreBe32(out + 4, 0xc1c2c3c4);
  const uint8_t want[8] = {0xa1, 0xb2, 0xb2, 0xa1, 0xc1, 0xc2, 0xc3, 0xc4};
  CHECK(std::equal(out, out + 8, want));
}

TEST_CASE("Put appends to strings and vectors alike", "[bytes]") {
  std::string s;
  PutU8(&s, 0xff);
  PutBe16(&s, 0x0102);
  PutBe32(&s, 0x03040506);
  PutLe64(&s, 0x0807);
  CHECK(s == std::string("\xff\x01\x02\x03\x04\x05\x06\x07\x08\0\0\0\0\0\0", 15));
  std::vector<uint8_t> v;
  PutLe16(&v, 0x0102);
  PutLe32(&v, 0x03040506);
  PutBe64(&v, 1);
  CHECK(v == std::vector<uint8_t>{0x02, 0x01, 0x06, 0x05, 0x04, 0x03, 0, 0, 0, 0, 0, 0, 0, 1});
  std::vector<uint8_t> w;
  ByteWriter writer(&w);
  writer.U8(1);
  writer.U16(0x0302);
  writer.U32(0x07060504);
  writer.U64(0x0f0e0d0c0b0a0908);
  writer.PadTo(0, 8);
  CHECK(w.size() == 16);
  CHECK(LoadLe64(w.data() + 7) == 0x0f0e0d0c0b0a0908ull);
}

TEST_CASE("ByteCursor reads both byte orders and stops at the end", "[bytes]") {
  const std::vector<uint8_t> b = {0x01, 0x02, 0x03, 0x04, 0x05, 0x06};
  ByteCursor c(b, 0);
  CHECK(c.Be16() == 0x0102);
  CHECK(c.U16() == 0x0403);
  CHECK(c.remaining() == 2);
  CHECK(c.Be32() == 0);  // only 2 left
  CHECK_FALSE(c.ok());
  CHECK(c.remaining() == 0);
  CHECK(c.Bytes(1).empty());
}

TEST_CASE("ByteCursor's checked reads name the offset and what was read", "[bytes]") {
  const std::string blob("\x05\x00\x00\x00" "abc", 7);
  ByteCursor c(blob, 0x100, "state blob");
  auto n = c.ReadLe32("name length");
  REQUIRE(n.has_value());
  CHECK(*n == 5);
  auto name = c.ReadBytes(*n, "name");
  REQUIRE_FALSE(name.has_value());
  CHECK(name.error().code() == StatusCode::kCorrupt);
  CHECK(name.error().message() == "state blob: offset 0x104: name: needs 5 bytes, 3 left");
  // A failed checked read moves nothing: the same bytes can still be read.
  auto three = c.ReadBytes(3, "name");
  REQUIRE(three.has_value());
  CHECK(std::string(three->begin(), three->end()) == "abc");
  CHECK(c.ReadU8("end").error().message() == "state blob: offset 0x107: end: needs 1 bytes, 0 left");
  CHECK(c.Error("trailing garbage").message() == "state blob: offset 0x107: trailing garbage");
  ByteCursor unnamed(blob, 0);
  CHECK(unnamed.Error("bad").message() == "offset 0x0: bad");
}

TEST_CASE("ByteCursor refuses counts the remaining bytes cannot hold", "[bytes]") {
  std::vector<uint8_t> b;
  PutLe32(&b, 3);
  b.resize(4 + 3 * 8 - 1);
  ByteCursor c(b, 0, "runs");
  auto n = c.ReadLe32Count("run count", 8);
  REQUIRE_FALSE(n.has_value());
  CHECK(n.error().message() == "runs: offset 0x4: run count: 3 items cannot fit in the 23 bytes left");
  std::vector<uint8_t> huge;
  PutLe32(&huge, 0xffffffff);
  ByteCursor h(huge, 0);
  CHECK_FALSE(h.ReadLe32Count("count", 16).has_value());
  b.push_back(0);
  ByteCursor ok(b, 0);
  CHECK(ok.ReadLe32Count("run count", 8).value() == 3);
}
