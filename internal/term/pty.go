package term

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// OpenPTY opens a pseudo-terminal pair, for the tests that need a real
// terminal: writes to slave are read from master. The error says which
// step failed where the system has no pseudo-terminals to give.
func OpenPTY() (master, slave *os.File, err error) {
	m, err := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("no pseudo-terminals: %w", err)
	}
	fail := func(step string, err error) (*os.File, *os.File, error) {
		m.Close()
		return nil, nil, fmt.Errorf("%s: %w", step, err)
	}
	if err := unix.IoctlSetPointerInt(int(m.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		return fail("unlockpt", err)
	}
	n, err := unix.IoctlGetInt(int(m.Fd()), unix.TIOCGPTN)
	if err != nil {
		return fail("ptsname", err)
	}
	s, err := os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		return fail("open pts", err)
	}
	return m, s, nil
}
