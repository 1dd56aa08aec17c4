// libFuzzer target for what the QMP client reads from QEMU's monitor socket: the byte stream the framer splits
// into messages (wired into the fuzz build by the top level; replayed under ctest as fuzz-replay/qmp_framer_fuzz).
//
// The first input byte picks the read size (1-256 bytes), the rest is the stream. Properties, whatever the bytes:
// the framer never crashes or hangs; every message it returns is one value the parser accepts; the messages and
// the whitespace between them are exactly the stream's prefix it consumed; and reading the same stream in one
// piece gives the same messages and the same verdict as reading it in pieces.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "halite/qemu/qmp_json.h"

using namespace halite;
using namespace halite::qemu;

namespace {

struct Framed {
  std::vector<std::string> messages;
  bool failed = false;
};

Framed FrameInPieces(std::string_view stream, size_t piece) {
  Framed out;
  JsonFramer framer;
  for (size_t at = 0; at < stream.size() && !out.failed; at += piece) {
    framer.Feed(stream.substr(at, piece));
    for (;;) {
      std::string text;
      auto next = framer.Next(&text);
      if (!next.has_value()) {
        out.failed = true;
        break;
      }
      if (!*next) break;
      out.messages.push_back(std::move(text));
    }
  }
  return out;
}

bool IsSpace(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; }

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const size_t piece = size_t(data[0]) + 1;
  const std::string_view stream(reinterpret_cast<const char*>(data) + 1, size - 1);
  const Framed pieces = FrameInPieces(stream, piece);
  size_t at = 0;
  for (const std::string& m : pieces.messages) {
    if (!ParseJson(m).has_value()) abort();  // a frame is one well-formed value
    while (at < stream.size() && IsSpace(stream[at])) ++at;
    if (stream.substr(at, m.size()) != m) abort();  // frames are the stream, in order, nothing dropped
    at += m.size();
  }
  // How the bytes arrive changes nothing: the same messages, and the same verdict on the rest.
  const Framed whole = FrameInPieces(stream, stream.size() + 1);
  if (whole.messages != pieces.messages || whole.failed != pieces.failed) abort();
  return 0;
}
