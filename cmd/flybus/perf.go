package main

import (
	"io"

	"github.com/flybus/flybus/perf"
)

// perfCmd runs the 60 Hz harness of package perf, or its sweep
// (--sweep); its flags are the package's own.
var perfCmd = &command{
	name:    "perf",
	summary: "measure 640x480 frames at 60 Hz to three consumers, with baselines; --sweep: how the cost grows",
	run: func(_ *command, args []string, stdout, stderr io.Writer) int {
		return perf.Main(args, stdout, stderr)
	},
	usage: perf.Usage,
}
