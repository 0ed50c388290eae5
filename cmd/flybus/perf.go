package main

import (
	"io"

	"github.com/flybus/flybus/perf"
)

// perfCmd runs the 60 Hz harness of package perf; its flags are the
// package's own.
var perfCmd = &command{
	name:    "perf",
	summary: "measure 640x480 frames at 60 Hz to three consumers, with baselines",
	run: func(_ *command, args []string, stdout, stderr io.Writer) int {
		return perf.Main(args, stdout, stderr)
	},
	usage: perf.Usage,
}
