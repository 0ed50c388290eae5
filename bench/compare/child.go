package compare

import (
	"fmt"
	"os"
	"os/exec"
)

// childEnv names the role a re-executed compare binary (or test binary)
// plays: the NATS server or the direct consumers.
const childEnv = "FLYBUS_COMPARE_CHILD"

// RunChild runs this process as a child when the parent asked for one, and
// exits; otherwise it returns. The compare command and TestMain call it
// first thing.
func RunChild() {
	role := os.Getenv(childEnv)
	if role == "" {
		return
	}
	var err error
	switch role {
	case "nats-server":
		err = natsServerChild()
	case "direct-consumers":
		err = directConsumersChild()
	default:
		err = fmt.Errorf("unknown child role %q", role)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "compare child %s: %v\n", role, err)
		os.Exit(1)
	}
	os.Exit(0)
}

// childCommand re-executes this binary in a child role.
func childCommand(role string, env ...string) (*exec.Cmd, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(self)
	cmd.Env = append(append(os.Environ(), childEnv+"="+role), env...)
	cmd.Stderr = os.Stderr
	return cmd, nil
}
