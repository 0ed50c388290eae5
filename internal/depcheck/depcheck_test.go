package depcheck

import (
	"os/exec"
	"strings"
	"testing"
)

// allowed are the modules a library package may depend on.
var allowed = []string{
	"golang.org/x/sys/",
	"github.com/edsrzf/mmap-go",
	"github.com/goccy/go-json",
	"github.com/klauspost/cpuid/v2",
	recordOnly,
}

// recordOnly is allowed to the recording packages alone (record/...), for
// zstd chunks: no other package may come to depend on it.
const recordOnly = "github.com/klauspost/compress"

func TestLibraryPackagesImportOnlyTheAllowedModules(t *testing.T) {
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command on PATH")
	}
	const module = "github.com/flybus/flybus/"
	// Every package of the module but the executable and test support;
	// nested modules (bench/compare, bridge) are not in this pattern.
	out, err := exec.Command(gobin, "list", "-f", "{{.ImportPath}}", module+"...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	var libs []string
	for _, p := range strings.Fields(string(out)) {
		rest := strings.TrimPrefix(p, module)
		if !strings.HasPrefix(rest, "cmd/") && !strings.HasPrefix(rest, "internal/") {
			libs = append(libs, p)
		}
	}
	if len(libs) < 6 {
		t.Fatalf("only %d library packages listed: %v", len(libs), libs)
	}
	deps := func(pkgs []string) []string {
		args := append([]string{"list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}} {{end}}"}, pkgs...)
		out, err := exec.Command(gobin, args...).Output()
		if err != nil {
			t.Fatalf("go list -deps: %v", err)
		}
		return strings.Fields(string(out))
	}
	var others []string
	for _, p := range libs {
		if rest := strings.TrimPrefix(p, module); rest != "record" && !strings.HasPrefix(rest, "record/") {
			others = append(others, p)
		}
	}
	for _, dep := range deps(others) {
		if strings.HasPrefix(dep+"/", recordOnly+"/") {
			t.Errorf("a library package outside record/ depends on %s", dep)
		}
	}
	for _, dep := range deps(libs) {
		if strings.HasPrefix(dep, module) && !strings.HasPrefix(dep, module+"cmd/") {
			continue
		}
		ok := false
		for _, a := range allowed {
			ok = ok || strings.HasPrefix(dep+"/", a) || strings.HasPrefix(dep, a)
		}
		if !ok {
			t.Errorf("a library package depends on %s", dep)
		}
	}
}
