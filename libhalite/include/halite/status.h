// Status and Result<T>: how every libhalite call reports failure.
//
// The library never throws. A call that can fail returns a [[nodiscard]] Status (or a Result<T> holding either
// a value or a Status). Messages name the file, the offset and what was expected, e.g.
//   "ckpt.hlt: block 812 at offset 0x3a1000: checksum mismatch (stored 0x.., computed 0x..)".
// The member names of Result follow std::expected so the type can move to it later.
#ifndef HALITE_STATUS_H_
#define HALITE_STATUS_H_

#include <cassert>
#include <string>
#include <utility>
#include <variant>

#include "halite/export.h"

namespace halite {

enum class StatusCode : int {
  kOk = 0,
  kInvalidArgument = 1,  // the caller passed something unusable (usage error)
  kIoError = 2,          // the operating system failed a read, write, sync, open (retryable when transient)
  kCorrupt = 3,          // the bytes violate the format: bad magic, checksum, limit, reference
  kUnsupported = 4,      // valid but newer than this reader, or a feature not built in
  kNotFound = 5,         // no such region, blob, page
  kAuthFailed = 6,       // a keyed MAC did not match, or a key was given and the file has no MAC
  kAborted = 7,          // stopped on request (cancelled save, engine shut down)
  kInternal = 8,         // a bug: an invariant of our own did not hold
};

// A short stable name for a code ("io-error", "corrupt", ...).
HALITE_EXPORT const char* StatusCodeName(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;  // success
  Status(StatusCode code, std::string message, int sys_errno = 0)
      : code_(code), errno_(sys_errno), message_(std::move(message)) {}

  static Status Ok() { return Status(); }
  static Status InvalidArgument(std::string m) { return {StatusCode::kInvalidArgument, std::move(m)}; }
  static Status IoError(std::string m, int e = 0) { return {StatusCode::kIoError, std::move(m), e}; }
  static Status Corrupt(std::string m) { return {StatusCode::kCorrupt, std::move(m)}; }
  static Status Unsupported(std::string m) { return {StatusCode::kUnsupported, std::move(m)}; }
  static Status NotFound(std::string m) { return {StatusCode::kNotFound, std::move(m)}; }
  static Status AuthFailed(std::string m) { return {StatusCode::kAuthFailed, std::move(m)}; }
  static Status Aborted(std::string m) { return {StatusCode::kAborted, std::move(m)}; }
  static Status Internal(std::string m) { return {StatusCode::kInternal, std::move(m)}; }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  int sys_errno() const { return errno_; }
  const std::string& message() const { return message_; }
  // True for I/O errors a caller may retry (EIO, EINTR, EAGAIN, short transfers); never for corruption.
  bool retryable() const { return code_ == StatusCode::kIoError && retryable_; }
  Status& set_retryable(bool r) {
    retryable_ = r;
    return *this;
  }

  // Prefixes context: Status::Corrupt("x").WithContext("ckpt.hlt") -> "ckpt.hlt: x".
  Status WithContext(const std::string& context) const {
    if (ok()) return *this;
    Status s = *this;
    s.message_ = context + ": " + message_;
    return s;
  }

  // "corrupt: ckpt.hlt: ..." (code name, then the message; errno text appended when set).
  std::string ToString() const;

 private:
  StatusCode code_ = StatusCode::kOk;
  int errno_ = 0;
  bool retryable_ = false;
  std::string message_;
};

// Holds a T or a non-ok Status. Access value() only when has_value().
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}  // NOLINT: implicit by design, like std::expected
  Result(Status status) : v_(std::move(status)) {  // NOLINT
    assert(!std::get<Status>(v_).ok() && "Result built from an ok Status");
  }

  bool has_value() const { return v_.index() == 0; }
  explicit operator bool() const { return has_value(); }
  T& value() & { return std::get<0>(v_); }
  const T& value() const& { return std::get<0>(v_); }
  T&& value() && { return std::get<0>(std::move(v_)); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  // The error; Status::Ok() when a value is held.
  Status status() const { return has_value() ? Status() : std::get<1>(v_); }
  const Status& error() const { return std::get<1>(v_); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace halite

// Early-return helpers for code inside the library and tools.
#define HLT_RETURN_IF_ERROR(expr)            \
  do {                                       \
    ::halite::Status hlt_status_ = (expr);   \
    if (!hlt_status_.ok()) return hlt_status_; \
  } while (0)

#define HLT_CONCAT_INNER_(a, b) a##b
#define HLT_CONCAT_(a, b) HLT_CONCAT_INNER_(a, b)
#define HLT_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                               \
  if (!tmp.has_value()) return tmp.error();        \
  lhs = std::move(tmp).value()
// HLT_ASSIGN_OR_RETURN(auto x, MakeX());
#define HLT_ASSIGN_OR_RETURN(lhs, expr) HLT_ASSIGN_OR_RETURN_IMPL_(HLT_CONCAT_(hlt_result_, __LINE__), lhs, expr)

#endif  // HALITE_STATUS_H_
