// Package leakcheck lets tests prove that an operation left nothing behind:
// no goroutine, no file descriptor, no memory mapping, no file on disk.
//
// Take a count before the work, do the work, release what it acquired, then
// compare. Counts are process-wide, so take the baseline after any lazy
// runtime setup the test triggers (the first os.File, the first timer) and do
// not run leak-checking tests in parallel with others.
package leakcheck
