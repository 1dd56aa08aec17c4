// Parses what a QEMU migration destination sends back to its source (the return path): SHUT, PONG, page
// requests, and the postcopy-recovery messages RECV_BITMAP and RESUME_ACK.
//
// Every message's length is checked against its type before anything is used. Not thread-safe; a source
// usually runs one reader on its own thread while another thread writes the stream on the same socket.
#ifndef HALITE_QEMU_QEMU_RETURN_PATH_H_
#define HALITE_QEMU_QEMU_RETURN_PATH_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "halite/qemu/qemu_stream_input.h"
#include "halite/qemu/qemu_saved_state.h"
#include "halite/qemu/qemu_stream_format.h"
#include "halite/status.h"

namespace halite::qemu {

struct ReturnPathMessage {
  ReturnPathType type = ReturnPathType::kInvalid;
  uint32_t value = 0;        // SHUT (0 = success), PONG, RESUME_ACK
  uint64_t offset = 0;       // REQ_PAGES(_ID): byte offset in the block
  uint32_t length = 0;       // REQ_PAGES(_ID): byte length (one host page in practice)
  // REQ_PAGES_ID and RECV_BITMAP: the block named in the message. REQ_PAGES: the block of the last
  // REQ_PAGES_ID, filled in by the reader so every request is self-contained.
  std::string block_name;
  std::string bitmap;        // RECV_BITMAP: the received-pages bitmap that follows it (little-endian bit order)
  uint64_t stream_offset = 0;  // where the message started, for messages
};

// Default bound on a RECV_BITMAP's bitmap: one bit a 4 KiB page of an 8 TiB block (kMaxStreamRamBytes).
inline constexpr uint64_t kDefaultMaxRecvBitmapBytes = uint64_t{1} << 28;

// The largest RECV_BITMAP a destination with these RAMBlocks sends: one bit a target page of the largest block,
// rounded up to whole 64-bit words (QEMU's ramblock_recv_bitmap_send). Pass it to ReturnPathReader when the
// blocks are known (a restore knows them from the checkpoint).
uint64_t MaxRecvBitmapBytes(const std::vector<RamBlockInfo>& blocks);

class ReturnPathReader {
 public:
  // Borrows source. max_bitmap_bytes bounds a RECV_BITMAP's bitmap before it is allocated.
  explicit ReturnPathReader(SequentialSource* source, std::string name = "return path",
                            uint64_t max_bitmap_bytes = kDefaultMaxRecvBitmapBytes);

  // The next message; std::nullopt when the stream ends cleanly between messages. Errors: corrupt (unknown type,
  // a length that does not fit the type, REQ_PAGES before any REQ_PAGES_ID, a bad bitmap end marker; the message
  // names the offset), io-error / aborted from the source.
  Result<std::optional<ReturnPathMessage>> Next();

 private:
  StreamInput in_;
  uint64_t max_bitmap_bytes_;
  std::string last_block_;
  bool have_block_ = false;
};

}  // namespace halite::qemu

#endif  // HALITE_QEMU_QEMU_RETURN_PATH_H_
