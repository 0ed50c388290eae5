// Package term holds the two terminal facts the command-line tools need:
// whether an output is a terminal (to redraw in place or print plain
// lines), and raw input (to read single keys) with a way back; and, for
// their tests, a pseudo-terminal to try them on.
package term

import (
	"io"
	"os"

	"golang.org/x/sys/unix"
)

// IsTerminal reports whether w is a terminal: only a terminal has termios
// settings.
func IsTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

// Raw puts the terminal on f into raw input (keys arrive one at a time,
// unechoed, Ctrl-C as a byte) and returns how to restore it; ok is false
// when f is not a terminal. Output processing stays on.
func Raw(f *os.File) (restore func(), ok bool) {
	fd := int(f.Fd())
	old, err := unix.IoctlGetTermios(fd, unix.TCGETS)
	if err != nil {
		return nil, false
	}
	raw := *old
	raw.Lflag &^= unix.ICANON | unix.ECHO | unix.ISIG
	raw.Cc[unix.VMIN], raw.Cc[unix.VTIME] = 1, 0
	if err := unix.IoctlSetTermios(fd, unix.TCSETS, &raw); err != nil {
		return nil, false
	}
	return func() { unix.IoctlSetTermios(fd, unix.TCSETS, old) }, true
}
