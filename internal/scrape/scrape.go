// Package scrape reads the HTTP endpoints of a router run by `flybus serve
// --metrics`: /metrics in the Prometheus text format and /details as JSON.
// The flybus command's stats and top and the perf harness read them
// through it.
package scrape

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/flybus/flybus/router"
)

// Get returns the body of a GET of url; any status but 200 is an error,
// hint appended to it. The caller closes the body.
func Get(ctx context.Context, c *http.Client, url, hint string) (io.ReadCloser, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		io.Copy(io.Discard, resp.Body) // so that the connection is kept for the next scrape
		resp.Body.Close()
		return nil, fmt.Errorf("GET %s: %s%s", url, resp.Status, hint)
	}
	return resp.Body, nil
}

// Metrics reads the samples of a /metrics endpoint.
func Metrics(ctx context.Context, c *http.Client, url string) ([]Sample, error) {
	body, err := Get(ctx, c, url, "")
	if err != nil {
		return nil, err
	}
	defer body.Close()
	samples, err := Parse(body)
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", url, err)
	}
	return samples, nil
}

// Details reads a /details snapshot. A field this build does not know is
// an error: the router is of another version, and a figure read as zero
// would mislead.
func Details(ctx context.Context, c *http.Client, url string) (router.Details, error) {
	var d router.Details
	body, err := Get(ctx, c, url, " (a router older than this flybus has no /details)")
	if err != nil {
		return d, err
	}
	defer body.Close()
	dec := json.NewDecoder(body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&d); err != nil {
		return d, fmt.Errorf("GET %s: %v", url, err)
	}
	return d, nil
}

// Label is one label of a sample.
type Label struct{ Name, Value string }

// Sample is one sample line: a metric name, its labels in the order
// written, and its value as written (a timestamp after it is dropped).
type Sample struct {
	Name   string
	Labels []Label
	Value  string
}

// Series is the sample's name and label set, written as the text format
// writes them: name{a="x",b="y"}.
func (s Sample) Series() string {
	if len(s.Labels) == 0 {
		return s.Name
	}
	var b strings.Builder
	b.WriteString(s.Name)
	for i, l := range s.Labels {
		if i == 0 {
			b.WriteByte('{')
		} else {
			b.WriteByte(',')
		}
		b.WriteString(l.Name)
		b.WriteString(`="`)
		b.WriteString(labelEscaper.Replace(l.Value))
		b.WriteByte('"')
	}
	b.WriteByte('}')
	return b.String()
}

var labelEscaper = strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`)

// Parse reads the sample lines of the text format; comments and blank
// lines are skipped.
func Parse(r io.Reader) ([]Sample, error) {
	var out []Sample
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' {
			continue
		}
		s, err := parseLine(line)
		if err != nil {
			return nil, fmt.Errorf("metrics line %d: %v", n, err)
		}
		out = append(out, s)
	}
	return out, sc.Err()
}

func parseLine(line string) (Sample, error) {
	var s Sample
	end := strings.IndexAny(line, "{ ")
	if end <= 0 {
		return s, errors.New("no value")
	}
	s.Name, line = line[:end], line[end:]
	if line[0] == '{' {
		line = line[1:]
		for {
			line = strings.TrimLeft(line, ", ")
			if strings.HasPrefix(line, "}") {
				line = line[1:]
				break
			}
			eq := strings.Index(line, `="`)
			if eq <= 0 {
				return s, errors.New("bad label")
			}
			name := line[:eq]
			value, rest, err := unquoteLabel(line[eq+2:])
			if err != nil {
				return s, err
			}
			s.Labels = append(s.Labels, Label{name, value})
			line = rest
		}
	}
	fields := strings.Fields(line)
	if len(fields) == 0 || len(fields) > 2 { // value [timestamp]
		return s, errors.New("no value")
	}
	s.Value = fields[0]
	return s, nil
}

// unquoteLabel reads a label value up to its closing quote.
func unquoteLabel(s string) (value, rest string, err error) {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '"':
			return b.String(), s[i+1:], nil
		case '\\':
			if i+1 == len(s) {
				return "", "", errors.New("unterminated label value")
			}
			i++
			if s[i] == 'n' {
				b.WriteByte('\n')
			} else {
				b.WriteByte(s[i])
			}
		default:
			b.WriteByte(c)
		}
	}
	return "", "", errors.New("unterminated label value")
}
