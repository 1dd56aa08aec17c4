// An AppendSink for object stores, which take a large object in parts: an S3 multipart upload's parts, a RADOS
// checkpoint's stripe objects. Appended bytes gather in a buffer; each time it holds PartSize() bytes the subclass
// writes it (WritePart). The first failure sticks: later appends return it, and Commit aborts.
#ifndef HALITE_OBJSTORE_PART_BUFFERED_SINK_H_
#define HALITE_OBJSTORE_PART_BUFFERED_SINK_H_

#include <algorithm>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "halite/storage.h"

namespace halite::objstore {

class PartBufferedSink : public AppendSink {
 public:
  explicit PartBufferedSink(std::string name) : name_(std::move(name)) {}
  const std::string& name() const override { return name_; }
  uint64_t position() const override { return position_; }

  Status Append(std::span<const uint8_t> data) final {
    HLT_RETURN_IF_ERROR(CheckOpen("append"));
    HLT_RETURN_IF_ERROR(error_);
    while (!data.empty()) {
      const size_t take = std::min(data.size(), PartSize() - buffer_.size());
      buffer_.insert(buffer_.end(), data.begin(), data.begin() + static_cast<ptrdiff_t>(take));
      data = data.subspan(take);
      position_ += take;
      if (buffer_.size() == PartSize()) {
        error_ = WritePart();
        HLT_RETURN_IF_ERROR(error_);
      }
    }
    return Status::Ok();
  }

 protected:
  // How many bytes the part being gathered takes (it may grow with the parts written).
  virtual size_t PartSize() const = 0;
  // Writes buffer_ (the bytes at position_ - buffer_.size()) as the next part and clears it on success.
  virtual Status WritePart() = 0;

  // Refuses `what` ("append", "Commit") once the sink was committed or aborted.
  Status CheckOpen(const char* what) const {
    if (done_) return Status::InvalidArgument(name_ + ": " + what + " after Commit or Abort");
    return Status::Ok();
  }

  std::string name_;
  std::vector<uint8_t> buffer_;
  uint64_t position_ = 0;
  Status error_;  // the first failed WritePart
  bool done_ = false;
};

}  // namespace halite::objstore

#endif  // HALITE_OBJSTORE_PART_BUFFERED_SINK_H_
