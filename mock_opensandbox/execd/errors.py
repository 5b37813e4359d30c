"""execd's error answers as data (like lifecycle/quirks.py for the lifecycle): one typed exception, the
codes of pkg/web/model/error.go and the message templates of the controllers. Model code raises
ExecdError; the HTTP layer (execd/gin.py) turns it into Gin's JSON reply. Texts are the binary's
(tiers/diff cases named in QUIRKS.md part 2). GoError is a Go error value of the files API;
handle_file_error turns it into an ExecdError."""

from __future__ import annotations

import errno

from mock_opensandbox.wire.gojson import errno_text

__all__ = [
    "ExecdError",
    "GoError",
    "handle_file_error",
    "INVALID_REQUEST",
    "MISSING_QUERY",
    "RUNTIME_ERROR",
    "INVALID_FILE",
    "INVALID_FILE_CONTENT",
    "INVALID_FILE_METADATA",
    "FILE_NOT_FOUND",
    "UNKNOWN",
    "CONTEXT_NOT_FOUND",
    "NOT_SUPPORTED",
    "MSG",
    "bad_body",
    "invalid",
    "missing_query",
]

# model/error.go ErrorCode values
INVALID_REQUEST = "INVALID_REQUEST_BODY"
MISSING_QUERY = "MISSING_QUERY"
RUNTIME_ERROR = "RUNTIME_ERROR"
INVALID_FILE = "INVALID_FILE"
INVALID_FILE_CONTENT = "INVALID_FILE_CONTENT"
INVALID_FILE_METADATA = "INVALID_FILE_METADATA"
FILE_NOT_FOUND = "FILE_NOT_FOUND"
UNKNOWN = "UNKNOWN"
CONTEXT_NOT_FOUND = "CONTEXT_NOT_FOUND"
NOT_SUPPORTED = "NOT_SUPPORTED"

# controller message templates ({} = the Go error / value)
MSG = {
    "bad_body": "error parsing request, MAYBE invalid body format. {}",  # bindJSON failures (most routes)
    "bad_body_session": "error parsing request. {}",  # /session, /session/:id/run
    "invalid": "invalid request, validation error {}",  # RunCommand / RunCode Validate
    "invalid_session": "invalid request. {}",  # RunInSession Validate
    "missing_query": "missing query parameter '{}'",
    "missing_path": "missing path parameter '{}'",
    "run_commands": "error running commands {}",
    "run_codes": "error running codes {}",
    "run_in_session": "error running in session. {}",
    "create_session": "error creating session. {}",
    "session_not_found": "session {} not found",
    "context_not_found": "context {} not found",
    "delete_context": "error deleting code context {}. {}",
    "create_context": "error creating code context. {}",
    "interrupt": "error interruptting code context. {}",  # sic
    "unsupported_language": "unsupported language context operation: {}",
    "unknown_language": "unknown language: {}",
    "command_not_found": "command not found: {}",
    "not_background": "command {} is not running in background",
    "seek": "error seek file: seek /tmp/{}.output: invalid argument",  # Seek(negative) on <id>.output
    "pty_not_found": "pty session {} not found",
    "pty_bad_body": "error parsing request: {}",
    "required": "Key: '{0}.{1}' Error:Field validation for '{1}' failed on the 'required' tag",
    "gte": "Key: '{0}.{1}' Error:Field validation for '{1}' failed on the 'gte' tag",
    "unauthorized": "Unauthorized: invalid or missing header {}",
}


class ExecdError(Exception):
    """An execd error answer: HTTP status, ErrorCode, message (model.ErrorResponse)."""

    def __init__(self, status: int, code: str, message: str):
        super().__init__(message)
        self.status, self.code, self.message = status, code, message

    def body(self) -> dict[str, str]:
        out = {}
        if self.code:  # omitempty
            out["code"] = self.code
        if self.message:
            out["message"] = self.message
        return out


def bad_body(err: object, template: str = "bad_body") -> ExecdError:
    return ExecdError(400, INVALID_REQUEST, MSG[template].format(err))


def invalid(msg: str, template: str = "invalid") -> ExecdError:
    return ExecdError(400, INVALID_REQUEST, MSG[template].format(msg))


def missing_query(name: str) -> ExecdError:
    return ExecdError(400, MISSING_QUERY, MSG["missing_query"].format(name))


class GoError(Exception):
    """A Go error value: its text, and whether errors.Is(err, fs.ErrNotExist)."""

    def __init__(self, text: str, not_exist: bool = False):
        super().__init__(text)
        self.text, self.not_exist = text, not_exist

    def __str__(self) -> str:
        return self.text

    @classmethod
    def path(cls, op: str, spath: str, exc: BaseException) -> "GoError":
        """*PathError{op, path, errno}: "lstat /x: no such file or directory"."""
        if isinstance(exc, ValueError):  # NUL byte (the syscall's EINVAL) or a refused mapping
            exc = OSError(errno.EINVAL, "invalid argument")
        return cls(f"{op} {spath}: {errno_text(exc)}", isinstance(exc, OSError) and exc.errno == errno.ENOENT)

    def wrap(self, prefix: str) -> "GoError":
        """fmt.Errorf(prefix + "%w", err): the text grows, errors.Is still sees through."""
        return GoError(prefix + self.text, self.not_exist)


def handle_file_error(err: GoError) -> ExecdError:
    """controller handleFileError: ErrNotExist -> 404 FILE_NOT_FOUND, else 500 RUNTIME_ERROR."""
    if err.not_exist:
        return ExecdError(404, FILE_NOT_FOUND, f"file not found. {err}")
    return ExecdError(500, RUNTIME_ERROR, f"error accessing file: {err}")
