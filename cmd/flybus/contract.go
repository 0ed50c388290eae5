package main

import (
	"github.com/flybus/flybus/wire"
)

var contractCmd = printCommand("contract", "print the wire contract text and its digest",
	"Print the wire contract text, then its SHA-256 as a last line \"contractDigest HEX\",\nthe digest routers and clients compare in bus.hello.",
	func() string { return wire.Contract + "contractDigest " + wire.ContractDigest() + "\n" })
