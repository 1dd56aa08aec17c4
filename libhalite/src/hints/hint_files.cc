#include "halite/hint_files.h"

#include <cerrno>
#include <charconv>
#include <fstream>
#include <sstream>

namespace halite {
namespace {

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t' || s.front() == '\r')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  return s;
}

bool ParseNumber(std::string_view s, uint64_t* out) {
  int base = 10;
  if (s.size() > 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X')) {
    s.remove_prefix(2);
    base = 16;
  }
  if (s.empty()) return false;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), *out, base);
  return ec == std::errc() && p == s.data() + s.size();
}

int HexDigit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// A byte a region name in a hint file must carry as %XX (hint-files.md, "Region names"): what would split a
// word or start a comment, the escape character itself, and anything outside printable ASCII.
bool NeedsEscape(unsigned char c) { return c <= ' ' || c > '~' || c == '#' || c == '%'; }

// Decodes the %XX escapes of a REGION; false (with *bad set to the offending text) for a '%' that is not
// followed by two hexadecimal digits.
bool UnescapeRegionName(std::string_view in, std::string* out, std::string_view* bad) {
  out->clear();
  for (size_t i = 0; i < in.size(); ++i) {
    if (in[i] != '%') {
      out->push_back(in[i]);
      continue;
    }
    const int hi = i + 1 < in.size() ? HexDigit(in[i + 1]) : -1;
    const int lo = i + 2 < in.size() ? HexDigit(in[i + 2]) : -1;
    if (hi < 0 || lo < 0) {
      *bad = in.substr(i, 3);
      return false;
    }
    out->push_back(static_cast<char>(hi * 16 + lo));
    i += 2;
  }
  return true;
}

// One parsed line: the page, and the remaining words.
class LineParser {
 public:
  LineParser(const std::string& file, std::span<const Region> regions) : file_(file), regions_(regions) {
    default_region_ = 0;
    for (size_t i = 0; i < regions.size(); ++i) {
      if (regions[i].name == "ram") default_region_ = uint32_t(i);
    }
  }

  Status Error(size_t line, const std::string& what) const {
    return Status::InvalidArgument(file_ + ":" + std::to_string(line) + ": " + what);
  }

  // Parses "PAGE" or "REGION:PAGE" and checks the page is inside its region (count pages from it).
  Result<PageRef> Page(std::string_view word, size_t line, uint64_t count) const {
    if (regions_.empty()) return Error(line, "no regions to resolve pages against");
    PageRef ref{default_region_, 0};
    std::string_view num = word;
    auto colon = word.rfind(':');
    if (colon != std::string_view::npos) {
      std::string rname;
      std::string_view bad;
      if (!UnescapeRegionName(word.substr(0, colon), &rname, &bad)) {
        return Error(line, "bad escape \"" + std::string(bad) + "\" in region name \"" +
                               std::string(word.substr(0, colon)) + "\" (expected % and two hexadecimal digits)");
      }
      num = word.substr(colon + 1);
      bool found = false;
      for (size_t i = 0; i < regions_.size(); ++i) {
        if (regions_[i].name == rname) {
          ref.region = uint32_t(i);
          found = true;
        }
      }
      if (!found) return Error(line, "unknown region \"" + rname + "\"");
    }
    if (!ParseNumber(num, &ref.page)) return Error(line, "expected a page number, got \"" + std::string(num) + "\"");
    uint64_t pages = regions_[ref.region].page_count();
    if (ref.page >= pages || count > pages - ref.page) {
      return Error(line, "page " + std::to_string(ref.page) + (count > 1 ? " +" + std::to_string(count) : "") +
                             " is outside region \"" + regions_[ref.region].name + "\" (" + std::to_string(pages) +
                             " pages)");
    }
    return ref;
  }

 private:
  const std::string& file_;
  std::span<const Region> regions_;
  uint32_t default_region_;
};

std::vector<std::string_view> Words(std::string_view s) {
  std::vector<std::string_view> w;
  size_t i = 0;
  while (i < s.size()) {
    while (i < s.size() && (s[i] == ' ' || s[i] == '\t')) ++i;
    size_t j = i;
    while (j < s.size() && s[j] != ' ' && s[j] != '\t') ++j;
    if (j > i) w.push_back(s.substr(i, j - i));
    i = j;
  }
  return w;
}

// Calls fn(line_number, words, blank) for every line; comments stripped.
template <typename F>
Status ForEachLine(std::string_view text, F fn) {
  size_t line_no = 0;
  while (!text.empty()) {
    ++line_no;
    size_t nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    text = nl == std::string_view::npos ? std::string_view() : text.substr(nl + 1);
    bool blank = Trim(line).empty();
    auto hash = line.find('#');
    if (hash != std::string_view::npos) line = line.substr(0, hash);
    HLT_RETURN_IF_ERROR(fn(line_no, Words(Trim(line)), blank));
  }
  return Status::Ok();
}

Result<std::vector<PageRun>> ParseRuns(std::string_view text, const std::string& file, std::span<const Region> regions,
                                       bool blank_lines_split) {
  LineParser p(file, regions);
  std::vector<PageRun> runs;
  uint32_t space = 0;
  bool space_has_entries = false;
  Status s = ForEachLine(text, [&](size_t line, const std::vector<std::string_view>& w, bool blank) -> Status {
    if (blank) {
      if (blank_lines_split && space_has_entries) {
        ++space;
        space_has_entries = false;
      }
      return Status::Ok();
    }
    if (w.empty()) return Status::Ok();  // a comment line
    if (w.size() > 2) return p.Error(line, "expected PAGE or PAGE COUNT");
    uint64_t count = 1;
    if (w.size() == 2 && (!ParseNumber(w[1], &count) || count == 0)) {
      return p.Error(line, "expected a positive page count, got \"" + std::string(w[1]) + "\"");
    }
    auto ref = p.Page(w[0], line, count);
    if (!ref) return ref.error();
    runs.push_back(PageRun{*ref, count, space});
    space_has_entries = true;
    return Status::Ok();
  });
  if (!s.ok()) return s;
  return runs;
}

}  // namespace

Result<std::vector<PageRun>> ParseAccessTrace(std::string_view text, const std::string& file_name,
                                              std::span<const Region> regions) {
  return ParseRuns(text, file_name, regions, false);
}

Result<std::vector<PageRun>> ParseVaHints(std::string_view text, const std::string& file_name,
                                          std::span<const Region> regions) {
  return ParseRuns(text, file_name, regions, true);
}

Result<std::vector<TraceAccess>> ParseReplayTrace(std::string_view text, const std::string& file_name,
                                                  std::span<const Region> regions) {
  LineParser p(file_name, regions);
  std::vector<TraceAccess> out;
  Status s = ForEachLine(text, [&](size_t line, const std::vector<std::string_view>& w, bool) -> Status {
    if (w.empty()) return Status::Ok();
    if (w.size() > 2 || (w.size() == 2 && w[1] != "w" && w[1] != "r")) return p.Error(line, "expected PAGE or PAGE w");
    auto ref = p.Page(w[0], line, 1);
    if (!ref) return ref.error();
    out.push_back(TraceAccess{*ref, w.size() == 2 && w[1] == "w"});
    return Status::Ok();
  });
  if (!s.ok()) return s;
  return out;
}

std::string EscapeHintRegionName(std::string_view name) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  out.reserve(name.size());
  for (char ch : name) {
    const auto c = static_cast<unsigned char>(ch);
    if (NeedsEscape(c)) {
      out.push_back('%');
      out.push_back(kHex[c >> 4]);
      out.push_back(kHex[c & 15]);
    } else {
      out.push_back(ch);
    }
  }
  return out;
}

std::string FormatAccessTrace(std::span<const PageRef> pages, std::span<const Region> regions) {
  std::vector<std::string> names;
  for (const auto& r : regions) names.push_back(EscapeHintRegionName(r.name));
  std::ostringstream o;
  o << "# libhalite access trace: REGION:PAGE in the order the pages were first requested\n";
  for (const auto& p : pages) o << names[p.region] << ':' << p.page << '\n';
  return o.str();
}

Result<std::string> ReadTextFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::IoError(path + ": cannot open", errno);
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return Status::IoError(path + ": read failed", errno);
  return ss.str();
}

}  // namespace halite
