package store

import "errors"

// Fixed causes, matched with errors.Is. They are always returned wrapped in
// an *Error that names the operation and the file.
var (
	// ErrMismatch means a staging file no longer has its allocated size, or
	// its bytes do not have the expected digest. The producer is at fault,
	// not the store; the router answers ARTIFACT_MISMATCH.
	ErrMismatch = errors.New("artifact size or digest mismatch")
	// ErrInvalidPath means a relative path is malformed, or names no file
	// this operation may touch.
	ErrInvalidPath = errors.New("invalid relative path")
	// ErrInvalidID means a store id is not "store-" and 16 lowercase hex
	// digits.
	ErrInvalidID = errors.New("invalid store id")
	// ErrNotRegular means a location resolved to something other than a
	// regular file.
	ErrNotRegular = errors.New("not a regular file")
	// ErrClosed means the Store was closed.
	ErrClosed = errors.New("store closed")
	// ErrUnsafeRoot means the store root (or a directory above it) could
	// let another user replace or read the store: a symlink, a group- or
	// world-writable mode, a writable parent without the sticky bit, or
	// another owner. The detail names the path and the problem.
	ErrUnsafeRoot = errors.New("unsafe store root")
	// ErrReplaced means the name Seal was given no longer leads to the
	// staging file the store created: it was replaced (a hard link to
	// another file, a rename over it) or linked elsewhere. The router
	// answers STORE_FAILURE and publishes nothing.
	ErrReplaced = errors.New("staging file replaced")
)

// Error reports a failed store operation. Err is one of the fixed causes
// above (possibly with detail) or an *os.SyscallError naming the system call
// that failed, so errors.Is works for both ErrMismatch and errno values.
type Error struct {
	Op      string // "open", "stage", "seal", "remove", "close", "open location"
	RelPath string // the file concerned, relative to the store directory
	Err     error
}

func (e *Error) Error() string {
	if e.RelPath == "" {
		return "store: " + e.Op + ": " + e.Err.Error()
	}
	return "store: " + e.Op + " " + e.RelPath + ": " + e.Err.Error()
}

func (e *Error) Unwrap() error { return e.Err }
