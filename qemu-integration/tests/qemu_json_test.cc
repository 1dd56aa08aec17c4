#include <cstring>
#include <catch2/catch.hpp>

#include "halite/qemu/qemu_json.h"

namespace halite::qemu {
namespace {

TEST_CASE("json parses and serializes QMP-like messages", "[json]") {
  auto r = Json::Parse(R"( {"return": {"status": "completed", "ram": {"total": 67641344, "mbps": 1738.18},
                             "list": [1, -2, true, false, null, "a\"b\\c\n"]}, "id": 3} )");
  REQUIRE(r.has_value());
  const Json& j = *r;
  REQUIRE(j.Find("id")->as_int() == 3);
  const Json* ret = j.Find("return");
  REQUIRE(ret->Find("status")->as_string() == "completed");
  REQUIRE(ret->Find("ram")->Find("total")->is_int());
  REQUIRE(ret->Find("ram")->Find("total")->as_int() == 67641344);
  REQUIRE(ret->Find("ram")->Find("mbps")->as_double() == Approx(1738.18));
  REQUIRE(ret->Find("list")->items().size() == 6);
  REQUIRE(ret->Find("list")->items()[5].as_string() == "a\"b\\c\n");
  REQUIRE(ret->Find("missing") == nullptr);
  auto again = Json::Parse(j.Serialize());
  REQUIRE(again.has_value());
  REQUIRE(*again == j);
}

TEST_CASE("json handles unicode escapes and big numbers", "[json]") {
  auto r = Json::Parse(R"(["\u00e9\u20ac\ud83d\ude00", 18446744073709551615, -9223372036854775808, 1e3, 0.5])");
  REQUIRE(r.has_value());
  REQUIRE(r->items()[0].as_string() == "\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80");
  REQUIRE(!r->items()[1].is_int());
  REQUIRE(r->items()[1].as_double() == Approx(1.8446744073709552e19));
  REQUIRE(r->items()[2].as_int() == INT64_MIN);
  REQUIRE(r->items()[3].as_double() == 1000.0);
  REQUIRE(Json(std::string("\x01\x1f")).Serialize() == "\"\\u0001\\u001f\"");
  REQUIRE(Json(uint64_t{1} << 63).is_int() == false);
}

TEST_CASE("json builds objects in order and replaces members", "[json]") {
  Json j = Json::Obj({{"execute", "migrate"}, {"arguments", Json::Obj({{"uri", "fd:x"}})}});
  j.Set("id", 1);
  j.Set("id", 2);
  REQUIRE(j.Serialize() == R"({"execute":"migrate","arguments":{"uri":"fd:x"},"id":2})");
  Json a;
  a.Push(1);
  a.Push(Json());
  REQUIRE(a.Serialize() == "[1,null]");
}

TEST_CASE("json rejects malformed text with an offset", "[json]") {
  const char* bad[] = {"",        "{",          "{\"a\" 1}",   "[1,]",        "{\"a\":1,}",  "\"abc",
                       "\"a\x01\"", "tru",        "01x",         "[1] 2",       "\"\\ud800\"", "\"\\q\"",
                       "-",       "1.",         "1e",          "{1:2}",       "\"\\u12g4\""};
  for (const char* b : bad) {
    auto r = Json::Parse(b, "test");
    INFO(b);
    REQUIRE_FALSE(r.has_value());
    REQUIRE(r.error().code() == StatusCode::kCorrupt);
    REQUIRE(r.error().message().rfind("test: offset 0x", 0) == 0);
  }
  std::string deep(300, '[');
  deep += std::string(300, ']');
  REQUIRE_FALSE(Json::Parse(deep).has_value());
}

TEST_CASE("json framer splits a byte stream into messages", "[json]") {
  const std::string stream =
      "{\"QMP\": {\"version\": {}}}\r\n{\"event\": \"STOP\", \"data\": {\"s\": \"}{\\\"\"}}\r\n{\"return\": {}}\r\n";
  for (size_t chunk : {1, 2, 5, 1000}) {
    JsonFramer f;
    std::vector<std::string> got;
    for (size_t i = 0; i < stream.size(); i += chunk) {
      f.Feed(std::string_view(stream).substr(i, chunk));
      std::string t;
      for (;;) {
        auto n = f.Next(&t);
        REQUIRE(n.has_value());
        if (!*n) break;
        got.push_back(t);
      }
    }
    REQUIRE(got.size() == 3);
    REQUIRE(Json::Parse(got[1])->Find("data")->Find("s")->as_string() == "}{\"");
  }
  JsonFramer f;
  f.Feed("x{}");
  std::string t;
  REQUIRE_FALSE(f.Next(&t).has_value());
}

}  // namespace
}  // namespace halite::qemu
