#include "halite/qemu/qemu_stream_format.h"

namespace halite::qemu {

const char* CommandName(uint16_t command) {
  switch (static_cast<Command>(command)) {
    case Command::kOpenReturnPath: return "OPEN_RETURN_PATH";
    case Command::kPing: return "PING";
    case Command::kPostcopyAdvise: return "POSTCOPY_ADVISE";
    case Command::kPostcopyListen: return "POSTCOPY_LISTEN";
    case Command::kPostcopyRun: return "POSTCOPY_RUN";
    case Command::kPostcopyRamDiscard: return "POSTCOPY_RAM_DISCARD";
    case Command::kPackaged: return "PACKAGED";
    case Command::kEnableColo: return "ENABLE_COLO";
    case Command::kPostcopyResume: return "POSTCOPY_RESUME";
    case Command::kRecvBitmap: return "RECV_BITMAP";
  }
  return "unknown";
}

const char* ReturnPathTypeName(uint16_t type) {
  switch (static_cast<ReturnPathType>(type)) {
    case ReturnPathType::kInvalid: return "INVALID";
    case ReturnPathType::kShut: return "SHUT";
    case ReturnPathType::kPong: return "PONG";
    case ReturnPathType::kReqPagesId: return "REQ_PAGES_ID";
    case ReturnPathType::kReqPages: return "REQ_PAGES";
    case ReturnPathType::kRecvBitmap: return "RECV_BITMAP";
    case ReturnPathType::kResumeAck: return "RESUME_ACK";
  }
  return "unknown";
}

}  // namespace halite::qemu
