package scrape

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/flybus/flybus/router"
)

func TestParse(t *testing.T) {
	samples, err := Parse(strings.NewReader("# HELP x y\nx_total{code=\"a\\\"b\\\\c\\nd\",k=\"v\"} 1 1700000000\n\ny 1.5e3\n"))
	if err != nil || len(samples) != 2 || samples[0].Name != "x_total" || samples[0].Labels[0].Value != "a\"b\\c\nd" ||
		samples[0].Labels[1] != (Label{"k", "v"}) || samples[0].Value != "1" || samples[1].Name != "y" || samples[1].Value != "1.5e3" {
		t.Fatalf("parsed %+v, %v", samples, err)
	}
	if got, want := samples[0].Series(), `x_total{code="a\"b\\c\nd",k="v"}`; got != want {
		t.Errorf("series %s, want %s", got, want)
	}
	for _, doc := range []string{"novalue\n", `x{code="a} 1` + "\n", `x{code} 1` + "\n", `x{code="a"}` + "\n", "x 1 2 3\n"} {
		if s, err := Parse(strings.NewReader(doc)); err == nil {
			t.Errorf("%q parsed as %+v", doc, s)
		}
	}
}

// A sample's series, parsed again, is the same sample.
func FuzzParse(f *testing.F) {
	for _, seed := range []string{
		"x 1\n", `x{a="b c"} 2 1700000000000` + "\n", "# HELP x y\nx_total{code=\"a\\\"b\\\\c\\nd\",k=\"v\"} 1\n",
		`flybus_router_info{router_id="router-0123456789abcdef",store_id="store-0123456789abcdef"} 1` + "\n", "novalue\n",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, doc string) {
		samples, err := Parse(strings.NewReader(doc))
		if err != nil {
			return
		}
		for _, s := range samples {
			again, err := Parse(strings.NewReader(s.Series() + " " + s.Value + "\n"))
			if err != nil || len(again) != 1 || again[0].Series() != s.Series() || again[0].Value != s.Value {
				t.Fatalf("%+v written as %q read back as %+v, %v", s, s.Series(), again, err)
			}
		}
	})
}

func TestGetAndDetails(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/details":
			w.Write([]byte(`{"topics":[{"name":"frames","publications":4}]}`))
		case "/newer":
			w.Write([]byte(`{"topics":[],"aFieldOfANewerRouter":1}`))
		case "/metrics":
			w.Write([]byte("flybus_connections 3\n"))
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	ctx := context.Background()
	d, err := Details(ctx, srv.Client(), srv.URL+"/details")
	if err != nil || len(d.Topics) != 1 || d.Topics[0] != (router.TopicDetail{Name: "frames", Publications: 4}) {
		t.Fatalf("details %+v, %v", d, err)
	}
	if _, err := Details(ctx, srv.Client(), srv.URL+"/newer"); err == nil || !strings.Contains(err.Error(), "aFieldOfANewerRouter") {
		t.Errorf("a field this build does not know: %v", err)
	}
	if _, err := Details(ctx, srv.Client(), srv.URL+"/missing"); err == nil || !strings.Contains(err.Error(), "404 Not Found (a router older") {
		t.Errorf("a router without /details: %v", err)
	}
	s, err := Metrics(ctx, srv.Client(), srv.URL+"/metrics")
	if err != nil || len(s) != 1 || s[0].Series() != "flybus_connections" || s[0].Value != "3" {
		t.Fatalf("metrics %+v, %v", s, err)
	}
}
