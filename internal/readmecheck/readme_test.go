package readmecheck

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// goBlocks returns the bodies of the ```go fences of a markdown text.
func goBlocks(md string) []string {
	var out []string
	for _, m := range regexp.MustCompile("(?ms)^```go\n(.*?)^```").FindAllStringSubmatch(md, -1) {
		out = append(out, m[1])
	}
	return out
}

func TestREADMEProgramsBuildAndRun(t *testing.T) {
	md, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(md), "../shared") || strings.Contains(string(md), "DESIGN.md") {
		t.Error("the README cites files outside the repository")
	}
	blocks := goBlocks(string(md))
	if len(blocks) < 4 {
		t.Fatalf("%d Go blocks in the README, want the RPC, pub/sub, artifact and socket programs", len(blocks))
	}
	here, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	// An overlay places each block in a package of its own inside this
	// module, without writing into the source tree, so its imports resolve
	// to this checkout; one go build builds them all.
	tmp := t.TempDir()
	replace := map[string]string{}
	var pkgs []string
	for i, src := range blocks {
		if !strings.HasPrefix(src, "package main\n") {
			t.Fatalf("README Go block %d is not a complete program (no package main):\n%.200s", i+1, src)
		}
		name := fmt.Sprintf("zz_readme_block%d", i+1)
		file := filepath.Join(tmp, name+".go")
		if err := os.WriteFile(file, []byte(src), 0o600); err != nil {
			t.Fatal(err)
		}
		replace[filepath.Join(here, name, "main.go")] = file
		pkgs = append(pkgs, "./"+name)
	}
	ov, _ := json.Marshal(map[string]map[string]string{"Replace": replace})
	ovFile := filepath.Join(tmp, "overlay.json")
	if err := os.WriteFile(ovFile, ov, 0o600); err != nil {
		t.Fatal(err)
	}
	bins := filepath.Join(tmp, "bin")
	args := append([]string{"build", "-overlay", ovFile, "-o", bins + "/"}, pkgs...)
	if out, err := exec.Command("go", args...).CombinedOutput(); err != nil {
		t.Fatalf("the README's Go blocks do not build: %v\n%s", err, out)
	}
	for i, src := range blocks {
		bin := filepath.Join(bins, fmt.Sprintf("zz_readme_block%d", i+1))
		if !strings.Contains(src, "router.New(") {
			continue // a client of a running router: building it is the check
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		out, err := exec.CommandContext(ctx, bin).CombinedOutput()
		cancel()
		if err != nil {
			t.Errorf("README Go block %d failed: %v\n%s", i+1, err, out)
			continue
		}
		t.Logf("README Go block %d:\n%s", i+1, out)
	}
}
