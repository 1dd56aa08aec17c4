#include "halite/qemu/qmp_json.h"

#include <cmath>
#include <limits>
#include <sstream>

#include <fmt/format.h>

namespace halite::qemu {
namespace {

constexpr int kMaxDepth = 256;

// Thrown by the parse callback to stop at the depth limit; caught in ParseJson, never escapes.
struct TooDeep {
  size_t depth;
};

// SAX handler that only finds where the first top-level object or array ends: it stops the parse there (by
// returning false) so the stream position is just past its closing bracket.
class ValueEnd : public nlohmann::json_sax<Json> {
 public:
  bool null() override { return depth_ > 0; }
  bool boolean(bool) override { return depth_ > 0; }
  bool number_integer(number_integer_t) override { return depth_ > 0; }
  bool number_unsigned(number_unsigned_t) override { return depth_ > 0; }
  bool number_float(number_float_t, const string_t&) override { return depth_ > 0; }
  bool string(string_t&) override { return depth_ > 0; }
  bool binary(binary_t&) override { return depth_ > 0; }
  bool start_object(std::size_t) override { return ++depth_ <= kMaxDepth; }
  bool key(string_t&) override { return true; }
  bool end_object() override { return Close(); }
  bool start_array(std::size_t) override { return ++depth_ <= kMaxDepth; }
  bool end_array() override { return Close(); }
  bool parse_error(std::size_t position, const std::string&, const nlohmann::detail::exception& e) override {
    error_position_ = position;
    error_ = e.what();
    return false;
  }

  bool complete() const { return complete_; }
  int depth() const { return depth_; }
  // 1-based position of the character the error was found at; past the input when the input ended first.
  size_t error_position() const { return error_position_; }
  const std::string& error() const { return error_; }

 private:
  bool Close() {
    if (--depth_ > 0) return true;
    complete_ = true;
    return false;
  }
  int depth_ = 0;
  bool complete_ = false;
  size_t error_position_ = 0;
  std::string error_;
};

}  // namespace

Result<Json> ParseJson(std::string_view text, std::string_view what) {
  const auto limit_depth = [](int depth, Json::parse_event_t, Json&) {
    if (depth > kMaxDepth) throw TooDeep{static_cast<size_t>(depth)};
    return true;
  };
  try {
    return Json::parse(text.begin(), text.end(), limit_depth);
  } catch (const Json::parse_error& e) {
    return Status::Corrupt(fmt::format("{}: offset {:#x}: {}", what, e.byte > 0 ? e.byte - 1 : 0, e.what()));
  } catch (const Json::exception& e) {
    return Status::Corrupt(fmt::format("{}: {}", what, e.what()));
  } catch (const TooDeep&) {
    return Status::Corrupt(fmt::format("{}: nested deeper than {} levels", what, kMaxDepth));
  } catch (const std::bad_alloc&) {
    return Status::Internal(fmt::format("{}: out of memory parsing {} bytes", what, text.size()));
  }
}

std::string JsonText(const Json& value) { return value.dump(-1, ' ', false, Json::error_handler_t::replace); }

const Json* FindMember(const Json& value, std::string_view key) {
  if (!value.is_object()) return nullptr;
  const auto it = value.find(key);
  return it == value.end() ? nullptr : &*it;
}

const std::string& AsString(const Json& value) {
  static const std::string kEmpty;
  return value.is_string() ? value.get_ref<const std::string&>() : kEmpty;
}

int64_t AsInt(const Json& value) {
  if (value.is_number_integer()) return value.get<int64_t>();
  if (!value.is_number_float()) return 0;
  const double d = value.get<double>();
  if (std::isnan(d)) return 0;
  if (d >= 9.2233720368547758e18) return std::numeric_limits<int64_t>::max();
  if (d <= -9.2233720368547758e18) return std::numeric_limits<int64_t>::min();
  return static_cast<int64_t>(d);
}

bool AsBool(const Json& value) { return value.is_boolean() && value.get<bool>(); }

size_t JsonFramer::ScanForEnd() {
  // Brackets count only outside strings; inside one, a backslash escapes the next byte (so \" does not end it).
  // Resumes where the last call stopped: each byte is looked at once however the value arrives.
  for (; scanned_ < buf_.size(); ++scanned_) {
    const char c = buf_[scanned_];
    if (in_string_) {
      if (escaped_) {
        escaped_ = false;
      } else if (c == '\\') {
        escaped_ = true;
      } else if (c == '"') {
        in_string_ = false;
      }
    } else if (c == '"') {
      in_string_ = true;
    } else if (c == '{' || c == '[') {
      ++depth_;
    } else if ((c == '}' || c == ']') && --depth_ == 0) {
      return ++scanned_;
    }
    if (depth_ > kMaxDepth) return std::string::npos;
  }
  return 0;
}

Result<bool> JsonFramer::Next(std::string* text) {
  if (scanned_ == 0) {
    // Whitespace between values goes right away so the buffer does not grow with it.
    const size_t first = buf_.find_first_not_of(" \t\r\n");
    const size_t skip = first == std::string::npos ? buf_.size() : first;
    buf_.erase(0, skip);
    consumed_ += skip;
    if (buf_.empty()) return false;
    if (buf_[0] != '{' && buf_[0] != '[') {
      return Status::Corrupt(fmt::format("qmp: offset {:#x}: unexpected byte {:#x} between messages (expected '{{')",
                                         consumed_, static_cast<unsigned char>(buf_[0])));
    }
  }
  // Where the value ends, found by a linear scan; the parser then checks that one value once (re-parsing the whole
  // buffer on every read was quadratic in a large reply's size).
  const size_t end = ScanForEnd();
  if (end == std::string::npos) {
    return Status::Corrupt(fmt::format("qmp: offset {:#x}: message nested deeper than {} levels", consumed_, kMaxDepth));
  }
  if (end == 0) return false;
  std::istringstream in(buf_.substr(0, end));
  ValueEnd sax;
  try {
    Json::sax_parse(in, &sax, nlohmann::detail::input_format_t::json, /*strict=*/false);
  } catch (const std::bad_alloc&) {
    return Status::Internal(fmt::format("qmp: out of memory framing {} bytes", end));
  }
  if (!sax.complete()) {
    if (sax.depth() > kMaxDepth) {
      return Status::Corrupt(
          fmt::format("qmp: offset {:#x}: message nested deeper than {} levels", consumed_, kMaxDepth));
    }
    const size_t at = std::min(sax.error_position(), end);
    return Status::Corrupt(fmt::format("qmp: offset {:#x}: {}", consumed_ + (at > 0 ? at - 1 : 0), sax.error()));
  }
  in.clear();
  // The scan and the parser agree on well-formed text; the parser's end is the one that counts.
  const auto parsed_end = static_cast<size_t>(in.tellg());
  const size_t take = parsed_end > 0 && parsed_end <= end ? parsed_end : end;
  text->assign(buf_, 0, take);
  buf_.erase(0, take);
  consumed_ += take;
  scanned_ = 0;
  depth_ = 0;
  in_string_ = escaped_ = false;
  return true;
}

}  // namespace halite::qemu
