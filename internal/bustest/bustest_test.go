package bustest

import (
	"os/exec"
	"strings"
	"testing"
)

// TestOnlyTestsImportIt checks that no package of the module imports
// bustest outside its _test.go files: it is test support, and it brings a
// whole router into what imports it.
func TestOnlyTestsImportIt(t *testing.T) {
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command on PATH")
	}
	const module = "github.com/flybus/flybus/"
	out, err := exec.Command(gobin, "list", "-f", `{{.ImportPath}} {{join .Imports " "}}`, module+"...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) < 6 {
		t.Fatalf("only %d packages listed", len(lines))
	}
	for _, line := range lines {
		pkg, imports, _ := strings.Cut(line, " ")
		for _, imp := range strings.Fields(imports) {
			if imp == module+"internal/bustest" {
				t.Errorf("%s imports bustest outside its tests", pkg)
			}
		}
	}
}
