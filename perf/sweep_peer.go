package perf

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// The NATS peer lives in bench/compare, a nested module, so that this
// module does not depend on the NATS server; the sweep runs its
// `compare sweep-point` command once per point and reads the result as
// JSON from its stdout.

// locateCompare finds bench/compare's executable: the given path, or one
// built from the flybus module holding the working directory into dir.
func locateCompare(ctx context.Context, given, dir string) (path, how string, err error) {
	if given != "" {
		abs, err := givenExecutable(given)
		if err != nil {
			return "", "", err
		}
		return abs, "--compare", nil
	}
	root, err := moduleRoot(ctx)
	if err != nil {
		return "", "", fmt.Errorf("cannot build bench/compare (%w); pass --compare PATH or --no-nats", err)
	}
	out := filepath.Join(dir, "compare")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", out, "./cmd/compare")
	cmd.Dir = filepath.Join(root, "bench", "compare")
	if msg, err := cmd.CombinedOutput(); err != nil {
		return "", "", fmt.Errorf("go build ./cmd/compare in %s: %v\n%s(pass --compare PATH or --no-nats)", cmd.Dir, err, msg)
	}
	return out, "go build ./cmd/compare in bench/compare", nil
}

// peerSlack is how long a peer point may take beyond its seconds: starting
// the server, connecting, draining.
const peerSlack = 90 * time.Second

// runPeerPoint runs `compare sweep-point` for p and decodes its result.
func runPeerPoint(ctx context.Context, bin string, p SweepPoint) (*PointResult, error) {
	spec, err := json.Marshal(p)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, time.Duration(p.Seconds*float64(time.Second))+peerSlack)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "sweep-point", "--point", string(spec))
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	runErr := cmd.Run()
	var r PointResult
	if err := json.Unmarshal(stdout.Bytes(), &r); err != nil || r.Peer == "" {
		msg := strings.TrimSpace(stderr.String())
		if runErr != nil {
			return nil, fmt.Errorf("%s sweep-point: %v: %s", bin, runErr, msg)
		}
		return nil, fmt.Errorf("%s sweep-point printed no result (%v): %s", bin, err, msg)
	}
	return &r, nil
}
