package router

import (
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// The routing core is a state machine stepped under one lock: it must do
// no I/O and read no clock, so that stepping is deterministic (the
// simulation depends on it) and never blocks other connections. Every
// non-test file of the package is either core or shell; a new file must be
// put in one list.
var (
	coreFiles = []string{"admission.go", "artifacts.go", "core.go", "details_core.go", "lanes.go", "policy.go",
		"pubsub.go", "rpc.go", "slab.go", "step.go", "doc.go"}
	shellFiles = []string{"await.go", "details.go", "latency.go", "listen.go", "mempipe.go", "router.go", "shell.go"}
	// What the core may not import: I/O, clocks, randomness, logging.
	forbidden = []string{"net", "os", "time", "syscall", "io", "io/fs", "log", "log/slog", "context", "crypto/rand",
		"math/rand", "math/rand/v2", "golang.org/x/sys/unix", "github.com/flybus/flybus/store"}
)

func TestTheCoreImportsNoIOAndNoClock(t *testing.T) {
	known := map[string]bool{}
	for _, f := range append(append([]string(nil), coreFiles...), shellFiles...) {
		known[f] = true
	}
	names, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		if !strings.HasSuffix(n, "_test.go") && !known[n] {
			t.Errorf("%s is neither a core nor a shell file: add it to one list in core_imports_test.go", n)
		}
	}
	fset := token.NewFileSet()
	for _, n := range coreFiles {
		if _, err := os.Stat(n); err != nil {
			t.Errorf("core file %s: %v", n, err)
			continue
		}
		f, err := parser.ParseFile(fset, n, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range f.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			for _, bad := range forbidden {
				if path == bad {
					t.Errorf("core file %s imports %s", n, path)
				}
			}
		}
	}
}
