package main

import (
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
	"strings"

	"github.com/flybus/flybus/wire"
)

var versionCmd = &command{
	name:    "version",
	summary: "print this build's version, the wire version and the contract digest",
	run:     runVersion,
	usage: func() string {
		return usageText("flybus version", "Print this build's version, the wire version it speaks and its contract digest\n(`flybus --version` is the same).",
			newFlagSet("version"), "", walkExample("version"))
	},
}

func runVersion(c *command, args []string, stdout, stderr io.Writer) int {
	pos, code, ok := parse(c, newFlagSet("version"), args, stdout, stderr)
	if !ok {
		return code
	}
	if len(pos) > 0 {
		return usageError(c, stderr, "unexpected argument "+pos[0])
	}
	bi, ok := debug.ReadBuildInfo()
	fmt.Fprint(stdout, versionText(bi, ok))
	return exitOK
}

// versionText renders the build information: the module version the go
// command stamped (a tag, or a pseudo-version from the commit), else
// "devel", then the commit when known, the toolchain, and what the build
// speaks on the wire. Two routers or tools that print the same wire line
// and digest interoperate.
func versionText(bi *debug.BuildInfo, ok bool) string {
	version, goVersion := "devel", runtime.Version()
	var rev, when string
	modified := false
	if ok && bi != nil {
		if v := bi.Main.Version; v != "" && v != "(devel)" {
			version = v
		}
		if bi.GoVersion != "" {
			goVersion = bi.GoVersion
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.time":
				when = s.Value
			case "vcs.modified":
				modified = s.Value == "true"
			}
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "flybus %s\n", version)
	if rev != "" {
		line := "revision " + rev
		if when != "" {
			line += " " + when
		}
		if modified {
			line += " modified"
		}
		b.WriteString(line + "\n")
	}
	fmt.Fprintf(&b, "go %s %s/%s\n", goVersion, runtime.GOOS, runtime.GOARCH)
	fmt.Fprintf(&b, "wire %d.%d\n", wire.Major, wire.Minor)
	fmt.Fprintf(&b, "contractDigest %s\n", wire.ContractDigest())
	return b.String()
}
