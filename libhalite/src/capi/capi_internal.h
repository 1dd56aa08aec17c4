// What the C API's files share: the handle types they both see, and the mapping of Status to C error codes with
// the calling thread's last message.
#ifndef HALITE_CAPI_CAPI_INTERNAL_H_
#define HALITE_CAPI_CAPI_INTERNAL_H_

#include <memory>
#include <string>

#include "halite/checkpoint_reader.h"
#include "halite/halite_c.h"
#include "halite/status.h"

struct hlt_reader {
  std::unique_ptr<halite::CheckpointReader> reader;
};

namespace halite::capi {

// The calling thread's last failure message (hlt_last_error).
std::string& LastError();
// HLT_OK for ok; otherwise records the message and returns the HLT_E* code for the status.
int Code(const Status& s);
// Records "invalid-argument: what" and returns HLT_EINVAL.
int Invalid(const char* what);

}  // namespace halite::capi

#endif  // HALITE_CAPI_CAPI_INTERNAL_H_
