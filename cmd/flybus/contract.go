package main

import (
	"fmt"
	"io"

	"github.com/flybus/flybus/wire"
)

var contractCmd = &command{
	name:    "contract",
	summary: "print the wire contract text and its digest",
	run:     runContract,
	usage: func() string {
		return usageText("flybus contract",
			"Print the wire contract text, then its SHA-256 as a last line \"contractDigest HEX\",\nthe digest routers and clients compare in bus.hello.",
			newFlagSet("contract"), "", walkExample("contract"))
	},
}

func runContract(c *command, args []string, stdout, stderr io.Writer) int {
	pos, code, ok := parse(c, newFlagSet("contract"), args, stdout, stderr)
	if !ok {
		return code
	}
	if len(pos) > 0 {
		return usageError(c, stderr, "unexpected argument "+pos[0])
	}
	fmt.Fprint(stdout, wire.Contract)
	fmt.Fprintf(stdout, "contractDigest %s\n", wire.ContractDigest())
	return exitOK
}
