#include <cstring>
#include <catch2/catch.hpp>
#include <fmt/format.h>

#include "halite/qemu/qmp_json.h"

namespace halite::qemu {
namespace {

TEST_CASE("json parses and serializes QMP-like messages", "[json]") {
  auto r = ParseJson(R"( {"return": {"status": "completed", "ram": {"total": 67641344, "mbps": 1738.18},
                             "list": [1, -2, true, false, null, "a\"b\\c\n"]}, "id": 3} )");
  REQUIRE(r.has_value());
  const Json& j = *r;
  REQUIRE(AsInt(*FindMember(j, "id")) == 3);
  const Json* ret = FindMember(j, "return");
  REQUIRE(AsString(*FindMember(*ret, "status")) == "completed");
  const Json* ram = FindMember(*ret, "ram");
  REQUIRE(FindMember(*ram, "total")->is_number_integer());
  REQUIRE(AsInt(*FindMember(*ram, "total")) == 67641344);
  REQUIRE(AsInt(*FindMember(*ram, "mbps")) == 1738);
  REQUIRE(FindMember(*ret, "list")->size() == 6);
  REQUIRE(AsString((*FindMember(*ret, "list"))[5]) == "a\"b\\c\n");
  REQUIRE(FindMember(*ret, "missing") == nullptr);
  auto again = ParseJson(JsonText(j));
  REQUIRE(again.has_value());
  REQUIRE(*again == j);
}

TEST_CASE("json accessors give neutral values for the wrong type, never throw", "[json]") {
  const Json j = Json::array({"text", 5, true, nullptr, 1e300, -1e300, 2.75});
  REQUIRE(FindMember(j, "x") == nullptr);  // not an object
  REQUIRE(FindMember(j[0], "x") == nullptr);
  REQUIRE(AsString(j[1]).empty());
  REQUIRE(AsInt(j[0]) == 0);
  REQUIRE(AsBool(j[1]) == false);
  REQUIRE(AsBool(j[2]) == true);
  REQUIRE(AsInt(j[3]) == 0);
  REQUIRE(AsInt(j[4]) == INT64_MAX);
  REQUIRE(AsInt(j[5]) == INT64_MIN);
  REQUIRE(AsInt(j[6]) == 2);
}

TEST_CASE("json handles unicode escapes, big numbers and invalid UTF-8", "[json]") {
  auto r = ParseJson(R"(["\u00e9\u20ac\ud83d\ude00", 18446744073709551615, -9223372036854775808, 1e3, 0.5])");
  REQUIRE(r.has_value());
  REQUIRE(AsString((*r)[0]) == "\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80");
  REQUIRE((*r)[1].is_number_unsigned());
  REQUIRE(AsInt((*r)[2]) == INT64_MIN);
  REQUIRE((*r)[3].get<double>() == 1000.0);
  REQUIRE(JsonText(Json(std::string("\x01\x1f"))) == "\"\\u0001\\u001f\"");
  // A path that is not UTF-8 (QEMU arguments carry file names) serializes instead of throwing.
  REQUIRE(JsonText(Json(std::string("a\xff" "b"))) == "\"a\xef\xbf\xbd" "b\"");
}

TEST_CASE("json builds QMP commands", "[json]") {
  Json j = Json::object({{"execute", "migrate"}, {"arguments", Json::object({{"uri", "fd:x"}})}});
  j["id"] = 1;
  j["id"] = 2;
  REQUIRE(ParseJson(JsonText(j)).value() == ParseJson(R"({"execute":"migrate","arguments":{"uri":"fd:x"},"id":2})").value());
  REQUIRE(JsonText(j).find('\n') == std::string::npos);
  Json a = Json::array();
  a.push_back(1);
  a.push_back(Json());
  REQUIRE(JsonText(a) == "[1,null]");
}

TEST_CASE("json rejects malformed text naming what and the offset", "[json]") {
  const char* bad[] = {"",        "{",          "{\"a\" 1}",   "[1,]",        "{\"a\":1,}",  "\"abc",
                       "\"a\x01\"", "tru",        "01x",         "[1] 2",       "\"\\ud800\"", "\"\\q\"",
                       "-",       "1.",         "1e",          "{1:2}",       "\"\\u12g4\""};
  for (const char* b : bad) {
    auto r = ParseJson(b, "test");
    INFO(b);
    REQUIRE_FALSE(r.has_value());
    REQUIRE(r.error().code() == StatusCode::kCorrupt);
    REQUIRE(r.error().message().rfind("test: offset 0x", 0) == 0);
  }
  auto colon = ParseJson("{\"a\" 1}", "vmdesc");
  REQUIRE(colon.error().message().find("offset 0x5") != std::string::npos);
  REQUIRE(colon.error().message().find("expected ':'") != std::string::npos);
  std::string deep(300, '[');
  deep += std::string(300, ']');
  auto too_deep = ParseJson(deep, "vmdesc");
  REQUIRE_FALSE(too_deep.has_value());
  REQUIRE(too_deep.error().message() == "vmdesc: nested deeper than 256 levels");
  std::string ok_depth = std::string(200, '[') + std::string(200, ']');
  REQUIRE(ParseJson(ok_depth).has_value());
}

std::vector<std::string> FrameAll(const std::string& stream, size_t chunk) {
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
  REQUIRE(f.buffered() == 0);
  return got;
}

TEST_CASE("json framer splits a byte stream into messages", "[json]") {
  const std::string stream =
      "{\"QMP\": {\"version\": {}}}\r\n{\"event\": \"STOP\", \"data\": {\"s\": \"}{\\\"\"}}\r\n{\"return\": {}}\r\n"
      "[1, 2.5, \"]\"]{\"return\": {\n  \"pretty\": true\n}}";
  for (size_t chunk : {1, 2, 5, 1000}) {
    auto got = FrameAll(stream, chunk);
    REQUIRE(got.size() == 5);
    REQUIRE(AsString(*FindMember(*FindMember(*ParseJson(got[1]), "data"), "s")) == "}{\"");
    REQUIRE(got[3] == "[1, 2.5, \"]\"]");
    REQUIRE(AsBool(*FindMember(*FindMember(*ParseJson(got[4]), "return"), "pretty")));
  }
}

TEST_CASE("json framer frames a large reply fed in small reads, escapes and brackets in strings included", "[json]") {
  // A reply like query-memory-devices on a big guest: megabytes, arriving 4 KiB at a time.
  std::string big = "{\"return\": [";
  for (int i = 0; i < 40000; ++i) {
    big += fmt::format("{}{{\"id\": \"dev{}\", \"s\": \"\\\\\", \"t\": \"]}}[{{\\\"\"}}", i ? ", " : "", i);
  }
  big += "]}";
  const std::string stream = big + "\r\n{\"event\": \"RESUME\"}\r\n";
  for (size_t chunk : {4096, 65536}) {
    auto got = FrameAll(stream, chunk);
    REQUIRE(got.size() == 2);
    REQUIRE(got[0] == big);
    auto parsed = ParseJson(got[0]);
    REQUIRE(parsed.has_value());
    const Json& list = *FindMember(*parsed, "return");
    REQUIRE(list.size() == 40000);
    REQUIRE(AsString(*FindMember(list[39999], "s")) == "\\");
    REQUIRE(AsString(*FindMember(list[39999], "t")) == "]}[{\"");
    REQUIRE(AsString(*FindMember(*ParseJson(got[1]), "event")) == "RESUME");
  }
}

TEST_CASE("json framer rejects stray bytes and malformed messages with their stream offset", "[json]") {
  std::string t;
  JsonFramer stray;
  stray.Feed("{}\n x{}");
  REQUIRE(stray.Next(&t).value());
  auto e = stray.Next(&t);
  REQUIRE_FALSE(e.has_value());
  REQUIRE(e.error().message().rfind("qmp: offset 0x4: unexpected byte 0x78", 0) == 0);

  JsonFramer bad;
  bad.Feed("{\"a\": 1}  {\"a\" 1}");
  REQUIRE(bad.Next(&t).value());
  auto m = bad.Next(&t);
  REQUIRE_FALSE(m.has_value());
  REQUIRE(m.error().code() == StatusCode::kCorrupt);
  REQUIRE(m.error().message().rfind("qmp: offset 0xf: ", 0) == 0);

  JsonFramer partial;  // incomplete is not an error: more bytes may come
  partial.Feed("{\"a\": \"unterminated");
  REQUIRE(partial.Next(&t).value() == false);
  partial.Feed("\"}");
  REQUIRE(partial.Next(&t).value());
  REQUIRE(t == "{\"a\": \"unterminated\"}");

  JsonFramer deep;
  deep.Feed(std::string(300, '['));
  REQUIRE_FALSE(deep.Next(&t).has_value());
}

}  // namespace
}  // namespace halite::qemu
