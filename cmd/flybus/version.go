package main

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"

	"github.com/flybus/flybus/wire"
)

var versionCmd = printCommand("version", "print this build's version, the wire version and the contract digest",
	"Print this build's version, the wire version it speaks and its contract digest\n(`flybus --version` is the same).",
	func() string {
		bi, ok := debug.ReadBuildInfo()
		return versionText(bi, ok)
	})

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
