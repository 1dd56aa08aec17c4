#include "capi/capi_internal.h"

namespace halite::capi {

std::string& LastError() {
  thread_local std::string last_error;
  return last_error;
}

int Code(const Status& s) {
  if (s.ok()) return HLT_OK;
  LastError() = s.ToString();
  switch (s.code()) {
    case StatusCode::kInvalidArgument: return HLT_EINVAL;
    case StatusCode::kIoError: return HLT_EIO;
    case StatusCode::kCorrupt: return HLT_ECORRUPT;
    case StatusCode::kUnsupported: return HLT_EUNSUPPORTED;
    case StatusCode::kNotFound: return HLT_ENOTFOUND;
    case StatusCode::kAuthFailed: return HLT_EAUTH;
    case StatusCode::kAborted: return HLT_EABORTED;
    default: return HLT_EINTERNAL;
  }
}

int Invalid(const char* what) {
  LastError() = std::string("invalid-argument: ") + what;
  return HLT_EINVAL;
}

}  // namespace halite::capi
