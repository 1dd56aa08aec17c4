#include "halite/qemu/qemu_guest_info.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

namespace halite::qemu {
namespace {

std::vector<std::string_view> Lines(std::string_view text) {
  std::vector<std::string_view> out;
  while (!text.empty()) {
    size_t nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    out.push_back(line);
    if (nl == std::string_view::npos) break;
    text.remove_prefix(nl + 1);
  }
  return out;
}

bool ParseHex(std::string_view s, uint64_t* out) {
  if (s.empty() || s.size() > 16) return false;
  uint64_t v = 0;
  for (char c : s) {
    int d;
    if (c >= '0' && c <= '9')
      d = c - '0';
    else if (c >= 'a' && c <= 'f')
      d = c - 'a' + 10;
    else if (c >= 'A' && c <= 'F')
      d = c - 'A' + 10;
    else
      return false;
    v = v << 4 | uint64_t(d);
  }
  *out = v;
  return true;
}

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// "  START-END (prio P, TYPE): NAME[ @OFFSET][ owner/accel suffixes]" -> range, or nullopt for other lines.
// *bad is set for a line that starts like a range but does not parse.
std::optional<GuestRamRange> ParseRangeLine(std::string_view line, bool* keep, bool* bad) {
  *bad = false;
  *keep = false;
  line = Trim(line);
  size_t dash = line.find('-');
  if (dash == std::string_view::npos || dash == 0) return std::nullopt;
  uint64_t start = 0, end = 0;
  if (!ParseHex(line.substr(0, dash), &start)) return std::nullopt;  // a header line
  size_t sp = line.find(' ', dash);
  if (sp == std::string_view::npos || !ParseHex(line.substr(dash + 1, sp - dash - 1), &end) || end < start) {
    *bad = true;
    return std::nullopt;
  }
  size_t open = line.find('(', sp), close = line.find("): ", sp);
  if (open == std::string_view::npos || close == std::string_view::npos || close < open) {
    *bad = true;
    return std::nullopt;
  }
  std::string_view attrs = line.substr(open + 1, close - open - 1);  // "prio 0, ram"
  size_t comma = attrs.rfind(", ");
  std::string_view type = comma == std::string_view::npos ? attrs : attrs.substr(comma + 2);
  if (type.substr(0, 3) == "nv-") type.remove_prefix(3);
  std::string_view rest = line.substr(close + 3);
  GuestRamRange r;
  r.gpa = start;
  r.size = end - start + 1;
  size_t at = rest.find(" @");
  std::string_view name = at == std::string_view::npos ? rest : rest.substr(0, at);
  if (at != std::string_view::npos) {
    std::string_view off = rest.substr(at + 2);
    off = off.substr(0, off.find(' '));
    if (!ParseHex(off, &r.offset)) {
      *bad = true;
      return std::nullopt;
    }
  } else {
    // Owner or accelerator suffixes follow a space; memory region names of RAM have none.
    name = name.substr(0, name.find(' '));
  }
  r.block = std::string(Trim(name));
  *keep = (type == "ram" || type == "rom") && !r.block.empty();
  return r;
}

}  // namespace

Result<std::vector<GuestRamRange>> ParseFlatViewRam(std::string_view text) {
  std::vector<std::string_view> lines = Lines(text);
  // Find the flat view of the "memory" address space: a "FlatView #N" header, AS lines, then ranges.
  size_t i = 0;
  bool found = false;
  for (; i < lines.size(); ++i) {
    if (Trim(lines[i]).rfind("AS \"memory\"", 0) == 0) {
      found = true;
      break;
    }
  }
  if (!found) return Status::Corrupt("info mtree -f: no flat view for address space \"memory\"");
  std::vector<GuestRamRange> out;
  for (++i; i < lines.size(); ++i) {
    std::string_view t = Trim(lines[i]);
    if (t.rfind("FlatView #", 0) == 0) break;
    if (t.empty() || t.rfind("AS \"", 0) == 0 || t.rfind("Root memory region", 0) == 0 ||
        t.rfind("No rendered", 0) == 0) {
      continue;
    }
    bool keep = false, bad = false;
    auto r = ParseRangeLine(lines[i], &keep, &bad);
    if (bad) return Status::Corrupt("info mtree -f: cannot parse line \"" + std::string(t) + "\"");
    if (r && keep) out.push_back(std::move(*r));
  }
  std::sort(out.begin(), out.end(), [](const GuestRamRange& a, const GuestRamRange& b) { return a.gpa < b.gpa; });
  return out;
}

Result<std::vector<GuestRamRange>> QueryGuestRamMap(QmpClient& qmp) {
  HLT_ASSIGN_OR_RETURN(std::string text, qmp.HumanMonitorCommand("info mtree -f"));
  auto r = ParseFlatViewRam(text);
  if (!r) return r.error().WithContext(qmp.name());
  return r;
}

Result<std::vector<CpuPagingRegisters>> ParseInfoRegisters(std::string_view text) {
  std::vector<CpuPagingRegisters> out;
  struct Seen {
    bool cr0 = false, cr3 = false, cr4 = false, efer = false;
    bool all() const { return cr0 && cr3 && cr4 && efer; }
  } seen;
  auto finish = [&]() -> Status {
    if (out.empty()) return Status::Ok();
    if (!seen.all()) {
      return Status::Corrupt("info registers: CPU#" + std::to_string(out.back().cpu) +
                             " lacks one of CR0, CR3, CR4, EFER");
    }
    return Status::Ok();
  };
  for (std::string_view line : Lines(text)) {
    std::string_view t = Trim(line);
    if (t.rfind("CPU#", 0) == 0) {
      HLT_RETURN_IF_ERROR(finish());
      CpuPagingRegisters r;
      r.cpu = std::atoi(std::string(t.substr(4)).c_str());
      out.push_back(r);
      seen = Seen{};
      continue;
    }
    if (out.empty()) {
      // `info registers` of one CPU prints no header: treat it as CPU 0.
      if (t.find("CR0=") == std::string_view::npos && t.find("EFER=") == std::string_view::npos &&
          t.find("RIP=") == std::string_view::npos && t.find("EIP=") == std::string_view::npos) {
        continue;
      }
      out.push_back(CpuPagingRegisters{});
    }
    // Fields are NAME=HEX separated by spaces; CR0 and friends are on one line, EFER on its own.
    size_t pos = 0;
    while (pos < t.size()) {
      size_t sp = t.find(' ', pos);
      std::string_view field = t.substr(pos, sp == std::string_view::npos ? std::string_view::npos : sp - pos);
      pos = sp == std::string_view::npos ? t.size() : sp + 1;
      size_t eq = field.find('=');
      if (eq == std::string_view::npos) continue;
      std::string_view key = field.substr(0, eq), val = field.substr(eq + 1);
      uint64_t v = 0;
      if (key != "CR0" && key != "CR3" && key != "CR4" && key != "EFER") continue;
      if (!ParseHex(val, &v)) {
        return Status::Corrupt("info registers: bad value in \"" + std::string(field) + "\"");
      }
      CpuPagingRegisters& r = out.back();
      if (key == "CR0")
        r.cr0 = v, seen.cr0 = true;
      else if (key == "CR3")
        r.cr3 = v, seen.cr3 = true;
      else if (key == "CR4")
        r.cr4 = v, seen.cr4 = true;
      else
        r.efer = v, seen.efer = true;
    }
  }
  HLT_RETURN_IF_ERROR(finish());
  if (out.empty()) return Status::Corrupt("info registers: no CPU in the output");
  return out;
}

Result<std::vector<CpuPagingRegisters>> QueryCpuPagingRegisters(QmpClient& qmp) {
  HLT_ASSIGN_OR_RETURN(std::string text, qmp.HumanMonitorCommand("info registers -a"));
  auto r = ParseInfoRegisters(text);
  if (!r) return r.error().WithContext(qmp.name());
  return r;
}

}  // namespace halite::qemu
