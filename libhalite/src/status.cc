#include "halite/status.h"

#include <cstring>

namespace halite {

const char* StatusCodeName(StatusCode code) {
  switch (code) {
    case StatusCode::kOk: return "ok";
    case StatusCode::kInvalidArgument: return "invalid-argument";
    case StatusCode::kIoError: return "io-error";
    case StatusCode::kCorrupt: return "corrupt";
    case StatusCode::kUnsupported: return "unsupported";
    case StatusCode::kNotFound: return "not-found";
    case StatusCode::kAuthFailed: return "auth-failed";
    case StatusCode::kAborted: return "aborted";
    case StatusCode::kInternal: return "internal";
  }
  return "unknown";
}

std::string Status::ToString() const {
  if (ok()) return "ok";
  std::string s = StatusCodeName(code_);
  s += ": ";
  s += message_;
  if (errno_ != 0) {
    s += " (";
    s += std::strerror(errno_);
    s += ")";
  }
  return s;
}

}  // namespace halite
