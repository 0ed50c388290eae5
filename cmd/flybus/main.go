// Command flybus is the router executable and the operator's tools. Today
// it prints the wire contract; serve, demo, stats, call, pub, sub and perf
// are the subcommands still to come (see the README's status section).
package main

import (
	"fmt"
	"io"
	"os"

	"github.com/flybus/flybus/wire"
)

const usage = `flybus: a local RPC and pub/sub bus with file-backed artifacts

Usage:
  flybus contract     print the wire contract text and its digest
  flybus help         print this help

Example:
  flybus contract | tail -1    # the contractDigest routers and clients exchange

Not built yet: serve, demo, stats, call, pub, sub, declare, perf.
`

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	switch args[0] {
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return 0
	case "contract":
		fmt.Fprint(stdout, wire.Contract)
		fmt.Fprintf(stdout, "contractDigest %s\n", wire.ContractDigest())
		return 0
	}
	fmt.Fprintf(stderr, "flybus: unknown command %q\n\n%s", args[0], usage)
	return 2
}
