// Package mmap maps files into memory as handles with an explicit Close.
//
// A View is a read-only shared mapping of a sealed artifact: a consumer reads
// the frame in place, without a copy. A Writable is a read-write shared
// mapping of a staging file, for a producer that wants to render straight into
// the store. Both are structs rather than bare slices so that the mapping is
// released through its handle, exactly once, and so that a read-only mapping
// is never mistaken for memory one may write (writing it faults).
//
// The slice returned by Bytes is valid until Close. Using it afterwards, or
// mapping more bytes than the file holds, is a memory fault that Go cannot
// recover from; MapFile and MapWritable refuse a size beyond the file's end
// for that reason, and a file must not be truncated while it is mapped.
//
// Cost: on 4 KiB tmpfs pages, setting up and tearing down page tables, not
// the bytes, dominate a view's cost; prefaulting with MAP_POPULATE was
// measured slower, so it is not used. A store on tmpfs mounted with
// huge=within_size is about three times cheaper to map. For a producer,
// (*os.File).WriteAt is three to four times faster than filling a Writable;
// the mapping is for code that must render in place. BenchmarkView,
// BenchmarkWritable and BenchmarkKernelFloor measure this on the machine at
// hand.
//
// A Region is a long-lived read-only mapping of a whole file: a consumer's
// cached mapping of a pooled store's slot, made once per slot and read for
// many generations. Regions are made off the hot path with mmap-go's
// MapRegion; Views, made and unmapped per frame in files mode, call
// unix.MmapPtr directly to skip x/sys's table of active mappings (a global
// lock and a map insert per call).
//
// A handle that is garbage collected without Close is unmapped by a
// runtime cleanup and counted by Leaked. That is a safety net for a bug, not
// a way to manage mappings: the mapping lives until some later collection.
package mmap
