// The golden vectors of test-vectors/ (written by the independent Python generator): every valid one decodes
// to its .expect events and round-trips; every damaged one is rejected with the listed code and message.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "halite/xen/xen_save_image.h"
#include "halite/xen/xen_stream_reader.h"
#include "xen_test_dump.h"

using namespace halite;
using namespace halite::xen;

namespace {

struct ManifestEntry {
  std::string name, format, expect, verifier, roundtrip, message;
};

std::string VectorDir() { return HALITE_XEN_VECTOR_DIR; }

std::vector<uint8_t> ReadBytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  REQUIRE(f.good());
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(f), {});
}

std::string ReadText(const std::string& path) {
  std::ifstream f(path);
  REQUIRE(f.good());
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::vector<ManifestEntry> LoadManifest() {
  std::vector<ManifestEntry> out;
  std::istringstream in(ReadText(VectorDir() + "/MANIFEST"));
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::vector<std::string> f;
    std::stringstream ls(line);
    std::string field;
    while (std::getline(ls, field, '\t')) f.push_back(field);
    REQUIRE(f.size() == 6);
    out.push_back({f[0], f[1], f[2], f[3], f[4], f[5]});
  }
  REQUIRE(out.size() >= 30);
  return out;
}

StreamFormat FormatOf(const std::string& f) {
  if (f == "libxl") return StreamFormat::kLibxl;
  if (f == "libxc") return StreamFormat::kLibxc;
  return StreamFormat::kXl;
}

}  // namespace

TEST_CASE("golden vectors decode to their expected events or errors", "[xen][vectors]") {
  for (const ManifestEntry& e : LoadManifest()) {
    DYNAMIC_SECTION(e.name) {
      auto bytes = ReadBytes(VectorDir() + "/" + e.name);
      ReadOptions options;
      options.format = FormatOf(e.format);
      options.source_name = e.name;
      MemorySource source(bytes);
      testing::DumpVisitor dump;
      Status s = ReadStream(source, dump, options);
      if (e.expect == "ok") {
        INFO(s.ToString());
        REQUIRE(s.ok());
        CHECK(dump.text() == ReadText(VectorDir() + "/" + e.name + ".expect"));
      } else {
        REQUIRE_FALSE(s.ok());
        INFO(s.message());
        CHECK(std::string(StatusCodeName(s.code())) == e.expect);
        CHECK(s.message().rfind(e.name + ": ", 0) == 0);
        CHECK_THAT(s.message(), Catch::Contains(e.message));
      }
    }
  }
}

TEST_CASE("valid vectors round-trip through import, state blob and export", "[xen][vectors]") {
  std::filesystem::create_directories(HALITE_XEN_EXPORT_DIR);
  for (const ManifestEntry& e : LoadManifest()) {
    if (e.expect != "ok") continue;
    DYNAMIC_SECTION(e.name) {
      auto bytes = ReadBytes(VectorDir() + "/" + e.name);
      ReadOptions options;
      options.format = FormatOf(e.format);
      options.source_name = e.name;
      MemorySource source(bytes);
      testing::MemoryPageStore store;
      auto image = ImportSaveStream(source, store, options);
      INFO(image.status().ToString());
      REQUIRE(image.has_value());

      auto decoded = DecodeXenState(EncodeXenState(*image));
      REQUIRE(decoded.has_value());
      REQUIRE(*decoded == *image);

      VectorSink out;
      Status s = ExportSaveStream(*decoded, store, out);
      INFO(s.ToString());
      REQUIRE(s.ok());
      std::ofstream(std::string(HALITE_XEN_EXPORT_DIR) + "/" + e.name, std::ios::binary)
          .write(reinterpret_cast<const char*>(out.data().data()), static_cast<std::streamsize>(out.data().size()));

      if (e.roundtrip == "exact") {
        CHECK(out.data() == bytes);
      } else {
        // Resent pages and verify copies are written once: same final pages, same kept records.
        REQUIRE(e.roundtrip == "final");
        CHECK(out.data().size() < bytes.size());
        MemorySource again(out.data());
        testing::MemoryPageStore store2;
        ImportStats stats;
        auto image2 = ImportSaveStream(again, store2, options, &stats);
        REQUIRE(image2.has_value());
        CHECK(stats.resent_entries == 0);
        CHECK(stats.verify_copy_batches == 0);
        CHECK(*image2 == *image);
        CHECK(store2.State() == store.State());
      }
    }
  }
}

TEST_CASE("live resends: the last copy of each pfn wins", "[xen][vectors]") {
  auto bytes = ReadBytes(VectorDir() + "/hvm-live-resend.xl");
  MemorySource source(bytes);
  testing::MemoryPageStore store;
  ImportStats stats;
  auto image = ImportSaveStream(source, store, ReadOptions{}, &stats);
  REQUIRE(image.has_value());
  CHECK(stats.resent_entries == 4);
  auto state = store.State();
  CHECK(state.at(6).first == PageType::kXtab);    // had data, became a hole
  CHECK(state.at(4).first == PageType::kNormal);  // was a hole, got data
  CHECK(image->pages.entry_count() == 8);
}
