package store

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// Config describes the store a router opens.
type Config struct {
	// Root is the directory that holds the stores of every router
	// incarnation. It is created, mode 0700, if missing (and so are its
	// missing parents). Open refuses, with ErrUnsafeRoot, a root that
	// another user could replace or write into: a symlink anywhere in its
	// path, a root not owned by this user or writable by group or others,
	// a directory above it owned by another user (root aside) or writable
	// by others without the sticky bit.
	Root string
	// ID names this incarnation's directory under Root: "store-" and 16
	// lowercase hex digits. Empty means a fresh NewID.
	ID string
	// PoolDepth is how many prepared staging files are kept for each
	// recently staged size. Zero means 2; negative disables the pool, so
	// every Stage creates and fallocates on the caller's path.
	PoolDepth int
	// PoolSizes is how many distinct recent sizes the pool tracks. Zero
	// means 4.
	PoolSizes int
	// Mode chooses the backend: slots reused across generations (ModePool,
	// the default) or one file per artifact (ModeFiles).
	Mode Mode
	// MaxBytes bounds the bytes of all slots, free ones included, in pool
	// mode; in files mode prepared staging files (PoolDepth) take at most
	// a quarter of it. Zero is no bound.
	MaxBytes int64
	// IdleAfter is how long free slots of a size nobody stages are kept in
	// pool mode before they are unlinked [5 s].
	IdleAfter time.Duration
	// MaxSlots bounds the slot files in pool mode, each of which the store
	// keeps a descriptor on [DefaultMaxSlots()]. Past it free slots of
	// other sizes are unlinked, and if none is free Stage fails ErrFull.
	MaxSlots int
}

const (
	defaultPoolDepth = 2
	defaultPoolSizes = 4
)

// Store is a router incarnation's file store. Its methods are safe for
// concurrent use.
type Store struct {
	root, id, dir string
	orphans       []Orphan

	// mu is held shared by every file operation and exclusively by Close,
	// so Close waits for operations in flight before closing dirfd.
	mu     sync.RWMutex
	closed bool
	dirfd  int // the store directory; every file is opened relative to it
	marker int // the marker file, held under flock while the store lives

	seq   atomic.Uint64 // last sequence number issued to a file name
	pool  *pool
	mode  Mode
	slots *slotTable // pool mode only
	st    counters

	inoMu  sync.Mutex
	inodes map[uint64]fileID // every staging file not yet sealed or removed, by sequence

	closeOnce sync.Once
	closeErr  error
}

// Open sweeps orphaned stores under cfg.Root, then creates and locks this
// incarnation's directory. On error no store directory is left behind
// (Root itself may have been created).
func Open(cfg Config) (*Store, error) {
	if cfg.Root == "" {
		return nil, &Error{Op: "open", Err: errors.New("empty root")}
	}
	root, err := filepath.Abs(cfg.Root)
	if err != nil {
		return nil, &Error{Op: "open", Err: err}
	}
	id := cfg.ID
	if id == "" {
		id = NewID()
	}
	if !ValidStoreID(id) {
		return nil, &Error{Op: "open", RelPath: id, Err: ErrInvalidID}
	}
	depth, sizes := cfg.PoolDepth, cfg.PoolSizes
	if depth == 0 {
		depth = defaultPoolDepth
	}
	if sizes <= 0 {
		sizes = defaultPoolSizes
	}

	if err := prepareRoot(root); err != nil {
		return nil, &Error{Op: "open", Err: err}
	}
	orphans, err := sweep(root)
	if err != nil {
		return nil, &Error{Op: "open", Err: err}
	}
	s := &Store{
		root:    root,
		id:      id,
		dir:     filepath.Join(root, id),
		orphans: orphans,
		dirfd:   -1,
		marker:  -1,
		inodes:  map[uint64]fileID{},
	}
	if made, err := s.create(); err != nil {
		s.closeFDs()
		if made {
			os.RemoveAll(s.dir)
		}
		return nil, &Error{Op: "open", RelPath: id, Err: err}
	}
	s.mode = cfg.Mode
	if s.mode == ModePool {
		s.slots = newSlotTable(cfg.MaxBytes, cfg.MaxSlots, cfg.IdleAfter)
		go s.janitor()
		depth = -1 // slots replace the staging pool
	}
	// Prepared staging files take at most a quarter of the byte bound, so
	// the tmpfs holds no more than the bound's artifacts and that share.
	s.pool = newPool(depth, sizes, cfg.MaxBytes/4, &s.seq)
	if depth > 0 {
		go s.refill()
	} else {
		s.pool.stop() // a stopped pool hands out nothing: every Stage misses
	}
	return s, nil
}

// create makes the store directory and its locked marker. made reports
// whether the directory was created, so a failure can remove it.
func (s *Store) create() (made bool, err error) {
	if err := unix.Mkdir(s.dir, 0o700); err != nil {
		return false, os.NewSyscallError("mkdir", err)
	}
	return true, s.initDir()
}

// initDir opens the new directory, fixes its mode and places the locked
// marker in it.
func (s *Store) initDir() error {
	var err error
	if s.dirfd, err = unix.Open(s.dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0); err != nil {
		s.dirfd = -1
		return os.NewSyscallError("open", err)
	}
	// Mkdir honours the umask; the layout promises exactly 0700.
	if err := unix.Fchmod(s.dirfd, 0o700); err != nil {
		return os.NewSyscallError("fchmod", err)
	}
	// The marker is locked under a name the sweep ignores and renamed into
	// place only then, so a concurrent sweep never sees it unlocked. The
	// descriptor is close-on-exec: a child process inheriting it would keep
	// the lock, and so the store, alive after the router died.
	if s.marker, err = unix.Openat(s.dirfd, markerNewName, unix.O_CREAT|unix.O_EXCL|unix.O_RDWR|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600); err != nil {
		s.marker = -1
		return os.NewSyscallError("openat", err)
	}
	if err := unix.Flock(s.marker, unix.LOCK_EX|unix.LOCK_NB); err != nil {
		return os.NewSyscallError("flock", err)
	}
	note := "flybus store " + s.id + " pid " + strconv.Itoa(os.Getpid()) + "\n"
	if _, err := unix.Write(s.marker, []byte(note)); err != nil {
		return os.NewSyscallError("write", err)
	}
	if err := unix.Renameat(s.dirfd, markerNewName, s.dirfd, markerName); err != nil {
		return os.NewSyscallError("renameat", err)
	}
	return nil
}

// Root returns the absolute directory that holds every incarnation's store.
func (s *Store) Root() string { return s.root }

// ID returns this store's id, the storeId of every Location it issues.
func (s *Store) ID() string { return s.id }

// Dir returns this store's directory, Root()/ID().
func (s *Store) Dir() string { return s.dir }

// Orphans returns the directories of dead incarnations that Open found under
// Root, with the error of removing each (nil when it was removed), for the
// router to log.
func (s *Store) Orphans() []Orphan { return append([]Orphan(nil), s.orphans...) }

// Close stops the pool, waits for operations in flight, removes the store
// directory and everything in it, and releases the lock. Only the first call
// does anything; later calls return its result. After Close, Stage and Seal
// fail with ErrClosed and Remove does nothing.
func (s *Store) Close() error {
	s.closeOnce.Do(func() { s.closeErr = s.shutdown(true) })
	return s.closeErr
}

// abandon releases the store as a crashed router would: the lock goes, the
// directory stays. Tests use it to make an orphan.
func (s *Store) abandon() {
	s.closeOnce.Do(func() { s.closeErr = s.shutdown(false) })
}

// Mode is the store's backend.
func (s *Store) Mode() Mode { return s.mode }

func (s *Store) shutdown(remove bool) error {
	s.pool.stop()
	if s.slots != nil {
		s.closeSlots()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	var errs []error
	if remove {
		// Still locked while removing, so no other router's sweep races us.
		if err := os.RemoveAll(s.dir); err != nil {
			errs = append(errs, err)
		}
	}
	if err := s.closeFDs(); err != nil {
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		return &Error{Op: "close", RelPath: s.id, Err: errors.Join(errs...)}
	}
	return nil
}

func (s *Store) closeFDs() error {
	var errs []error
	for _, fd := range []*int{&s.dirfd, &s.marker} {
		if *fd >= 0 {
			if err := unix.Close(*fd); err != nil {
				errs = append(errs, os.NewSyscallError("close", err))
			}
			*fd = -1
		}
	}
	return errors.Join(errs...)
}

// String describes the store for logs.
func (s *Store) String() string { return fmt.Sprintf("store %s at %s", s.id, s.dir) }
