package conformance

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// reportPath is docs/conformance.md, relative to this package.
const reportPath = "../../docs/conformance.md"

// moduleRoot is what test file paths in the report are relative to.
const moduleRoot = "../.."

var statuses = []string{"conforms", "deviates-allowed", "not-implemented"}

var (
	// testRef matches path/file_test.go::TestName, with an optional
	// subtest path after a slash, which is not checked.
	testRef = regexp.MustCompile(`([A-Za-z0-9_./-]+_test\.go)::([A-Za-z_][A-Za-z0-9_]*)(/[^\s` + "`" + `,;)]*)?`)
	// pyRef matches python/tests/test_x.py::Class.test_name, the Python
	// binding's unittest methods.
	pyRef  = regexp.MustCompile(`(python/tests/test_[a-z0-9_]+\.py)::([A-Za-z_][A-Za-z0-9_]*)\.(test_[a-z0-9_]+)`)
	rowID  = regexp.MustCompile(`^[0-9]+(\.[0-9]+)+$`)
	counts = regexp.MustCompile(`^COUNTS: ([0-9]+) rows: conforms ([0-9]+), deviates-allowed ([0-9]+), not-implemented ([0-9]+)\.$`)
)

// row is one requirement row of the report.
type row struct {
	line   int
	id     string
	status string
	tests  string // the Tests column
}

func readReport(t *testing.T) (lines []string) {
	t.Helper()
	f, err := os.Open(reportPath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64*1024), 1<<20)
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return lines
}

// parseRows returns the table rows whose first cell is a row number such
// as 4.12 or 8.3.2.
func parseRows(t *testing.T, lines []string) []row {
	t.Helper()
	var rows []row
	for i, l := range lines {
		if !strings.HasPrefix(l, "|") {
			continue
		}
		cells := strings.Split(strings.Trim(strings.TrimSpace(l), "|"), "|")
		if len(cells) == 0 || !rowID.MatchString(strings.TrimSpace(cells[0])) {
			continue
		}
		if len(cells) != 5 {
			t.Errorf("line %d: %d cells, want 5 (number, requirement, status, code, tests)", i+1, len(cells))
			continue
		}
		rows = append(rows, row{
			line:   i + 1,
			id:     strings.TrimSpace(cells[0]),
			status: statusOf(cells[2]),
			tests:  cells[4],
		})
	}
	return rows
}

// statusOf is the status word that opens a status cell: its leading run
// of lowercase letters and hyphens.
func statusOf(cell string) string {
	s := strings.TrimSpace(cell)
	end := 0
	for end < len(s) && (s[end] >= 'a' && s[end] <= 'z' || s[end] == '-') {
		end++
	}
	return s[:end]
}

func known(status string) bool {
	for _, s := range statuses {
		if s == status {
			return true
		}
	}
	return false
}

// TestRowsHaveKnownStatuses checks every row's status, that row numbers
// are unique, that every conforms row names a test in its Tests column, and
// that the counts at the top match the rows.
func TestRowsHaveKnownStatuses(t *testing.T) {
	lines := readReport(t)
	rows := parseRows(t, lines)
	if len(rows) == 0 {
		t.Fatal("no requirement rows found")
	}
	seen := map[string]int{}
	byStatus := map[string]int{}
	for _, r := range rows {
		if prev, dup := seen[r.id]; dup {
			t.Errorf("line %d: row %s already on line %d", r.line, r.id, prev)
		}
		seen[r.id] = r.line
		if !known(r.status) {
			t.Errorf("line %d: row %s has unknown status %q (want one of %v)", r.line, r.id, r.status, statuses)
			continue
		}
		byStatus[r.status]++
		if r.status == "conforms" && !testRef.MatchString(r.tests) && !pyRef.MatchString(r.tests) {
			t.Errorf("line %d: row %s conforms but names no test (path/file_test.go::TestName or python/tests/test_x.py::Class.test_name)", r.line, r.id)
		}
	}
	var stated []string
	for _, l := range lines {
		if m := counts.FindStringSubmatch(l); m != nil {
			stated = m[1:]
		}
	}
	if stated == nil {
		t.Fatal(`no line "COUNTS: N rows: conforms N, deviates-allowed N, not-implemented N."`)
	}
	actual := []string{
		fmt.Sprint(len(rows)), fmt.Sprint(byStatus["conforms"]),
		fmt.Sprint(byStatus["deviates-allowed"]), fmt.Sprint(byStatus["not-implemented"]),
	}
	if strings.Join(stated, " ") != strings.Join(actual, " ") {
		t.Errorf("COUNTS line says rows, conforms, deviates-allowed, not-implemented = %v; the rows give %v", stated, actual)
	}
}

// TestNamedTestsExist checks that every path/file_test.go::Name in the
// report names an existing file that declares func Name(.
func TestNamedTestsExist(t *testing.T) {
	lines := readReport(t)
	sources := map[string]string{}
	checked := map[string]bool{}
	for i, l := range lines {
		for _, m := range testRef.FindAllStringSubmatch(l, -1) {
			file, name := m[1], m[2]
			if !hasTestPrefix(name) {
				t.Errorf("line %d: %s::%s is not a Test, Fuzz, Benchmark or Example function", i+1, file, name)
				continue
			}
			key := file + "::" + name
			if checked[key] {
				continue
			}
			checked[key] = true
			src, ok := sources[file]
			if !ok {
				b, err := os.ReadFile(filepath.Join(moduleRoot, filepath.FromSlash(file)))
				if err != nil {
					t.Errorf("line %d: %s: %v", i+1, file, err)
					sources[file] = ""
					continue
				}
				src = string(b)
				sources[file] = src
			}
			if src != "" && !strings.Contains(src, "func "+name+"(") {
				t.Errorf("line %d: %s declares no func %s(", i+1, file, name)
			}
		}
	}
	if len(checked) == 0 {
		t.Fatal("the report names no tests")
	}
}

// TestNamedPythonTestsExist checks that every python/tests/test_x.py::
// Class.test_name in the report names a file that declares that class and,
// in it or in a mixin the file declares, that method.
func TestNamedPythonTestsExist(t *testing.T) {
	n := 0
	for i, l := range readReport(t) {
		for _, m := range pyRef.FindAllStringSubmatch(l, -1) {
			n++
			b, err := os.ReadFile(filepath.Join(moduleRoot, filepath.FromSlash(m[1])))
			if err != nil {
				t.Errorf("line %d: %v", i+1, err)
				continue
			}
			src := string(b)
			if !regexp.MustCompile(`(?m)^class ` + m[2] + `\b`).MatchString(src) {
				t.Errorf("line %d: %s declares no class %s", i+1, m[1], m[2])
			}
			if !strings.Contains(src, "    def "+m[3]+"(self") {
				t.Errorf("line %d: %s declares no method %s", i+1, m[1], m[3])
			}
		}
	}
	if n == 0 {
		t.Fatal("the report names no Python tests")
	}
}

func hasTestPrefix(name string) bool {
	for _, p := range []string{"Test", "Fuzz", "Benchmark", "Example"} {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}
