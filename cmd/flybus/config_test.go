package main

import (
	"flag"
	"fmt"
	"io/fs"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/flybus/flybus/router"
	"github.com/flybus/flybus/store"
	"github.com/flybus/flybus/wire"
)

func patterns(ps []router.Pattern) []string {
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = p.String()
	}
	return out
}

func TestParseConfigEveryKey(t *testing.T) {
	fc, err := parseConfig([]byte(`{
		"store": "/dev/shm/flybus",
		"storeMode": "pool",
		"listen": [{"path": "/run/a.sock", "client": "agent-a"}, {"path": "/run/open.sock", "client": null}, {"path": "/run/b.sock"}],
		"policy": {
			"open": false,
			"default": {"subscribe": ["*"]},
			"clients": {
				"agent-a": {"register": ["agent.fly-a"], "call": ["agent.*", "*", "ops.ctl/status"], "publish": ["frames.*"],
					"subscribe": ["frames.left"], "manageTopics": ["frames.*"]},
				"coordinator": {}
			}
		},
		"limits": {"maxClients": 8, "maxStoreBytes": "1073741824", "maxArtifactBytes": 2097152}
	}`))
	if err != nil {
		t.Fatal(err)
	}
	if fc.Store == nil || *fc.Store != "/dev/shm/flybus" {
		t.Errorf("store %v", fc.Store)
	}
	if fc.StoreMode == nil || *fc.StoreMode != "pool" {
		t.Errorf("storeMode %v", fc.StoreMode)
	}
	want := []listenSpec{{"/run/a.sock", "agent-a"}, {"/run/open.sock", ""}, {"/run/b.sock", ""}}
	if !slices.Equal(fc.Listen, want) {
		t.Errorf("listen %v, want %v", fc.Listen, want)
	}
	p := fc.Policy
	if p == nil || p.Open || p.Default == nil || len(p.Clients) != 2 {
		t.Fatalf("policy %+v", p)
	}
	if got := patterns(p.Default.Subscribe); !slices.Equal(got, []string{"*"}) {
		t.Errorf("default subscribe %v", got)
	}
	a := p.Clients["agent-a"]
	for name, got := range map[string][]string{
		"register": patterns(a.Register), "call": patterns(a.Call), "publish": patterns(a.Publish),
		"subscribe": patterns(a.Subscribe), "manageTopics": patterns(a.ManageTopics),
	} {
		want := map[string][]string{"register": {"agent.fly-a"}, "call": {"agent.*", "*", "ops.ctl/status"},
			"publish": {"frames.*"}, "subscribe": {"frames.left"}, "manageTopics": {"frames.*"}}[name]
		if !slices.Equal(got, want) {
			t.Errorf("agent-a %s: %v, want %v", name, got, want)
		}
	}
	if !a.Call[0].Match("agent.fly-b") || a.Call[0].Match("agentx") || !a.Register[0].Match("agent.fly-a") || a.Register[0].Match("agent.fly-ab") {
		t.Error("patterns do not match as documented")
	}
	if c := p.Clients["coordinator"]; c.Call != nil || c.Register != nil {
		t.Errorf("empty grants should grant nothing: %+v", c)
	}
	wantLimits := []limitSetting{{"maxArtifactBytes", 2097152}, {"maxClients", 8}, {"maxStoreBytes", 1 << 30}}
	if !slices.Equal(fc.Limits, wantLimits) {
		t.Errorf("limits %v, want %v", fc.Limits, wantLimits)
	}
}

func TestParseConfigRefusals(t *testing.T) {
	cases := map[string]struct{ doc, want string }{
		"UnknownKey/Top":            {`{"stor": "x"}`, `unknown key "stor" in the top level`},
		"UnknownKey/Listen":         {`{"listen": [{"path": "a", "clients": "x"}]}`, `unknown key "clients" in listen[0]`},
		"UnknownKey/Policy":         {`{"policy": {"opn": true}}`, `unknown key "opn" in policy`},
		"UnknownKey/Default":        {`{"policy": {"default": {"calls": []}}}`, `unknown key "calls" in policy.default`},
		"UnknownKey/Client":         {`{"policy": {"clients": {"a": {"manage_topics": []}}}}`, `unknown key "manage_topics" in policy.clients["a"]`},
		"UnknownKey/Limit":          {`{"limits": {"maxWidgets": 1}}`, `unknown key "maxWidgets" in limits`},
		"Grants/MethodNotCall":      {`{"policy": {"default": {"publish": ["t/m"]}}}`, `policy.default.publish: pattern "t/m": only call grants name methods`},
		"Grants/BadMethod":          {`{"policy": {"default": {"call": ["svc/"]}}}`, `policy.default.call: pattern "svc/"`},
		"NotJSON":                   {`{"store": }`, "not strict JSON"},
		"DuplicateKey":              {`{"policy": {"open": true, "open": false}}`, "not strict JSON"},
		"TrailingBytes":             {`{} {}`, "not strict JSON"},
		"Type/TopNotObject":         {`[]`, "the top level: must be a JSON object"},
		"Type/Store":                {`{"store": 7}`, "store: must be a string"},
		"Type/StoreNull":            {`{"store": null}`, "store: must be a string"},
		"StoreMode/Unknown":         {`{"storeMode": "slots"}`, `store mode "slots" is neither "files" nor "pool"`},
		"StoreMode/Type":            {`{"storeMode": 1}`, "storeMode: must be a string"},
		"Type/Listen":               {`{"listen": {"path": "a"}}`, "listen: must be an array"},
		"Type/ListenPathMissing":    {`{"listen": [{"client": "a"}]}`, "listen[0].path: missing"},
		"Type/ListenClient":         {`{"listen": [{"path": "a", "client": "Agent A"}]}`, `listen[0].client: "Agent A" is not a valid client id`},
		"Type/Open":                 {`{"policy": {"open": "yes"}}`, "policy.open: must be true or false"},
		"Type/Clients":              {`{"policy": {"clients": []}}`, "policy.clients: must be a JSON object"},
		"Type/ClientID":             {`{"policy": {"clients": {"-a": {}}}}`, `policy.clients["-a"]: not a valid client id`},
		"Type/GrantList":            {`{"policy": {"default": {"call": "*"}}}`, "policy.default.call: must be an array"},
		"Pattern/Empty":             {`{"policy": {"default": {"call": [""]}}}`, `pattern ""`},
		"Pattern/BarePrefix":        {`{"policy": {"default": {"call": ["agent*"]}}}`, `pattern "agent*"`},
		"Pattern/EmptySegment":      {`{"policy": {"default": {"call": ["a..b"]}}}`, `pattern "a..b"`},
		"Pattern/StarPrefix":        {`{"policy": {"default": {"call": ["*.*"]}}}`, `pattern "*.*"`},
		"Pattern/Upper":             {`{"policy": {"default": {"call": ["Agent"]}}}`, `pattern "Agent"`},
		"Limit/CountAsString":       {`{"limits": {"maxClients": "8"}}`, "limits.maxClients: a count is a JSON integer"},
		"Limit/LeadingZero":         {`{"limits": {"maxStoreBytes": "0100"}}`, `limits.maxStoreBytes: "0100" is not a U64 string`},
		"Limit/Negative":            {`{"limits": {"maxClients": -1}}`, "limits.maxClients: -1 is not a whole number"},
		"Limit/Fraction":            {`{"limits": {"maxClients": 1.5}}`, "limits.maxClients: 1.5 is not a whole number"},
		"Limit/Exponent":            {`{"limits": {"maxStoreBytes": 1e9}}`, "limits.maxStoreBytes: 1e9 is not a whole number"},
		"Limit/Bool":                {`{"limits": {"maxClients": true}}`, "limits.maxClients: true is not a whole number"},
		"Limit/NotObject":           {`{"limits": [1]}`, "limits: must be a JSON object"},
		"UnknownKey/SortedFirstHit": {`{"zeta": 1, "alpha": 2}`, `unknown key "alpha"`},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := parseConfig([]byte(tc.doc))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

// options parses serve flags as runServe does.
func options(t *testing.T, args ...string) *serveOptions {
	t.Helper()
	o := &serveOptions{}
	fs := serveFlags(o)
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	o.set = map[string]bool{}
	fs.Visit(func(f *flag.Flag) { o.set[f.Name] = true })
	return o
}

// files serves config files from a map, so the tests touch no disk.
func files(m map[string]string) func(string) ([]byte, error) {
	return func(name string) ([]byte, error) {
		if s, ok := m[name]; ok {
			return []byte(s), nil
		}
		return nil, fmt.Errorf("open %s: %w", name, fs.ErrNotExist)
	}
}

func TestResolveFlagsOverrideFile(t *testing.T) {
	read := files(map[string]string{"c.json": `{
		"store": "/file/store",
		"listen": [{"path": "/file/a.sock", "client": "agent-a"}],
		"policy": {"open": true},
		"limits": {"maxClients": 8, "maxServices": 9}
	}`})

	c, err := resolveServe(options(t, "--config", "c.json"), read)
	if err != nil {
		t.Fatal(err)
	}
	if c.Store != "/file/store" || !c.Open || c.Limits.MaxClients != 8 || c.Limits.MaxServices != 9 ||
		!slices.Equal(c.Listen, []listenSpec{{"/file/a.sock", "agent-a"}}) {
		t.Errorf("from the file alone: %+v", c)
	}
	if c.HelloTimeout != 5*time.Second || c.LogFormat != "text" || c.Metrics != "" {
		t.Errorf("flag defaults: %+v", c)
	}

	c, err = resolveServe(options(t, "--config", "c.json", "--store", "/flag/store",
		"--listen", "/flag/b.sock=agent-b", "--listen", "/flag/c.sock=agent-c",
		"--limit", "maxClients=16", "--hello-timeout", "2s", "--log-format", "json", "--metrics", "9100"), read)
	if err != nil {
		t.Fatal(err)
	}
	if c.Store != "/flag/store" || !c.Open {
		t.Errorf("store %q open %v", c.Store, c.Open)
	}
	if want := []listenSpec{{"/flag/b.sock", "agent-b"}, {"/flag/c.sock", "agent-c"}}; !slices.Equal(c.Listen, want) {
		t.Errorf("--listen should replace the file's sockets: %v", c.Listen)
	}
	if c.Limits.MaxClients != 16 || c.Limits.MaxServices != 9 {
		t.Errorf("--limit should override one limit and keep the others: %d %d", c.Limits.MaxClients, c.Limits.MaxServices)
	}
	if c.HelloTimeout != 2*time.Second || c.LogFormat != "json" || c.Metrics != "127.0.0.1:9100" {
		t.Errorf("flags: %+v", c)
	}
}

func TestResolvePolicy(t *testing.T) {
	read := files(map[string]string{
		"closed.json":  `{"policy": {"clients": {"agent-a": {"call": ["*"]}}}}`,
		"default.json": `{"policy": {"default": {"call": ["*"]}}}`,
		"mixed.json":   `{"policy": {"open": true, "clients": {"agent-a": {}}}}`,
	})
	t.Run("ImplicitGrantsForBoundIDs", func(t *testing.T) {
		c, err := resolveServe(options(t, "--store", "s", "--listen", "a=agent-a", "--listen", "b=agent-b"), read)
		if err != nil {
			t.Fatal(err)
		}
		if c.Open || len(c.Clients) != 2 || !slices.Equal(patterns(c.Clients["agent-b"].Publish), []string{"*"}) {
			t.Errorf("%+v", c)
		}
		if c.Policy().IsOpen() {
			t.Error("the implicit policy must stay closed")
		}
	})
	t.Run("ExplicitPolicyMustAdmitBoundIDs", func(t *testing.T) {
		_, err := resolveServe(options(t, "--config", "closed.json", "--store", "s", "--listen", "b=agent-b"), read)
		if err == nil || !strings.Contains(err.Error(), "bound to agent-b, which the policy does not admit") {
			t.Fatalf("got %v", err)
		}
		if _, err := resolveServe(options(t, "--config", "closed.json", "--store", "s", "--listen", "a=agent-a"), read); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("DefaultAdmitsAnyBoundID", func(t *testing.T) {
		if _, err := resolveServe(options(t, "--config", "default.json", "--store", "s", "--listen", "b=agent-b"), read); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("OpenWithGrantsIsContradictory", func(t *testing.T) {
		_, err := resolveServe(options(t, "--config", "mixed.json", "--store", "s", "--listen", "a"), read)
		if err == nil || !strings.Contains(err.Error(), "open policy admits every client") {
			t.Fatalf("got %v", err)
		}
	})
	t.Run("OpenFlagForUnbound", func(t *testing.T) {
		c, err := resolveServe(options(t, "--store", "s", "--listen", "a", "--open"), read)
		if err != nil || !c.Policy().IsOpen() {
			t.Fatalf("%v %+v", err, c)
		}
	})
	t.Run("OpenFalseOverridesFile", func(t *testing.T) {
		read := files(map[string]string{"open.json": `{"policy": {"open": true}}`})
		_, err := resolveServe(options(t, "--config", "open.json", "--open=false", "--store", "s", "--listen", "a=agent-a"), read)
		if err == nil || !strings.Contains(err.Error(), "does not admit") {
			t.Fatalf("got %v", err)
		}
	})
}

func TestResolveRefusals(t *testing.T) {
	read := files(map[string]string{"bad.json": `{"limits": {"maxSubscriptionsPerClient": 2000}}`})
	cases := map[string]struct {
		args []string
		want string
	}{
		"NoStore":           {[]string{"--listen", "a=x"}, "no store"},
		"NoSocket":          {[]string{"--store", "s"}, "no socket"},
		"Unbound":           {[]string{"--store", "s", "--listen", "a"}, "needs --open"},
		"EmptyID":           {[]string{"--store", "s", "--listen", "a="}, `"" is not a valid client id`},
		"EmptyPath":         {[]string{"--store", "s", "--listen", "=agent-a"}, "socket path is empty"},
		"LongPath":          {[]string{"--store", "s", "--listen", strings.Repeat("p", 108) + "=a"}, "at most 107"},
		"TwiceListed":       {[]string{"--store", "s", "--listen", "./a=x", "--listen", "a=y"}, "listed twice"},
		"LimitSyntax":       {[]string{"--store", "s", "--listen", "a=x", "--limit", "maxClients"}, "want NAME=VALUE"},
		"LimitValue":        {[]string{"--store", "s", "--listen", "a=x", "--limit", "maxClients=lots"}, `"lots" is not a whole number`},
		"LimitUnknown":      {[]string{"--store", "s", "--listen", "a=x", "--limit", "maxWidgets=1"}, `unknown limit "maxWidgets"`},
		"LimitFixed":        {[]string{"--store", "s", "--listen", "a=x", "--limit", "maxEnvelopeBytes=1"}, "fixed by the protocol"},
		"LimitInvalid":      {[]string{"--store", "s", "--listen", "a=x", "--limit", "reservedOwnersPerClient=256"}, "reservedOwnersPerClient must be below"},
		"LimitFileInvalid":  {[]string{"--config", "bad.json", "--store", "s", "--listen", "a=x"}, "maxSubscriptionsPerClient must not exceed"},
		"LimitFlagRescues":  {[]string{"--config", "bad.json", "--store", "s", "--listen", "a=x", "--limit", "maxSubscriptions=4000"}, ""},
		"ConfigMissing":     {[]string{"--config", "nope.json", "--store", "s", "--listen", "a=x"}, "nope.json"},
		"HelloTimeout":      {[]string{"--store", "s", "--listen", "a=x", "--hello-timeout", "0s"}, "--hello-timeout must be positive"},
		"LogFormat":         {[]string{"--store", "s", "--listen", "a=x", "--log-format", "xml"}, "--log-format must be text or json"},
		"MetricsAddr":       {[]string{"--store", "s", "--listen", "a=x", "--metrics", "localhost:http"}, "not a port number"},
		"MetricsPortTooBig": {[]string{"--store", "s", "--listen", "a=x", "--metrics", "70000"}, "not a port number"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := resolveServe(options(t, tc.args...), read)
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

func TestLimitsAsNumbersAndStrings(t *testing.T) {
	for _, doc := range []string{`{"maxStoreBytes": 1073741824}`, `{"maxStoreBytes": "1073741824"}`} {
		settings, err := parseLimits([]byte(doc))
		if err != nil {
			t.Fatal(err)
		}
		l := wire.DefaultLimits()
		for _, s := range settings {
			if err := l.Set(s.Name, s.Value); err != nil {
				t.Fatal(err)
			}
		}
		if l.MaxStoreBytes != 1<<30 {
			t.Errorf("%s: maxStoreBytes %d", doc, l.MaxStoreBytes)
		}
	}
	// Every configurable limit by its hello name, as a number.
	for _, name := range wire.LimitNames() {
		if _, err := limitValue(name, []byte("12")); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}

func TestMetricsAddr(t *testing.T) {
	for in, want := range map[string]string{
		"9100": "127.0.0.1:9100", ":9100": "127.0.0.1:9100", "0": "127.0.0.1:0",
		"0.0.0.0:80": "0.0.0.0:80", "[::1]:9": "[::1]:9", "localhost:9": "localhost:9",
	} {
		if got, err := metricsAddr(in); err != nil || got != want {
			t.Errorf("metricsAddr(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"x:y", "70000", ":-1", "a:b:c"} {
		if got, err := metricsAddr(in); err == nil {
			t.Errorf("metricsAddr(%q) = %q, want an error", in, got)
		}
	}
}

// --store-mode picks the backend, overrides the file, and refuses anything
// but files and pool.
func TestServeStoreMode(t *testing.T) {
	read := func(string) ([]byte, error) { return []byte(`{"storeMode": "files"}`), nil }
	for _, tc := range []struct {
		args []string
		want store.Mode
	}{
		{[]string{"--store", "/dev/shm/x", "--listen", "/tmp/x.sock", "--open"}, store.ModePool}, // the default
		{[]string{"--store", "/dev/shm/x", "--listen", "/tmp/x.sock", "--open", "--store-mode", "files"}, store.ModeFiles},
		{[]string{"--store", "/dev/shm/x", "--listen", "/tmp/x.sock", "--open", "--config", "f"}, store.ModeFiles},
		{[]string{"--store", "/dev/shm/x", "--listen", "/tmp/x.sock", "--open", "--config", "f", "--store-mode", "pool"}, store.ModePool},
	} {
		c, err := resolveServe(options(t, tc.args...), read)
		if err != nil {
			t.Errorf("%v: %v", tc.args, err)
		} else if c.StoreMode != tc.want {
			t.Errorf("%v: mode %v, want %v", tc.args, c.StoreMode, tc.want)
		}
	}
	if _, err := resolveServe(options(t, "--store", "/dev/shm/x", "--listen", "/tmp/x.sock", "--open", "--store-mode", "slots"), read); err == nil ||
		!strings.Contains(err.Error(), `"slots"`) {
		t.Fatalf("--store-mode slots: %v", err)
	}
}
