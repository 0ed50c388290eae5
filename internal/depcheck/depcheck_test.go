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
}

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
	args := append([]string{"list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}} {{end}}"}, libs...)
	out, err = exec.Command(gobin, args...).Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	for _, dep := range strings.Fields(string(out)) {
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
