#include <cstring>
#include <catch2/catch.hpp>

#include "halite/bytes.h"
#include "halite/qemu/qemu_return_path.h"
#include "qemu_test_streams.h"

namespace halite::qemu {
namespace {

std::vector<ReturnPathMessage> ReadAll(const std::string& bytes, Status* status) {
  MemorySource src(std::span(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()), 3);
  ReturnPathReader r(&src);
  std::vector<ReturnPathMessage> out;
  for (;;) {
    auto m = r.Next();
    if (!m.has_value()) {
      *status = m.error();
      return out;
    }
    if (!m->has_value()) {
      *status = Status::Ok();
      return out;
    }
    out.push_back(**m);
  }
}

std::string Msg(uint16_t type, const std::string& payload) {
  std::string s;
  PutBe16(&s, type);
  PutBe16(&s, static_cast<uint16_t>(payload.size()));
  return s + payload;
}

TEST_CASE("return path messages parse", "[return-path]") {
  Status s;
  auto msgs = ReadAll(testing::BuildSampleReturnPath(), &s);
  REQUIRE(s.ok());
  REQUIRE(msgs.size() == 4);
  REQUIRE(msgs[0].type == ReturnPathType::kPong);
  REQUIRE(msgs[0].value == 7);
  REQUIRE(msgs[1].type == ReturnPathType::kReqPagesId);
  REQUIRE(msgs[1].block_name == "pc.ram");
  REQUIRE(msgs[1].offset == 0x3000);
  REQUIRE(msgs[1].length == 0x1000);
  REQUIRE(msgs[2].type == ReturnPathType::kReqPages);
  REQUIRE(msgs[2].block_name == "pc.ram");
  REQUIRE(msgs[2].offset == 0x5000);
  REQUIRE(msgs[3].type == ReturnPathType::kShut);
  REQUIRE(msgs[3].value == 0);
}

TEST_CASE("return path RECV_BITMAP carries its bitmap", "[return-path]") {
  std::string p;
  PutU8(&p, 6);
  p += "pc.ram";
  std::string s = Msg(5, p);
  PutBe64(&s, 16);
  s += std::string(16, '\xa5');
  PutBe64(&s, kRecvBitmapEnding);
  s += Msg(6, std::string("\0\0\0\1", 4));
  Status st;
  auto msgs = ReadAll(s, &st);
  REQUIRE(st.ok());
  REQUIRE(msgs.size() == 2);
  REQUIRE(msgs[0].bitmap == std::string(16, '\xa5'));
  REQUIRE(msgs[1].type == ReturnPathType::kResumeAck);
  REQUIRE(msgs[1].value == 1);
  s[4 + 7 + 8 + 16] ^= 1;  // end marker
  ReadAll(s, &st);
  REQUIRE(st.message().find("bitmap end marker") != std::string::npos);
}

TEST_CASE("return path RECV_BITMAP is bounded by the largest block before it is allocated", "[return-path]") {
  // pc.ram of 16 pages: 2 bytes of bits, rounded up to one 64-bit word; a block of 65 pages needs two words.
  std::vector<RamBlockInfo> blocks = {{"pc.ram", 16 * 4096}, {"pc.bios", 2 * 4096}};
  CHECK(MaxRecvBitmapBytes(blocks) == 8);
  blocks.push_back({"big", 65 * 4096});
  CHECK(MaxRecvBitmapBytes(blocks) == 16);
  CHECK(MaxRecvBitmapBytes({}) == 0);

  auto bitmap_message = [](uint64_t size) {
    std::string p;
    PutU8(&p, 6);
    p += "pc.ram";
    std::string s = Msg(5, p);
    PutBe64(&s, size);
    return s;
  };
  for (uint64_t size : {uint64_t{16}, uint64_t{1} << 40}) {
    std::string s = bitmap_message(size);
    if (size == 16) {
      s += std::string(16, '\x01');
      PutBe64(&s, kRecvBitmapEnding);
    }
    MemorySource src(std::span(reinterpret_cast<const uint8_t*>(s.data()), s.size()));
    ReturnPathReader r(&src, "return path", MaxRecvBitmapBytes(blocks));
    auto m = r.Next();
    INFO(size);
    if (size == 16) {
      REQUIRE(m.has_value());
      CHECK((*m)->bitmap.size() == 16);
    } else {
      REQUIRE_FALSE(m.has_value());
      CHECK(m.error().code() == StatusCode::kCorrupt);
      CHECK_THAT(m.error().message(),
                 Catch::Contains("return path: offset 0xb: RECV_BITMAP size 1099511627776 (expected a multiple of 8 "
                                 "up to 16)"));
    }
  }
}

TEST_CASE("return path rejects bad lengths and types", "[return-path]") {
  struct Case {
    std::string bytes;
    std::string fragment;
  };
  std::string req_id;
  PutBe64(&req_id, 0);
  PutBe32(&req_id, 4096);
  PutU8(&req_id, 6);
  const std::vector<Case> cases = {
      {Msg(1, "abc"), "SHUT message length 3 (expected 4)"},
      {Msg(2, "abcde"), "PONG message length 5 (expected 4)"},
      {Msg(4, std::string(11, '\0')), "REQ_PAGES message length 11 (expected 12)"},
      {Msg(4, std::string(12, '\0')), "REQ_PAGES before any REQ_PAGES_ID"},
      {Msg(3, req_id + "pc.ra"), "REQ_PAGES_ID message length 18 (expected 19"},
      {Msg(3, req_id.substr(0, 12) + std::string(1, '\0') + "x"), "REQ_PAGES_ID message length 14"},
      {Msg(9, ""), "unknown message type 9"},
      {Msg(0, ""), "unknown message type 0"},
      {Msg(5, std::string("\x05pc.ram", 7)), "RECV_BITMAP message length 7"},
      {Msg(1, "ab").substr(0, 5), "unexpected end of stream"},
  };
  for (const auto& c : cases) {
    Status st;
    ReadAll(c.bytes, &st);
    INFO(c.fragment + " / " + st.ToString());
    REQUIRE(st.code() == StatusCode::kCorrupt);
    REQUIRE(st.message().find(c.fragment) != std::string::npos);
    REQUIRE(st.message().rfind("return path: offset 0x", 0) == 0);
  }
  std::string zero_len;
  PutBe64(&zero_len, 0);
  PutBe32(&zero_len, 0);
  PutU8(&zero_len, 1);
  Status st;
  ReadAll(Msg(3, zero_len + "x"), &st);
  REQUIRE(st.message().find("length 0") != std::string::npos);
}

}  // namespace
}  // namespace halite::qemu
