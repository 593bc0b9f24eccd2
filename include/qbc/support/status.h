// Status and StatusOr: how every qbc stage reports a user-facing error.
//
// Errors that come from input (files, configs, command lines) are returned as a
// Status carrying a code and a message that names the location at fault (file,
// line, key, tensor, node). Exceptions never cross a stage API; internal
// invariants use QBC_CHECK (support/check.h) instead.
#pragma once

#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace qbc {

/// Error categories. Kept small and stable; mapped to process exit codes in one
/// place (support/exit_codes.h).
enum class Code {
  kOk = 0,
  kInvalidArgument,     ///< Bad usage, config value or input file content.
  kNotFound,            ///< A named file, key, tensor or preset does not exist.
  kUnimplemented,       ///< Unsupported model, op or feature.
  kFailedPrecondition,  ///< Inputs are individually valid but inconsistent.
  kResourceExhausted,   ///< Does not fit the target (memory, tiling).
  kDataLoss,            ///< A file is truncated or corrupt.
  kInternal,            ///< A bug in qbc.
};

/// Returns a stable lower-case name for `code`, e.g. "invalid-argument".
std::string_view code_name(Code code);

/// The result of an operation that can fail: OK, or a code plus a message.
class [[nodiscard]] Status {
 public:
  /// Constructs an OK status.
  Status() = default;
  /// Constructs a status with `code` and `message`; `code` should not be kOk.
  Status(Code code, std::string message) : code_(code), message_(std::move(message)) {}

  /// True iff this status is OK.
  bool ok() const { return code_ == Code::kOk; }
  /// The error category.
  Code code() const { return code_; }
  /// The message, already carrying its location prefixes.
  const std::string& message() const { return message_; }
  /// "code-name: message", for logs and tests.
  std::string to_string() const;

  /// Returns this status with `parts` prefixed to the message ("parts: message").
  /// OK statuses pass through unchanged.
  template <typename... Parts>
  Status with_context(const Parts&... parts) const& {
    if (ok()) return *this;
    std::ostringstream os;
    (os << ... << parts);
    return Status(code_, os.str() + ": " + message_);
  }

 private:
  Code code_ = Code::kOk;
  std::string message_;
};

/// Returns an OK status.
inline Status ok_status() { return Status(); }

namespace internal {
template <typename... Parts>
std::string concat(const Parts&... parts) {
  std::ostringstream os;
  (os << ... << parts);
  return os.str();
}
}  // namespace internal

/// Constructors for error statuses; the message is the concatenation of `parts`.
template <typename... P>
Status invalid_argument(const P&... p) { return Status(Code::kInvalidArgument, internal::concat(p...)); }
template <typename... P>
Status not_found(const P&... p) { return Status(Code::kNotFound, internal::concat(p...)); }
template <typename... P>
Status unimplemented(const P&... p) { return Status(Code::kUnimplemented, internal::concat(p...)); }
template <typename... P>
Status failed_precondition(const P&... p) { return Status(Code::kFailedPrecondition, internal::concat(p...)); }
template <typename... P>
Status resource_exhausted(const P&... p) { return Status(Code::kResourceExhausted, internal::concat(p...)); }
template <typename... P>
Status data_loss(const P&... p) { return Status(Code::kDataLoss, internal::concat(p...)); }
template <typename... P>
Status internal_error(const P&... p) { return Status(Code::kInternal, internal::concat(p...)); }

/// A value of type T, or an error Status.
template <typename T>
class [[nodiscard]] StatusOr {
 public:
  /// Holds an error; `status` must not be OK.
  StatusOr(Status status) : v_(std::move(status)) {  // NOLINT(runtime/explicit)
    if (std::get<Status>(v_).ok()) v_ = Status(Code::kInternal, "StatusOr constructed from OK status");
  }
  /// Holds a value.
  StatusOr(T value) : v_(std::move(value)) {}  // NOLINT(runtime/explicit)

  bool ok() const { return std::holds_alternative<T>(v_); }
  /// The error, or OK when a value is held.
  Status status() const { return ok() ? Status() : std::get<Status>(v_); }

  const T& value() const& { return std::get<T>(v_); }
  T& value() & { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  const T& operator*() const& { return value(); }
  T& operator*() & { return value(); }
  const T* operator->() const { return &value(); }
  T* operator->() { return &value(); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace qbc

#define QBC_STATUS_CONCAT_INNER_(a, b) a##b
#define QBC_STATUS_CONCAT_(a, b) QBC_STATUS_CONCAT_INNER_(a, b)

/// Returns from the enclosing function if `expr` (a Status) is not OK.
#define QBC_RETURN_IF_ERROR(expr)                                  \
  do {                                                             \
    ::qbc::Status qbc_status_ = (expr);                            \
    if (!qbc_status_.ok()) return qbc_status_;                     \
  } while (0)

/// `QBC_ASSIGN_OR_RETURN(auto x, f())`: assigns the value of a StatusOr or
/// returns its error from the enclosing function.
#define QBC_ASSIGN_OR_RETURN(lhs, expr) \
  QBC_ASSIGN_OR_RETURN_IMPL_(QBC_STATUS_CONCAT_(qbc_statusor_, __LINE__), lhs, expr)
#define QBC_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                               \
  if (!tmp.ok()) return tmp.status();              \
  lhs = std::move(tmp).value()
