#include "halite/qemu/qemu_json.h"

#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include <fmt/format.h>

#include "halite/qemu/qemu_byte_io.h"

namespace halite::qemu {

Json::Json(uint64_t v) : type_(Type::kNumber), double_(static_cast<double>(v)) {
  if (v <= static_cast<uint64_t>(INT64_MAX)) {
    is_int_ = true;
    int_ = static_cast<int64_t>(v);
  }
}

Json Json::Obj(std::initializer_list<Member> members) {
  Json j = Object();
  for (const auto& m : members) j.Set(m.first, m.second);
  return j;
}

const Json* Json::Find(std::string_view key) const {
  if (type_ != Type::kObject) return nullptr;
  for (const auto& m : members_) {
    if (m.first == key) return &m.second;
  }
  return nullptr;
}

Json& Json::Set(std::string key, Json value) {
  if (type_ == Type::kNull) type_ = Type::kObject;
  for (auto& m : members_) {
    if (m.first == key) {
      m.second = std::move(value);
      return m.second;
    }
  }
  members_.emplace_back(std::move(key), std::move(value));
  return members_.back().second;
}

Json& Json::Push(Json value) {
  if (type_ == Type::kNull) type_ = Type::kArray;
  items_.push_back(std::move(value));
  return items_.back();
}

bool operator==(const Json& a, const Json& b) {
  if (a.type_ != b.type_) return false;
  switch (a.type_) {
    case Json::Type::kNull: return true;
    case Json::Type::kBool: return a.bool_ == b.bool_;
    case Json::Type::kNumber:
      if (a.is_int_ && b.is_int_) return a.int_ == b.int_;
      return a.double_ == b.double_;
    case Json::Type::kString: return a.string_ == b.string_;
    case Json::Type::kArray: return a.items_ == b.items_;
    case Json::Type::kObject: return a.members_ == b.members_;
  }
  return false;
}

namespace {

void SerializeString(const std::string& s, std::string* out) {
  out->push_back('"');
  for (unsigned char c : s) {
    switch (c) {
      case '"': out->append("\\\""); break;
      case '\\': out->append("\\\\"); break;
      case '\n': out->append("\\n"); break;
      case '\r': out->append("\\r"); break;
      case '\t': out->append("\\t"); break;
      case '\b': out->append("\\b"); break;
      case '\f': out->append("\\f"); break;
      default:
        if (c < 0x20) {
          char buf[8];
          snprintf(buf, sizeof(buf), "\\u%04x", c);
          out->append(buf);
        } else {
          out->push_back(static_cast<char>(c));
        }
    }
  }
  out->push_back('"');
}

class Parser {
 public:
  Parser(std::string_view text, std::string_view what) : text_(text), what_(what) {}

  Result<Json> ParseDocument() {
    SkipWs();
    HLT_ASSIGN_OR_RETURN(Json v, ParseValue(0));
    SkipWs();
    if (pos_ != text_.size()) return Error("unexpected data after the value");
    return v;
  }

 private:
  static constexpr int kMaxDepth = 256;

  Status Error(const std::string& msg) const {
    return Status::Corrupt(std::string(what_) + ": offset " + fmt::format("{:#x}", pos_) + ": " + msg);
  }
  void SkipWs() {
    while (pos_ < text_.size() &&
           (text_[pos_] == ' ' || text_[pos_] == '\t' || text_[pos_] == '\n' || text_[pos_] == '\r')) {
      ++pos_;
    }
  }
  bool Literal(std::string_view word) {
    if (text_.substr(pos_, word.size()) != word) return false;
    pos_ += word.size();
    return true;
  }

  Result<Json> ParseValue(int depth) {
    if (depth > kMaxDepth) return Error("nesting deeper than " + std::to_string(kMaxDepth));
    if (pos_ >= text_.size()) return Error("unexpected end, expected a value");
    const char c = text_[pos_];
    if (c == '{') return ParseObject(depth);
    if (c == '[') return ParseArray(depth);
    if (c == '"') {
      std::string s;
      HLT_RETURN_IF_ERROR(ParseString(&s));
      return Json(std::move(s));
    }
    if (c == '-' || (c >= '0' && c <= '9')) return ParseNumber();
    if (Literal("true")) return Json(true);
    if (Literal("false")) return Json(false);
    if (Literal("null")) return Json(nullptr);
    return Error(std::string("unexpected character '") + (c >= 0x20 && c < 0x7f ? std::string(1, c) : fmt::format("{:#x}", c & 0xff)) +
                 "', expected a value");
  }

  Result<Json> ParseObject(int depth) {
    ++pos_;  // '{'
    Json obj = Json::Object();
    SkipWs();
    if (pos_ < text_.size() && text_[pos_] == '}') {
      ++pos_;
      return obj;
    }
    for (;;) {
      SkipWs();
      if (pos_ >= text_.size() || text_[pos_] != '"') return Error("expected '\"' starting an object key");
      std::string key;
      HLT_RETURN_IF_ERROR(ParseString(&key));
      SkipWs();
      if (pos_ >= text_.size() || text_[pos_] != ':') return Error("expected ':' after object key");
      ++pos_;
      SkipWs();
      HLT_ASSIGN_OR_RETURN(Json v, ParseValue(depth + 1));
      obj.Set(std::move(key), std::move(v));
      SkipWs();
      if (pos_ >= text_.size()) return Error("unexpected end inside an object");
      if (text_[pos_] == ',') {
        ++pos_;
        continue;
      }
      if (text_[pos_] == '}') {
        ++pos_;
        return obj;
      }
      return Error("expected ',' or '}' in an object");
    }
  }

  Result<Json> ParseArray(int depth) {
    ++pos_;  // '['
    Json arr = Json::Array();
    SkipWs();
    if (pos_ < text_.size() && text_[pos_] == ']') {
      ++pos_;
      return arr;
    }
    for (;;) {
      SkipWs();
      HLT_ASSIGN_OR_RETURN(Json v, ParseValue(depth + 1));
      arr.Push(std::move(v));
      SkipWs();
      if (pos_ >= text_.size()) return Error("unexpected end inside an array");
      if (text_[pos_] == ',') {
        ++pos_;
        continue;
      }
      if (text_[pos_] == ']') {
        ++pos_;
        return arr;
      }
      return Error("expected ',' or ']' in an array");
    }
  }

  static void AppendUtf8(uint32_t cp, std::string* out) {
    if (cp < 0x80) {
      out->push_back(static_cast<char>(cp));
    } else if (cp < 0x800) {
      out->push_back(static_cast<char>(0xc0 | (cp >> 6)));
      out->push_back(static_cast<char>(0x80 | (cp & 0x3f)));
    } else if (cp < 0x10000) {
      out->push_back(static_cast<char>(0xe0 | (cp >> 12)));
      out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3f)));
      out->push_back(static_cast<char>(0x80 | (cp & 0x3f)));
    } else {
      out->push_back(static_cast<char>(0xf0 | (cp >> 18)));
      out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3f)));
      out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3f)));
      out->push_back(static_cast<char>(0x80 | (cp & 0x3f)));
    }
  }

  Result<uint32_t> Hex4() {
    if (pos_ + 4 > text_.size()) return Error("truncated \\u escape");
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) {
      const char c = text_[pos_ + i];
      v <<= 4;
      if (c >= '0' && c <= '9') v |= c - '0';
      else if (c >= 'a' && c <= 'f') v |= c - 'a' + 10;
      else if (c >= 'A' && c <= 'F') v |= c - 'A' + 10;
      else return Error("bad hex digit in \\u escape");
    }
    pos_ += 4;
    return v;
  }

  Status ParseString(std::string* out) {
    ++pos_;  // opening quote
    for (;;) {
      if (pos_ >= text_.size()) return Error("unterminated string");
      const unsigned char c = static_cast<unsigned char>(text_[pos_]);
      if (c == '"') {
        ++pos_;
        return Status::Ok();
      }
      if (c < 0x20) return Error("control character " + fmt::format("{:#x}", c) + " inside a string");
      if (c != '\\') {
        out->push_back(static_cast<char>(c));
        ++pos_;
        continue;
      }
      ++pos_;
      if (pos_ >= text_.size()) return Error("unterminated escape");
      const char e = text_[pos_++];
      switch (e) {
        case '"': out->push_back('"'); break;
        case '\\': out->push_back('\\'); break;
        case '/': out->push_back('/'); break;
        case 'b': out->push_back('\b'); break;
        case 'f': out->push_back('\f'); break;
        case 'n': out->push_back('\n'); break;
        case 'r': out->push_back('\r'); break;
        case 't': out->push_back('\t'); break;
        case 'u': {
          HLT_ASSIGN_OR_RETURN(uint32_t cp, Hex4());
          if (cp >= 0xd800 && cp < 0xdc00) {
            // A high surrogate must be followed by a low one.
            if (!Literal("\\u")) return Error("lone high surrogate in \\u escape");
            HLT_ASSIGN_OR_RETURN(uint32_t lo, Hex4());
            if (lo < 0xdc00 || lo >= 0xe000) return Error("bad low surrogate in \\u escape");
            cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
          } else if (cp >= 0xdc00 && cp < 0xe000) {
            return Error("lone low surrogate in \\u escape");
          }
          AppendUtf8(cp, out);
          break;
        }
        default: return Error(std::string("unknown escape '\\") + e + "'");
      }
    }
  }

  Result<Json> ParseNumber() {
    const size_t start = pos_;
    bool integral = true;
    if (text_[pos_] == '-') ++pos_;
    if (pos_ >= text_.size() || !isdigit(static_cast<unsigned char>(text_[pos_]))) return Error("bad number");
    if (text_[pos_] == '0') {
      ++pos_;
    } else {
      while (pos_ < text_.size() && isdigit(static_cast<unsigned char>(text_[pos_]))) ++pos_;
    }
    if (pos_ < text_.size() && text_[pos_] == '.') {
      integral = false;
      ++pos_;
      if (pos_ >= text_.size() || !isdigit(static_cast<unsigned char>(text_[pos_]))) return Error("bad fraction");
      while (pos_ < text_.size() && isdigit(static_cast<unsigned char>(text_[pos_]))) ++pos_;
    }
    if (pos_ < text_.size() && (text_[pos_] == 'e' || text_[pos_] == 'E')) {
      integral = false;
      ++pos_;
      if (pos_ < text_.size() && (text_[pos_] == '+' || text_[pos_] == '-')) ++pos_;
      if (pos_ >= text_.size() || !isdigit(static_cast<unsigned char>(text_[pos_]))) return Error("bad exponent");
      while (pos_ < text_.size() && isdigit(static_cast<unsigned char>(text_[pos_]))) ++pos_;
    }
    const std::string num(text_.substr(start, pos_ - start));
    if (integral) {
      errno = 0;
      char* end = nullptr;
      const long long v = strtoll(num.c_str(), &end, 10);
      if (errno == 0) return Json(static_cast<int64_t>(v));
      if (num[0] != '-') {
        errno = 0;
        const unsigned long long u = strtoull(num.c_str(), &end, 10);
        if (errno == 0) return Json(static_cast<uint64_t>(u));
      }
    }
    return Json(strtod(num.c_str(), nullptr));
  }

  std::string_view text_;
  std::string_view what_;
  size_t pos_ = 0;
};

}  // namespace

void Json::SerializeTo(std::string* out) const {
  switch (type_) {
    case Type::kNull: out->append("null"); break;
    case Type::kBool: out->append(bool_ ? "true" : "false"); break;
    case Type::kNumber: {
      if (is_int_) {
        out->append(std::to_string(int_));
      } else if (!std::isfinite(double_)) {
        out->append("null");  // JSON has no NaN/Inf
      } else {
        char buf[40];
        snprintf(buf, sizeof(buf), "%.17g", double_);
        out->append(buf);
      }
      break;
    }
    case Type::kString: SerializeString(string_, out); break;
    case Type::kArray: {
      out->push_back('[');
      for (size_t i = 0; i < items_.size(); ++i) {
        if (i) out->push_back(',');
        items_[i].SerializeTo(out);
      }
      out->push_back(']');
      break;
    }
    case Type::kObject: {
      out->push_back('{');
      for (size_t i = 0; i < members_.size(); ++i) {
        if (i) out->push_back(',');
        SerializeString(members_[i].first, out);
        out->push_back(':');
        members_[i].second.SerializeTo(out);
      }
      out->push_back('}');
      break;
    }
  }
}

std::string Json::Serialize() const {
  std::string out;
  SerializeTo(&out);
  return out;
}

Result<Json> Json::Parse(std::string_view text, std::string_view what) { return Parser(text, what).ParseDocument(); }

Result<bool> JsonFramer::Next(std::string* text) {
  while (scan_ < buf_.size()) {
    const char c = buf_[scan_];
    if (!started_) {
      if (c == ' ' || c == '\t' || c == '\r' || c == '\n') {
        // Drop whitespace between values right away so the buffer does not grow with it.
        buf_.erase(0, scan_ + 1);
        scan_ = 0;
        continue;
      }
      if (c != '{' && c != '[') {
        return Status::Corrupt("qmp: unexpected byte " + fmt::format("{:#x}", static_cast<unsigned char>(c)) +
                               " between messages (expected '{')");
      }
      started_ = true;
      depth_ = 0;
    }
    ++scan_;
    if (in_string_) {
      if (escape_) {
        escape_ = false;
      } else if (c == '\\') {
        escape_ = true;
      } else if (c == '"') {
        in_string_ = false;
      }
      continue;
    }
    if (c == '"') {
      in_string_ = true;
    } else if (c == '{' || c == '[') {
      ++depth_;
    } else if (c == '}' || c == ']') {
      if (--depth_ == 0) {
        text->assign(buf_, 0, scan_);
        buf_.erase(0, scan_);
        scan_ = 0;
        started_ = false;
        return true;
      }
    }
  }
  return false;
}

}  // namespace halite::qemu
