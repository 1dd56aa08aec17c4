// Fault-injecting storage wrappers (halite/fault_injection.h), for tests of the writer, the reader and the
// restore engine against the failures real storage produces.
#include "halite/fault_injection.h"

#include <algorithm>
#include <cerrno>

#include <fmt/format.h>

#include "halite/bytes.h"

namespace halite {

const char* FaultName(Fault fault) {
  switch (fault) {
    case Fault::kEio: return "EIO";
    case Fault::kShortTransfer: return "short transfer";
    case Fault::kFailedSync: return "failed sync";
    case Fault::kTornWrite: return "torn write";
    case Fault::kBitFlip: return "bit flip";
  }
  return "?";
}

void FaultInjector::set_enabled(bool enabled) {
  std::lock_guard<std::mutex> lock(mu_);
  enabled_ = enabled;
}
bool FaultInjector::enabled() const {
  std::lock_guard<std::mutex> lock(mu_);
  return enabled_;
}
uint64_t FaultInjector::operations() const {
  std::lock_guard<std::mutex> lock(mu_);
  return operations_;
}
uint64_t FaultInjector::faults_injected() const {
  std::lock_guard<std::mutex> lock(mu_);
  return faults_;
}
bool FaultInjector::failed_permanently() const {
  std::lock_guard<std::mutex> lock(mu_);
  return dead_;
}

FaultInjector::Decision FaultInjector::Decide(Operation op, uint64_t offset, uint64_t length, uint64_t* keep) {
  std::lock_guard<std::mutex> lock(mu_);
  *keep = length;
  if (!enabled_) return Decision::kPass;
  ++operations_;
  if (dead_) return Decision::kDeadDevice;
  if (op == Operation::kCommit) {
    if (plan_.fault != Fault::kFailedSync || faults_ >= plan_.max_faults) return Decision::kPass;
    ++faults_;
    if (plan_.permanent) dead_ = true;
    return Decision::kFault;
  }
  // Faults that do not apply to this kind of operation never fire.
  const bool applies = plan_.fault == Fault::kEio || plan_.fault == Fault::kShortTransfer ||
                       (op == Operation::kRead ? plan_.fault == Fault::kBitFlip : plan_.fault == Fault::kTornWrite);
  // Draw on every operation, so the sequence of faults depends only on the seed and the operations.
  const bool random_hit =
      plan_.probability > 0 && std::uniform_real_distribution<double>(0.0, 1.0)(rng_) < plan_.probability;
  uint64_t position_in_op = kNoTrigger;  // where, inside the operation, the fault strikes
  bool fire = random_hit || (plan_.on_call != 0 && operations_ == plan_.on_call);
  if (plan_.after_bytes != kNoTrigger && !after_bytes_fired_ && bytes_ + length > plan_.after_bytes) {
    fire = true;
    after_bytes_fired_ = true;
    position_in_op = plan_.after_bytes > bytes_ ? plan_.after_bytes - bytes_ : 0;
  }
  if (op == Operation::kRead && plan_.offset_begin < plan_.offset_end && offset < plan_.offset_end &&
      offset + length > plan_.offset_begin) {
    fire = true;
    position_in_op = std::min(position_in_op, plan_.offset_begin > offset ? plan_.offset_begin - offset : 0);
  }
  if (!fire || !applies || faults_ >= plan_.max_faults || length == 0) {
    bytes_ += length;
    return Decision::kPass;
  }
  ++faults_;
  if (plan_.permanent) dead_ = true;
  if (position_in_op == kNoTrigger) {
    // Probability and call-count triggers strike at a random place inside the operation.
    position_in_op = std::uniform_int_distribution<uint64_t>(0, length - 1)(rng_);
  }
  *keep = std::min(position_in_op, length - 1);  // a short transfer keeps less than all; a flip hits a real byte
  bytes_ += *keep;
  return Decision::kFault;
}

namespace {

class FaultInjectingFile final : public RandomAccessFile {
 public:
  FaultInjectingFile(std::unique_ptr<RandomAccessFile> base, std::shared_ptr<FaultInjector> injector)
      : base_(std::move(base)), injector_(std::move(injector)) {}
  const std::string& name() const override { return base_->name(); }
  uint64_t size() const override { return base_->size(); }

  Status ReadAt(uint64_t offset, std::span<uint8_t> buffer) override {
    uint64_t keep = 0;
    const bool transient = !injector_->plan().permanent;
    switch (injector_->Decide(FaultInjector::Operation::kRead, offset, buffer.size(), &keep)) {
      case FaultInjector::Decision::kPass:
        return base_->ReadAt(offset, buffer);
      case FaultInjector::Decision::kDeadDevice:
        return Status::IoError(name() + ": read of " + std::to_string(buffer.size()) + " bytes at offset " +
                                   fmt::format("{:#x}", offset) + " failed (device failed after an injected fault)",
                               EIO);
      case FaultInjector::Decision::kFault:
        break;
    }
    switch (injector_->plan().fault) {
      case Fault::kShortTransfer: {
        if (keep > 0) HLT_RETURN_IF_ERROR(base_->ReadAt(offset, buffer.first(keep)));
        return Status::IoError(name() + ": short read at offset " + fmt::format("{:#x}", offset + keep) + ": " +
                               std::to_string(keep) + " of " + std::to_string(buffer.size()) +
                               " bytes (injected)")
            .set_retryable(transient);
      }
      case Fault::kBitFlip: {
        HLT_RETURN_IF_ERROR(base_->ReadAt(offset, buffer));
        buffer[keep] ^= uint8_t(1u << ((offset + keep) % 8));
        return Status::Ok();
      }
      default:
        return Status::IoError(name() + ": read of " + std::to_string(buffer.size()) + " bytes at offset " +
                                   fmt::format("{:#x}", offset) + " failed (injected EIO)",
                               EIO)
            .set_retryable(transient);
    }
  }

 private:
  std::unique_ptr<RandomAccessFile> base_;
  std::shared_ptr<FaultInjector> injector_;
};

class FaultInjectingSink final : public AppendSink {
 public:
  FaultInjectingSink(std::unique_ptr<AppendSink> base, std::shared_ptr<FaultInjector> injector)
      : base_(std::move(base)), injector_(std::move(injector)) {}
  const std::string& name() const override { return base_->name(); }
  uint64_t position() const override { return base_->position() + dropped_; }

  Status Append(std::span<const uint8_t> data) override {
    if (torn_) {
      dropped_ += data.size();  // acknowledged, never written
      return Status::Ok();
    }
    const uint64_t at = position();
    uint64_t keep = 0;
    const bool transient = !injector_->plan().permanent;
    switch (injector_->Decide(FaultInjector::Operation::kAppend, at, data.size(), &keep)) {
      case FaultInjector::Decision::kPass:
        return base_->Append(data);
      case FaultInjector::Decision::kDeadDevice:
        return Status::IoError(name() + ": write of " + std::to_string(data.size()) + " bytes at offset " +
                                   fmt::format("{:#x}", at) + " failed (device failed after an injected fault)",
                               EIO);
      case FaultInjector::Decision::kFault:
        break;
    }
    switch (injector_->plan().fault) {
      case Fault::kShortTransfer: {
        if (keep > 0) HLT_RETURN_IF_ERROR(base_->Append(data.first(keep)));
        return Status::IoError(name() + ": short write at offset " + fmt::format("{:#x}", at + keep) + ": " + std::to_string(keep) +
                                   " of " + std::to_string(data.size()) + " bytes (injected)",
                               ENOSPC)
            .set_retryable(transient);
      }
      case Fault::kTornWrite: {
        if (keep > 0) HLT_RETURN_IF_ERROR(base_->Append(data.first(keep)));
        torn_ = true;
        dropped_ += data.size() - keep;
        return Status::Ok();
      }
      default:
        return Status::IoError(name() + ": write of " + std::to_string(data.size()) + " bytes at offset " +
                                   fmt::format("{:#x}", at) + " failed (injected EIO)",
                               EIO)
            .set_retryable(transient);
    }
  }

  Status Commit() override {
    uint64_t keep = 0;
    switch (injector_->Decide(FaultInjector::Operation::kCommit, position(), 0, &keep)) {
      case FaultInjector::Decision::kPass:
        return base_->Commit();
      case FaultInjector::Decision::kDeadDevice:
        base_->Abort();  // a failed Commit leaves nothing behind
        return Status::IoError(name() + ": commit failed (device failed after an injected fault)", EIO);
      case FaultInjector::Decision::kFault:
        break;
    }
    base_->Abort();
    return Status::IoError(name() + ": fsync failed (injected EIO)", EIO).set_retryable(!injector_->plan().permanent);
  }

  void Abort() override { base_->Abort(); }

 private:
  std::unique_ptr<AppendSink> base_;
  std::shared_ptr<FaultInjector> injector_;
  bool torn_ = false;
  uint64_t dropped_ = 0;
};

}  // namespace

std::unique_ptr<RandomAccessFile> NewFaultInjectingFile(std::unique_ptr<RandomAccessFile> base,
                                                        std::shared_ptr<FaultInjector> injector) {
  return std::make_unique<FaultInjectingFile>(std::move(base), std::move(injector));
}

std::unique_ptr<AppendSink> NewFaultInjectingSink(std::unique_ptr<AppendSink> base,
                                                  std::shared_ptr<FaultInjector> injector) {
  return std::make_unique<FaultInjectingSink>(std::move(base), std::move(injector));
}

}  // namespace halite
