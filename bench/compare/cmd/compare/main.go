// Command compare runs flybus's peers (an embedded NATS server, and direct
// Unix sockets) on the perf harness's 60 Hz schedule, and plots the
// results beside flybus's own. See ../../README.md.
package main

import (
	"os"

	"github.com/flybus/flybus/bench/compare"
)

func main() {
	compare.RunChild()
	os.Exit(compare.Main(os.Args[1:], os.Stdout, os.Stderr))
}
