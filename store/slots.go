package store

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// The pool mode: slot files reused across generations.
//
// A slot is one file of a fixed size, slot-<16 hex> (the hex is the slot
// number, the artifact id the router hands out), holding one artifact at a
// time. Its n-th artifact has generation n. A slot is free (0600, nobody
// writes it), writing (handed to one producer), sealed (0444, proven free
// of writers) or quarantined (a writer kept it open: never handed out until
// a read lease on it is granted again).
//
// The store keeps one read-only descriptor open per slot, so a hit, a seal
// and a recycle open, create, allocate and unlink nothing: a seal takes a
// read lease (F_RDLCK) on that descriptor, which Linux grants only when no
// open file description of the inode is open for writing, in any process,
// writable shared mappings included, while read-only descriptors and
// mappings (the consumers' cached views) do not stand in its way.

// Mode selects a store's backend.
type Mode uint8

const (
	// ModePool, the default, keeps slot files of recently used sizes and
	// reuses them, a new generation per artifact: nothing is created,
	// mapped or unlinked per artifact once a size is warm.
	ModePool Mode = iota
	// ModeFiles keeps one file per artifact, unlinked after its last owner.
	ModeFiles
)

func (m Mode) String() string {
	if m == ModePool {
		return "pool"
	}
	return "files"
}

// ParseMode reads the configuration spelling of a mode.
func ParseMode(s string) (Mode, error) {
	switch s {
	case "files":
		return ModeFiles, nil
	case "pool":
		return ModePool, nil
	}
	return 0, fmt.Errorf("store mode %q is neither \"files\" nor \"pool\"", s)
}

// ErrFull means a new slot would take the store past its byte bound even
// after every free slot of another size was unlinked.
var ErrFull = errors.New("store full")

type slotState uint8

const (
	slotFree slotState = iota + 1
	slotWriting
	slotSealed
	slotQuarantined
)

type slot struct {
	n     uint64
	size  int64
	gen   uint64
	state slotState
	fd    int // read-only, open while the slot exists
	file  fileID
	name  string // slot-<16 hex>, made once: every generation hands it out
	cname *byte  // name as a C string, for the seal's check
}

// slotTable is the pool's bookkeeping. A hit is a lookup under mu; I/O
// happens outside it except for the few constant-time calls of a seal's
// state change.
type slotTable struct {
	mu          sync.Mutex
	slots       map[uint64]*slot
	free        map[int64][]*slot   // by size, most recently freed last
	lastUsed    map[int64]time.Time // the last Stage of each size
	quarantined map[uint64]*slot
	reserved    int   // slots being created, counted against maxSlots
	bytes       int64 // every slot's size, free ones included
	next        uint64
	maxBytes    int64
	maxSlots    int // each slot keeps a descriptor open: this bounds them
	idleAfter   time.Duration

	quit chan struct{}
	done chan struct{}
}

const (
	defaultIdleAfter = 5 * time.Second
	slotPrefix       = "slot-"
	minSlots         = 16
)

// DefaultMaxSlots is the bound on slot files (and so on the descriptors
// the store keeps) when Config.MaxSlots is zero: a quarter of the
// process's descriptor limit, so that connections and everything else keep
// the rest, and at least 16.
func DefaultMaxSlots() int {
	var rl unix.Rlimit
	if unix.Getrlimit(unix.RLIMIT_NOFILE, &rl) != nil || rl.Cur == unix.RLIM_INFINITY {
		return 4096
	}
	return max(minSlots, int(min(rl.Cur/4, 1<<20)))
}

func newSlotTable(maxBytes int64, maxSlots int, idleAfter time.Duration) *slotTable {
	if idleAfter <= 0 {
		idleAfter = defaultIdleAfter
	}
	if maxSlots <= 0 {
		maxSlots = DefaultMaxSlots()
	}
	return &slotTable{slots: map[uint64]*slot{}, free: map[int64][]*slot{}, lastUsed: map[int64]time.Time{},
		quarantined: map[uint64]*slot{}, maxBytes: maxBytes, maxSlots: maxSlots, idleAfter: idleAfter,
		quit: make(chan struct{}), done: make(chan struct{})}
}

// slotName is the file name of slot n.
func slotName(n uint64) string { return fileName(kindSlot, n) }

// stageSlot hands out a free slot of exactly size bytes, or makes one.
func (s *Store) stageSlot(size int64) (Staging, error) {
	t := s.slots
	t.mu.Lock()
	t.lastUsed[size] = time.Now()
	if free := t.free[size]; len(free) > 0 {
		sl := free[len(free)-1]
		t.free[size] = free[:len(free)-1]
		sl.gen++
		sl.state = slotWriting
		t.mu.Unlock()
		s.st.poolHits.Add(1)
		return Staging{RelPath: sl.name, Size: size, Slot: sl.n, Generation: sl.gen}, nil
	}
	evict, err := t.reserveLocked(size)
	t.next++
	n := t.next
	t.mu.Unlock()
	s.unlinkSlots(evict)
	if err != nil {
		return Staging{}, &Error{Op: "stage", Err: err}
	}
	s.st.poolMisses.Add(1)
	sl, err := s.createSlot(n, size)
	if errors.Is(err, unix.ENOSPC) {
		// The filesystem is full, maybe of our own free slots: give them
		// all back and try once more.
		t.mu.Lock()
		evict := t.evictFreeLocked()
		t.mu.Unlock()
		if len(evict) > 0 {
			s.unlinkSlots(evict)
			sl, err = s.createSlot(n, size)
		}
	}
	if err != nil {
		t.mu.Lock()
		t.bytes -= size
		t.reserved--
		t.mu.Unlock()
		return Staging{}, &Error{Op: "stage", RelPath: slotName(n), Err: err}
	}
	sl.gen, sl.state = 1, slotWriting
	t.mu.Lock()
	t.slots[n] = sl
	t.reserved--
	t.mu.Unlock()
	return Staging{RelPath: sl.name, Size: size, Slot: n, Generation: 1}, nil
}

// reserveLocked counts one more slot of size bytes, unlinking free slots of
// other sizes, least recently used size first, when a bound (bytes, or
// slots and so descriptors) needs room.
func (t *slotTable) reserveLocked(size int64) ([]*slot, error) {
	var evict []*slot
	for {
		overBytes := t.maxBytes > 0 && t.bytes+size > t.maxBytes
		overSlots := len(t.slots)+t.reserved+1 > t.maxSlots
		if !overBytes && !overSlots {
			break
		}
		victim := int64(-1)
		for sz, free := range t.free {
			if len(free) > 0 && (victim < 0 || t.lastUsed[sz].Before(t.lastUsed[victim])) {
				victim = sz
			}
		}
		if victim < 0 {
			if overSlots {
				return evict, fmt.Errorf("%w: %d slot files, the bound on the descriptors the store keeps", ErrFull, len(t.slots)+t.reserved)
			}
			return evict, fmt.Errorf("%w: %d bytes of slots, %d more would pass the bound of %d", ErrFull, t.bytes, size, t.maxBytes)
		}
		free := t.free[victim]
		sl := free[0]
		t.free[victim] = free[1:]
		t.dropLocked(sl)
		evict = append(evict, sl)
	}
	t.bytes += size
	t.reserved++
	return evict, nil
}

// evictFreeLocked takes every free slot out of the table, for the caller
// to unlink.
func (t *slotTable) evictFreeLocked() []*slot {
	return t.dropFreeLocked(func(int64) bool { return true })
}

// dropFreeLocked takes the free slots of the sizes which says out of the
// table and returns them, for the caller to unlink.
func (t *slotTable) dropFreeLocked(which func(size int64) bool) []*slot {
	var dropped []*slot
	for size, free := range t.free {
		if !which(size) {
			continue
		}
		for _, sl := range free {
			t.dropLocked(sl)
		}
		dropped = append(dropped, free...)
		delete(t.free, size)
	}
	return dropped
}

func (t *slotTable) dropLocked(sl *slot) {
	delete(t.slots, sl.n)
	delete(t.quarantined, sl.n)
	t.bytes -= sl.size
}

// createSlot makes slot n: a new 0600 inode of size allocated bytes, with
// the read-only descriptor the store keeps.
func (s *Store) createSlot(n uint64, size int64) (*slot, error) {
	name := slotName(n)
	s.st.opens.Add(1)
	wfd, err := unix.Openat(s.dirfd, name, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, os.NewSyscallError("openat", err)
	}
	if size > 0 {
		s.st.fallocates.Add(1)
		err = fallocate(wfd, size)
	}
	if cerr := unix.Close(wfd); err == nil && cerr != nil {
		err = os.NewSyscallError("close", cerr)
	}
	var fd = -1
	if err == nil {
		s.st.opens.Add(1)
		if fd, err = unix.Openat(s.dirfd, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0); err != nil {
			fd, err = -1, os.NewSyscallError("openat", err)
		}
	}
	var st unix.Stat_t
	if err == nil {
		if serr := unix.Fstat(fd, &st); serr != nil {
			err = os.NewSyscallError("fstat", serr)
		}
	}
	if err != nil {
		if fd >= 0 {
			unix.Close(fd)
		}
		s.st.unlinks.Add(1)
		unix.Unlinkat(s.dirfd, name, 0)
		return nil, err
	}
	s.st.slots.Add(1)
	cname, _ := unix.BytePtrFromString(name) // a name this store made has no NUL
	return &slot{n: n, size: size, fd: fd, file: idOf(&st), name: name, cname: cname}, nil
}

// retireSlot drops sl from the table and unlinks it.
func (s *Store) retireSlot(sl *slot) {
	// The name goes first: once the table no longer counts the slot,
	// its file is gone too (nobody hands out a slot in use meanwhile).
	s.st.unlinks.Add(1)
	unix.Unlinkat(s.dirfd, sl.name, 0)
	t := s.slots
	t.mu.Lock()
	t.dropLocked(sl)
	t.mu.Unlock()
	unix.Close(sl.fd)
	s.st.slots.Add(-1)
	s.st.slotsRetired.Add(1)
}

// unlinkSlots removes slots already dropped from the table.
func (s *Store) unlinkSlots(sls []*slot) {
	for _, sl := range sls {
		unix.Close(sl.fd)
		s.st.unlinks.Add(1)
		unix.Unlinkat(s.dirfd, sl.name, 0)
		s.st.slots.Add(-1)
	}
}

// lookup returns slot n if it is in state want.
func (t *slotTable) lookup(n uint64, want slotState) (*slot, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	sl := t.slots[n]
	return sl, sl != nil && sl.state == want
}

// setLeaseRead takes a read lease on fd: false when some open file
// description of the inode is open for writing.
func setLeaseRead(fd int) (bool, error) { return takeLease(fd, unix.F_RDLCK) }

// checkSlot refuses a slot whose name no longer leads to its inode, or
// whose inode gained a name: consumers open slots by name.
func (s *Store) checkSlot(sl *slot) error {
	var st unix.Stat_t
	if err := fstat(sl.fd, &st); err != nil {
		return os.NewSyscallError("fstat", err)
	}
	if st.Nlink != 1 {
		return fmt.Errorf("%w: the slot has %d links, not 1", ErrReplaced, st.Nlink)
	}
	var named unix.Stat_t
	if err := fstatatName(s.dirfd, sl.cname, &named, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return fmt.Errorf("%w: %v", ErrReplaced, os.NewSyscallError("fstatat", err))
	}
	if idOf(&named) != sl.file {
		return fmt.Errorf("%w: the slot's name leads to another inode", ErrReplaced)
	}
	return nil
}

// sealSlot seals the generation being written in slot relPath. With the
// read lease granted nobody can write the inode: its size and digest are
// checked, it is made 0444, the lease dropped. Refused, the bytes are
// copied into another slot, which is sealed instead and named in the
// result, and the refused slot is quarantined.
func (s *Store) sealSlot(relPath string, want int64, digest *[32]byte) (Sealed, error) {
	k, n := parseName(relPath)
	if k != kindSlot || want < 0 {
		return Sealed{}, &Error{Op: "seal", RelPath: relPath, Err: ErrInvalidPath}
	}
	sl, ok := s.slots.lookup(n, slotWriting)
	if !ok {
		return Sealed{}, &Error{Op: "seal", RelPath: relPath, Err: fmt.Errorf("%w: no slot is being written under this name", ErrInvalidPath)}
	}
	if err := s.checkSlot(sl); err != nil {
		s.discardSlot(sl)
		s.st.sealFailures.Add(1)
		return Sealed{}, &Error{Op: "seal", RelPath: relPath, Err: err}
	}
	leased, err := setLeaseRead(sl.fd)
	if err != nil {
		s.recycleWritten(sl)
		s.st.sealFailures.Add(1)
		return Sealed{}, &Error{Op: "seal", RelPath: relPath, Err: err}
	}
	if leased {
		err := checkSize(sl.fd, want)
		if err == nil && digest != nil {
			err = checkDigest(sl.fd, want, digest)
		}
		if err == nil {
			if ferr := fchmod(sl.fd, 0o444); ferr != nil {
				err = os.NewSyscallError("fchmod", ferr)
			}
		}
		setLeaseFcntl(sl.fd, unix.F_UNLCK)
		if err != nil {
			s.recycleWritten(sl)
			s.countSealError(err)
			return Sealed{}, &Error{Op: "seal", RelPath: relPath, Err: err}
		}
		s.setState(sl, slotSealed)
		s.st.leaseSeals.Add(1)
		return Sealed{RelPath: relPath, Size: want, Path: SealLease, Slot: sl.n, Generation: sl.gen}, nil
	}
	// A writer kept the slot: copy into another, then keep this one out of
	// use until nobody writes it any more.
	s.quarantine(sl)
	out, err := s.copyToSlot(sl, want, digest)
	if err != nil {
		s.countSealError(err)
		return Sealed{}, &Error{Op: "seal", RelPath: relPath, Err: err}
	}
	s.st.copySeals.Add(1)
	return out, nil
}

func (s *Store) countSealError(err error) {
	if errors.Is(err, ErrMismatch) {
		s.st.sealMismatch.Add(1)
	} else {
		s.st.sealFailures.Add(1)
	}
}

// copyToSlot copies want bytes of src into a fresh generation of another
// slot and seals that one.
func (s *Store) copyToSlot(src *slot, want int64, digest *[32]byte) (Sealed, error) {
	if err := checkSize(src.fd, want); err != nil {
		return Sealed{}, err
	}
	dst, err := s.stageSlot(want)
	if err != nil {
		return Sealed{}, err
	}
	sl, _ := s.slots.lookup(dst.Slot, slotWriting)
	fail := func(err error) (Sealed, error) {
		s.recycleWritten(sl)
		return Sealed{}, err
	}
	s.st.opens.Add(1)
	wfd, err := unix.Openat(s.dirfd, dst.RelPath, unix.O_WRONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fail(os.NewSyscallError("openat", err))
	}
	var st unix.Stat_t
	if err := unix.Fstat(wfd, &st); err != nil || idOf(&st) != sl.file {
		unix.Close(wfd)
		return fail(fmt.Errorf("%w: the copy's slot name leads to another inode", ErrReplaced))
	}
	err = s.copyChecked(wfd, src.fd, want, digest)
	if cerr := unix.Close(wfd); err == nil && cerr != nil {
		err = os.NewSyscallError("close", cerr)
	}
	if err != nil {
		return fail(err)
	}
	leased, err := setLeaseRead(sl.fd)
	if err != nil || !leased {
		s.quarantine(sl)
		if err == nil {
			err = errors.New("a writer opened the copy's slot while it was written")
		}
		return Sealed{}, err
	}
	err = fchmod(sl.fd, 0o444)
	setLeaseFcntl(sl.fd, unix.F_UNLCK)
	if err != nil {
		return fail(os.NewSyscallError("fchmod", err))
	}
	s.setState(sl, slotSealed)
	return Sealed{RelPath: dst.RelPath, Size: want, Path: SealCopy, Slot: sl.n, Generation: sl.gen}, nil
}

// discardSlot gives up a slot whose name was tampered with: it leaves the
// table and its name is unlinked (whatever file the name now leads to
// keeps its other names), as files mode removes a replaced staging name.
func (s *Store) discardSlot(sl *slot) {
	s.slots.mu.Lock()
	s.slots.dropLocked(sl)
	s.slots.mu.Unlock()
	s.unlinkSlots([]*slot{sl})
}

func (s *Store) setState(sl *slot, st slotState) {
	s.slots.mu.Lock()
	sl.state = st
	s.slots.mu.Unlock()
}

func (s *Store) quarantine(sl *slot) {
	t := s.slots
	t.mu.Lock()
	if sl.state != slotQuarantined {
		sl.state = slotQuarantined
		t.quarantined[sl.n] = sl
	}
	t.mu.Unlock()
}

// freeSlot puts a slot nobody writes back on its size's free list, unless
// it no longer has its size (a writer truncated or extended it): then it
// is retired, so that no later allocation gets it short or long.
func (s *Store) freeSlot(sl *slot) {
	if checkSize(sl.fd, sl.size) != nil {
		s.retireSlot(sl)
		return
	}
	t := s.slots
	t.mu.Lock()
	sl.state = slotFree
	delete(t.quarantined, sl.n)
	t.free[sl.size] = append(t.free[sl.size], sl)
	t.mu.Unlock()
}

// recycleWritten frees a slot whose generation was written but never
// sealed, once the kernel proves nobody writes it; else it is quarantined.
func (s *Store) recycleWritten(sl *slot) {
	leased, err := setLeaseRead(sl.fd)
	if err != nil || !leased {
		s.quarantine(sl)
		return
	}
	setLeaseFcntl(sl.fd, unix.F_UNLCK)
	s.freeSlot(sl)
}

// inUse returns slot relPath and its state if generation gen is being
// written or sealed there; nil (and no error) for a generation the slot has
// left.
func (t *slotTable) inUse(relPath string, gen uint64) (*slot, slotState, error) {
	k, n := parseName(relPath)
	if k != kindSlot {
		return nil, 0, &Error{Op: "remove", RelPath: relPath, Err: ErrInvalidPath}
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	sl := t.slots[n]
	if sl == nil || sl.gen != gen || (sl.state != slotWriting && sl.state != slotSealed) {
		return nil, 0, nil
	}
	return sl, sl.state, nil
}

// recycleSlot ends generation gen of slot relPath: the router's last root
// of it went (sealed), or its writer gave it up (writing). A sealed slot
// is made 0600 and freed without a lease: while it was 0444 only root, or
// its owner after a chmod, could open it for writing, and those are inside
// the trust boundary (a reader that must know can verify the digest). A
// stale generation is ignored.
func (s *Store) recycleSlot(relPath string, gen uint64) error {
	sl, state, err := s.slots.inUse(relPath, gen)
	if sl == nil {
		return err
	}
	if state == slotWriting {
		s.recycleWritten(sl)
		return nil
	}
	if err := fchmod(sl.fd, 0o600); err != nil {
		s.quarantine(sl)
		return &Error{Op: "remove", RelPath: relPath, Err: os.NewSyscallError("fchmod", err)}
	}
	s.freeSlot(sl)
	return nil
}

// janitor unlinks free slots of sizes nobody staged for idleAfter, so a
// burst does not pin memory for ever, and retries quarantined slots.
func (s *Store) janitor() {
	t := s.slots
	defer close(t.done)
	tick := time.NewTicker(max(t.idleAfter/4, 10*time.Millisecond))
	defer tick.Stop()
	for {
		select {
		case <-t.quit:
			return
		case <-tick.C:
		}
		s.mu.RLock()
		if !s.closed {
			s.tidySlots(time.Now())
		}
		s.mu.RUnlock()
	}
}

// tidySlots does one round of the janitor's work as of now.
func (s *Store) tidySlots(now time.Time) {
	t := s.slots
	t.mu.Lock()
	idle := t.dropFreeLocked(func(size int64) bool { return now.Sub(t.lastUsed[size]) >= t.idleAfter })
	var q []*slot
	for _, sl := range t.quarantined {
		q = append(q, sl)
	}
	t.mu.Unlock()
	s.unlinkSlots(idle)
	for _, sl := range q {
		if leased, err := setLeaseRead(sl.fd); err == nil && leased {
			setLeaseFcntl(sl.fd, unix.F_UNLCK)
			if fchmod(sl.fd, 0o600) == nil && s.checkSlot(sl) == nil {
				s.freeSlot(sl)
			}
		}
	}
}

// closeSlots stops the janitor and closes every slot's descriptor; the
// files go with the store directory.
func (s *Store) closeSlots() {
	t := s.slots
	close(t.quit)
	<-t.done
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, sl := range t.slots {
		unix.Close(sl.fd)
	}
	t.slots = map[uint64]*slot{}
	t.free = map[int64][]*slot{}
	t.quarantined = map[uint64]*slot{}
}

// SlotStats counts the pool's slots.
type SlotStats struct {
	Slots, Free, Quarantined int
	Bytes                    int64
}

func (t *slotTable) stats() SlotStats {
	t.mu.Lock()
	defer t.mu.Unlock()
	st := SlotStats{Slots: len(t.slots), Quarantined: len(t.quarantined), Bytes: t.bytes}
	for _, free := range t.free {
		st.Free += len(free)
	}
	return st
}

// MaxSlots is the bound on slot files in pool mode (0 in files mode).
func (s *Store) MaxSlots() int {
	if s.slots == nil {
		return 0
	}
	return s.slots.maxSlots
}
