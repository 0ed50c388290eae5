// Package store is flybus's artifact file store on tmpfs, and the client's
// way of opening a file the router points it to.
//
// # Router side
//
// A router incarnation owns one directory, <root>/<id>/, mode 0700, marked
// by a file it holds under flock for as long as it lives. Open sweeps away
// the directories of dead incarnations (marker present, lock free) and
// creates its own; Close removes it.
//
// An artifact is born as a staging file (Stage): a fresh inode of the
// allocated length, mode 0600, already fallocated so that a producer's write
// cannot fail for space. Files for recently requested sizes are prepared
// ahead by a background goroutine, so Stage is usually a table lookup.
//
// Seal turns a staging file into an immutable sealed file. It first proves
// that no writer remains by taking a Linux write lease, which the kernel
// grants only when no other open file description of the inode exists, in
// any process (a mapping counts: it keeps its file open). Then the file is
// checked, made read-only and renamed: the bytes never move. When a producer
// still holds a descriptor or a mapping, the lease is refused and Seal copies
// the bytes into a fresh inode instead, unlinking the staging file so that
// whatever the producer still writes lands in an orphan nobody reads.
//
// Remove unlinks a staging or sealed file once nothing refers to it.
//
// # Client side
//
// The router hands a client a location: a store id and a relative path.
// OpenRead and OpenWrite resolve it strictly beneath the store root the
// client was configured with, refusing absolute paths, "..", and symbolic
// links anywhere on the way, so a location can never name a file outside the
// store.
//
// # Deployment
//
// On tmpfs with 4 KiB pages, creating and fallocating a 1.2 MB file costs a
// few hundred microseconds, hence the pool. A store on a tmpfs mounted with
// large folios,
//
//	mount -t tmpfs -o huge=within_size,mode=0700 flybus /run/flybus
//
// makes allocation about twenty times cheaper and writes and views about three
// times cheaper; it is the recommended production mount.
//
// The store runs as the user that owns its files: the kernel grants a lease
// only to the file's owner or to a process with CAP_LEASE. File modes guard
// against accidents, not against code running as the same user, which can
// change them.
package store
