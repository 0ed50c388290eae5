package main

import (
	"bytes"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/flybus/flybus/router"
	"github.com/flybus/flybus/wire"
)

// filledStats gives every numeric Stats field a distinct value (its index
// plus one), so the rendering of each can be checked.
func filledStats() router.Stats {
	var s router.Stats
	v := reflect.ValueOf(&s).Elem()
	for i := range v.NumField() {
		switch f := v.Field(i); f.Kind() {
		case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
			f.SetInt(int64(i + 1))
		case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
			f.SetUint(uint64(i + 1))
		case reflect.Float32, reflect.Float64:
			f.SetFloat(float64(i + 1))
		}
	}
	s.Refusals = map[string]uint64{"NO_SERVICE": 3, "BACKPRESSURE": 12}
	return s
}

func render(t *testing.T, s router.Stats) string {
	t.Helper()
	var b bytes.Buffer
	if err := writeMetrics(&b, statsFamilies(s, "router-00000000000000ab", "store-00000000000000ab")); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

func TestMetricsRenderEveryStatsField(t *testing.T) {
	out := render(t, filledStats())
	typ := reflect.TypeFor[router.Stats]()
	for i := range typ.NumField() {
		f := typ.Field(i)
		if f.Type.Kind() == reflect.Map {
			continue // checked below
		}
		name := "flybus_" + snakeCase(f.Name)
		kind := "gauge"
		isUnsigned := f.Type.Kind() >= reflect.Uint && f.Type.Kind() <= reflect.Uint64
		if isUnsigned && !strings.HasSuffix(f.Name, "Bytes") {
			kind = "counter"
			if !strings.HasSuffix(name, "_total") {
				name += "_total"
			}
		}
		for _, line := range []string{
			"# TYPE " + name + " " + kind + "\n",
			"\n" + name + " " + strconv.Itoa(i+1) + "\n",
		} {
			if !strings.Contains(out, line) {
				t.Errorf("field %s: no line %q", f.Name, strings.TrimSpace(line))
			}
		}
		if _, ok := metricHelp[f.Name]; !ok {
			t.Logf("field %s has only the generic help text", f.Name)
		}
	}
	for _, line := range []string{
		"# TYPE flybus_refusals_total counter\n",
		`flybus_refusals_total{code="NO_SERVICE"} 3` + "\n",
		`flybus_refusals_total{code="BACKPRESSURE"} 12` + "\n",
		`flybus_refusals_total{code="CONFLICT"} 0` + "\n",
		`flybus_router_info{router_id="router-00000000000000ab",store_id="store-00000000000000ab"} 1` + "\n",
	} {
		if !strings.Contains(out, line) {
			t.Errorf("no line %q", strings.TrimSpace(line))
		}
	}
	// Every code appears, so a rate over a code that has not happened yet
	// is zero rather than absent.
	if n := strings.Count(out, "flybus_refusals_total{"); n != len(wire.AllErrorCodes()) {
		t.Errorf("%d refusal samples, want one per code (%d)", n, len(wire.AllErrorCodes()))
	}
}

func TestMetricsRenderFormat(t *testing.T) {
	out := render(t, router.Stats{Connections: 2, CallsTotal: 7})
	// Each family is HELP, TYPE, then its samples; names are unique.
	seen := map[string]bool{}
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	for i := 0; i < len(lines); {
		help, typ := lines[i], lines[i+1]
		if !strings.HasPrefix(help, "# HELP flybus_") || !strings.HasPrefix(typ, "# TYPE flybus_") {
			t.Fatalf("line %d: family starts %q / %q", i, help, typ)
		}
		name := strings.Fields(typ)[2]
		if strings.Fields(help)[2] != name || seen[name] {
			t.Fatalf("family %s: HELP for %s, or repeated", name, strings.Fields(help)[2])
		}
		seen[name] = true
		if kind := strings.Fields(typ)[3]; kind == "counter" != strings.HasSuffix(name, "_total") {
			t.Errorf("%s is a %s: counters, and only counters, end in _total", name, kind)
		}
		for i += 2; i < len(lines) && !strings.HasPrefix(lines[i], "#"); i++ {
			if !strings.HasPrefix(lines[i], name+" ") && !strings.HasPrefix(lines[i], name+"{") {
				t.Errorf("sample %q under family %s", lines[i], name)
			}
		}
	}
	for _, line := range []string{"flybus_connections 2", "flybus_calls_total 7", "flybus_store_bytes 0"} {
		if !strings.Contains(out, "\n"+line+"\n") {
			t.Errorf("no line %q", line)
		}
	}
}

func TestMetricsLabelEscaping(t *testing.T) {
	var b bytes.Buffer
	fam := metricFamily{name: "flybus_x_total", help: "a \\ b\nc", kind: "counter",
		samples: []sample{{labels: []label{{"code", "a\"b\\c\nd"}}, value: "1"}}}
	if err := writeMetrics(&b, []metricFamily{fam}); err != nil {
		t.Fatal(err)
	}
	want := "# HELP flybus_x_total a \\\\ b\\nc\n# TYPE flybus_x_total counter\nflybus_x_total{code=\"a\\\"b\\\\c\\nd\"} 1\n"
	if b.String() != want {
		t.Errorf("got\n%s\nwant\n%s", b.String(), want)
	}
	// The stats parser reads back what the renderer escaped.
	samples, err := parseMetricsText(&b)
	if err != nil || len(samples) != 1 || samples[0].labels[0].value != "a\"b\\c\nd" {
		t.Fatalf("parsed %+v, %v", samples, err)
	}
}

func TestSnakeCase(t *testing.T) {
	for in, want := range map[string]string{
		"Connections": "connections", "ActiveCalls": "active_calls", "ConnectionsTotal": "connections_total",
		"HTTPCalls": "http_calls", "PoolHits": "pool_hits", "Seals2Go": "seals2_go", "ID": "id",
	} {
		if got := snakeCase(in); got != want {
			t.Errorf("snakeCase(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestStatsTable(t *testing.T) {
	var metrics bytes.Buffer
	s := router.Stats{Connections: 3, CallsTotal: 12345, Refusals: map[string]uint64{"NO_SERVICE": 2, "CONFLICT": 1}}
	if err := writeMetrics(&metrics, statsFamilies(s, "router-00000000000000ab", "store-00000000000000ab")); err != nil {
		t.Fatal(err)
	}
	samples, err := parseMetricsText(&metrics)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := writeStatsTable(&out, samples); err != nil {
		t.Fatal(err)
	}
	text := out.String()
	lines := strings.Split(strings.TrimSuffix(text, "\n"), "\n")
	if lines[0] != "router router-00000000000000ab" || lines[1] != "store store-00000000000000ab" {
		t.Fatalf("header:\n%s", text)
	}
	// Names left-aligned, values right-aligned: every row is as wide.
	width := len(lines[2])
	for _, l := range lines[2:] {
		if len(l) != width {
			t.Errorf("row %q is not %d wide", l, width)
		}
	}
	for _, want := range []string{"connections", "calls_total", "refusals_total", "  CONFLICT", "  NO_SERVICE"} {
		found := false
		for _, l := range lines[2:] {
			f := strings.Fields(l)
			if strings.HasPrefix(l, want+" ") && len(f) == 2 {
				found = true
				switch f[0] {
				case "connections":
					found = f[1] == "3"
				case "calls_total":
					found = f[1] == "12345"
				case "refusals_total":
					found = f[1] == "3"
				}
			}
		}
		if !found {
			t.Errorf("no correct row for %s:\n%s", want, text)
		}
	}
	// The refusals follow their total, and zero codes are left out.
	if !strings.Contains(text, "refusals_total") || strings.Contains(text, "BACKPRESSURE") {
		t.Errorf("refusals not grouped:\n%s", text)
	}
	i := strings.Index(text, "refusals_total")
	if !strings.Contains(text[i:], "  CONFLICT") || !strings.Contains(text[i:], "  NO_SERVICE") {
		t.Errorf("codes should follow their total:\n%s", text)
	}
}

func TestParseMetricsTextRefusesGarbage(t *testing.T) {
	for _, doc := range []string{"novalue\n", `x{code="a} 1` + "\n", `x{code} 1` + "\n", `x{code="a"}` + "\n"} {
		if s, err := parseMetricsText(strings.NewReader(doc)); err == nil {
			t.Errorf("%q parsed as %+v", doc, s)
		}
	}
}
