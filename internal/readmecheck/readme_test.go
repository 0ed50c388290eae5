package readmecheck

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"
)

// root is the repository's root, relative to this package.
const root = "../.."

// guideDir holds the user's guide, whose Go blocks are checked like the
// README's.
const guideDir = "docs/guide"

// goBlocks returns the bodies of the ```go fences of a markdown text.
func goBlocks(md string) []string {
	var out []string
	for _, m := range regexp.MustCompile("(?ms)^```go\n(.*?)^```").FindAllStringSubmatch(md, -1) {
		out = append(out, m[1])
	}
	return out
}

// programFiles returns README.md and every page of the guide, as paths
// relative to the repository's root.
func programFiles(t *testing.T) []string {
	t.Helper()
	guide, err := filepath.Glob(filepath.Join(root, guideDir, "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	if len(guide) == 0 {
		t.Fatalf("no pages in %s: the guide's Go blocks would go unchecked", guideDir)
	}
	files := []string{"README.md"}
	for _, g := range guide {
		rel, err := filepath.Rel(root, g)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, filepath.ToSlash(rel))
	}
	sort.Strings(files[1:])
	return files
}

// docFiles returns README.md and every markdown file under docs/, as paths
// relative to the repository's root.
func docFiles(t *testing.T) []string {
	t.Helper()
	files := []string{"README.md"}
	err := filepath.WalkDir(filepath.Join(root, "docs"), func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && strings.HasSuffix(path, ".md") {
			rel, err := filepath.Rel(root, path)
			if err != nil {
				return err
			}
			files = append(files, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// block is one Go program of the documentation.
type block struct {
	file string // relative to the repository's root
	n    int    // its place in the file, from 1
	src  string
	pkg  string // the package the overlay places it in
}

func (b block) String() string { return fmt.Sprintf("%s Go block %d", b.file, b.n) }

var notIdent = regexp.MustCompile(`[^a-z0-9]+`)

// TestDocProgramsBuildAndRun builds every Go block of README.md and of the
// guide's pages, and runs those that embed their router.
func TestDocProgramsBuildAndRun(t *testing.T) {
	var blocks []block
	perFile := map[string]int{}
	for _, f := range programFiles(t) {
		md, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			t.Fatal(err)
		}
		name := notIdent.ReplaceAllString(strings.ToLower(strings.TrimSuffix(f, ".md")), "_")
		for i, src := range goBlocks(string(md)) {
			blocks = append(blocks, block{file: f, n: i + 1, src: src, pkg: fmt.Sprintf("zz_doc_%s_block%d", name, i+1)})
			perFile[f]++
		}
	}
	if perFile["README.md"] < 1 {
		t.Errorf("no Go block in README.md, want its producer and consumer")
	}
	if len(blocks) < 5 {
		t.Fatalf("%d Go blocks in the README and the guide (%v), want at least the producer and consumer, RPC, pub/sub, fast-path and socket programs", len(blocks), perFile)
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
	for _, b := range blocks {
		if !strings.HasPrefix(b.src, "package main\n") {
			t.Fatalf("%s is not a complete program (no package main):\n%.200s", b, b.src)
		}
		file := filepath.Join(tmp, b.pkg+".go")
		if err := os.WriteFile(file, []byte(b.src), 0o600); err != nil {
			t.Fatal(err)
		}
		replace[filepath.Join(here, b.pkg, "main.go")] = file
		pkgs = append(pkgs, "./"+b.pkg)
	}
	ov, _ := json.Marshal(map[string]map[string]string{"Replace": replace})
	ovFile := filepath.Join(tmp, "overlay.json")
	if err := os.WriteFile(ovFile, ov, 0o600); err != nil {
		t.Fatal(err)
	}
	bins := filepath.Join(tmp, "bin")
	args := append([]string{"build", "-overlay", ovFile, "-o", bins + "/"}, pkgs...)
	if out, err := exec.Command("go", args...).CombinedOutput(); err != nil {
		var where []string
		for _, b := range blocks {
			where = append(where, fmt.Sprintf("%s is %s", b.pkg, b))
		}
		t.Fatalf("the documentation's Go blocks do not build: %v\n%s\n(%s)", err, out, strings.Join(where, "; "))
	}
	for _, b := range blocks {
		bin := filepath.Join(bins, b.pkg)
		if !strings.Contains(b.src, "router.New(") {
			continue // a client of a running router: building it is the check
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		out, err := exec.CommandContext(ctx, bin).CombinedOutput()
		cancel()
		if err != nil {
			t.Errorf("%s failed: %v\n%s", b, err, out)
			continue
		}
		t.Logf("%s:\n%s", b, out)
	}
}

// TestDocsCiteNothingOutside checks that the README and the docs cite no
// file outside the repository.
func TestDocsCiteNothingOutside(t *testing.T) {
	for _, f := range docFiles(t) {
		md, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(md), "../shared") || strings.Contains(string(md), "DESIGN.md") {
			t.Errorf("%s cites files outside the repository", f)
		}
	}
}

var (
	fence      = regexp.MustCompile("(?ms)^[ \t]*```[^\n]*\n.*?^[ \t]*```[ \t]*$")
	inlineCode = regexp.MustCompile("`[^`\\n]*`")
	mdLink     = regexp.MustCompile(`!?\[[^\]]*\]\(([^)\s]+)\)`)
	heading    = regexp.MustCompile(`(?m)^#{1,6}[ \t]+(.+?)[ \t#]*$`)
	linkText   = regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`)
	notSlug    = regexp.MustCompile(`[^\p{L}\p{M}\p{N}\p{Pc} -]`)
)

// prose is a markdown text without its fenced blocks and inline code,
// where neither links nor headings live.
func prose(md string) string {
	md = fence.ReplaceAllStringFunc(md, func(s string) string {
		return strings.Repeat("\n", strings.Count(s, "\n"))
	})
	return inlineCode.ReplaceAllString(md, "``")
}

// anchors returns the anchors GitHub gives a markdown file's headings:
// lowercased, punctuation dropped, spaces made hyphens, a repeated one
// suffixed -1, -2 and so on.
func anchors(md string) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	plain := fence.ReplaceAllString(md, "")
	for _, m := range heading.FindAllStringSubmatch(plain, -1) {
		text := linkText.ReplaceAllString(m[1], "$1")
		slug := strings.ReplaceAll(notSlug.ReplaceAllString(strings.ToLower(text), ""), " ", "-")
		if n := seen[slug]; n > 0 {
			out[fmt.Sprintf("%s-%d", slug, n)] = true
		} else {
			out[slug] = true
		}
		seen[slug]++
	}
	return out
}

// TestDocLinksResolve checks that every relative link of the README and of
// the docs names a file or directory that exists and, when it names a
// heading of a markdown file, a heading that exists.
func TestDocLinksResolve(t *testing.T) {
	texts := map[string]string{}
	read := func(rel string) (string, bool) {
		if s, ok := texts[rel]; ok {
			return s, true
		}
		b, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(rel)))
		if err != nil {
			return "", false
		}
		texts[rel] = string(b)
		return string(b), true
	}
	links := 0
	for _, f := range docFiles(t) {
		md, ok := read(f)
		if !ok {
			t.Fatalf("%s: unreadable", f)
		}
		for _, m := range mdLink.FindAllStringSubmatch(prose(md), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			links++
			path, anchor, _ := strings.Cut(target, "#")
			rel := f
			if path != "" {
				rel = filepath.ToSlash(filepath.Join(filepath.Dir(f), path))
				if strings.HasPrefix(rel, "../") {
					t.Errorf("%s: link %s leaves the repository", f, target)
					continue
				}
				if _, err := os.Stat(filepath.Join(root, filepath.FromSlash(rel))); err != nil {
					t.Errorf("%s: link %s: no file %s", f, target, rel)
					continue
				}
			}
			if anchor == "" || !strings.HasSuffix(rel, ".md") {
				continue
			}
			doc, ok := read(rel)
			if !ok {
				t.Errorf("%s: link %s: %s unreadable", f, target, rel)
				continue
			}
			if !anchors(doc)[anchor] {
				t.Errorf("%s: link %s: %s has no heading with anchor #%s", f, target, rel, anchor)
			}
		}
	}
	if links == 0 {
		t.Fatal("no relative links found: the link parser is broken")
	}
	t.Logf("%d relative links checked", links)
}
