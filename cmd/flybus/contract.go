package main

import (
	"flag"
	"fmt"
	"io"

	"github.com/flybus/flybus/wire"
)

var contractCmd = &command{
	name:    "contract",
	summary: "print the wire contract text and its digest",
	usage: func() string {
		return usageText("flybus contract [--minor N]",
			"Print the wire contract text, then its SHA-256 as a last line \"contractDigest HEX\",\nthe digest routers and clients compare in bus.hello.",
			contractFlags(new(uint)), fmt.Sprintf("A router answers a client in the minor version its hello was written in, from %d.%d to %d.%d,\nwith that minor's digest: --minor prints an older one, which clients built against it carry.\n",
				wire.Major, wire.OldestMinor, wire.Major, wire.Minor), walkExample("contract"))
	},
	run: func(c *command, args []string, stdout, stderr io.Writer) int {
		var minor uint
		pos, code, ok := parse(c, contractFlags(&minor), args, stdout, stderr)
		if !ok {
			return code
		}
		if len(pos) > 0 {
			return usageError(c, stderr, "unexpected argument "+pos[0])
		}
		text, known := wire.ContractFor(uint32(minor))
		if !known {
			return usageError(c, stderr, fmt.Sprintf("--minor %d: this flybus speaks %d.%d to %d.%d", minor, wire.Major, wire.OldestMinor, wire.Major, wire.Minor))
		}
		digest, _ := wire.ContractDigestFor(uint32(minor))
		fmt.Fprint(stdout, text+"contractDigest "+digest.String()+"\n")
		return exitOK
	},
}

func contractFlags(minor *uint) *flag.FlagSet {
	set := newFlagSet("contract")
	set.UintVar(minor, "minor", wire.Minor, "print the contract of minor version `N`")
	return set
}
