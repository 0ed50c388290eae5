package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/flybus/flybus/router"
	"github.com/flybus/flybus/store"
	"github.com/flybus/flybus/wire"
)

// This file turns `flybus serve` flags and its --config file into one
// validated serveConfig. Nothing here touches the filesystem beyond reading
// the config file: serve validates everything before it creates anything.

// listenSpec is one Unix socket and the client id bound to it ("" unbound).
type listenSpec struct {
	Path   string
	Client string
}

// limitSetting is one limit by its hello name, kept in the order given so
// that later settings (flags) override earlier ones (the file).
type limitSetting struct {
	Name  string
	Value uint64
}

// policyConfig is the file's "policy" object.
type policyConfig struct {
	Open    bool
	Default *router.Grants
	Clients map[string]router.Grants
}

// fileConfig is a parsed --config file; nil or empty fields were absent.
type fileConfig struct {
	Store     *string
	StoreMode *string
	Listen    []listenSpec // nil when the key is absent
	Policy    *policyConfig
	Limits    []limitSetting
}

// serveOptions are the serve flags as typed.
type serveOptions struct {
	store           string
	storeMode       string
	listen          listFlag
	open            bool
	config          string
	helloTimeout    time.Duration
	shutdown        time.Duration
	logFormat       string
	metrics         string
	metricsLabelCap int
	pprof           bool
	metricsPublic   bool
	limits          listFlag
	set             map[string]bool // flags given explicitly, for overriding the file
}

// serveConfig is what serve runs with, fully validated.
type serveConfig struct {
	Store           string
	StoreMode       store.Mode
	Listen          []listenSpec
	Open            bool
	Default         *router.Grants
	Clients         map[string]router.Grants
	Limits          wire.Limits
	HelloTimeout    time.Duration
	Shutdown        time.Duration // how long clients get to go at shutdown
	LogFormat       string
	Metrics         string // host:port, unix:PATH, or "" for no metrics endpoint
	MetricsLabelCap int    // entities per kind with series of their own
	Pprof           bool   // serve /debug/pprof/ on the metrics endpoint
	MetricsPublic   bool   // a metrics host that is not loopback was allowed
}

// Policy builds the router policy. Without any policy in the file or on
// the command line, each launcher-bound id gets every grant: binding a
// socket to an id is the launcher's statement that it trusts that
// participant, and a closed policy that admits nobody would be useless.
func (c *serveConfig) Policy() router.Policy {
	if c.Open {
		return router.OpenPolicy()
	}
	p := router.ClosedPolicy()
	for id, g := range c.Clients {
		p = p.Client(id, g)
	}
	return p.WithDefault(c.Default)
}

// maxSocketPath is the longest path sockaddr_un holds with its NUL.
const maxSocketPath = 107

// resolveServe merges the config file (read with readFile) and the flags,
// flags winning, and validates the result.
func resolveServe(o *serveOptions, readFile func(string) ([]byte, error)) (*serveConfig, error) {
	fc := &fileConfig{}
	if o.config != "" {
		data, err := readFile(o.config)
		if err != nil {
			return nil, err
		}
		if fc, err = parseConfig(data); err != nil {
			return nil, fmt.Errorf("config %s: %w", o.config, err)
		}
	}
	c := &serveConfig{HelloTimeout: o.helloTimeout, Shutdown: o.shutdown, LogFormat: o.logFormat, Limits: wire.DefaultLimits()}

	if fc.Store != nil {
		c.Store = *fc.Store
	}
	if o.set["store"] {
		c.Store = o.store
	}
	if c.Store == "" {
		return nil, errors.New("no store: give --store DIR (or \"store\" in the config file)")
	}
	mode := "pool"
	if fc.StoreMode != nil {
		mode = *fc.StoreMode
	}
	if o.set["store-mode"] {
		mode = o.storeMode
	}
	var err error
	if c.StoreMode, err = store.ParseMode(mode); err != nil {
		return nil, err
	}

	c.Listen = fc.Listen
	if o.set["listen"] {
		c.Listen = nil
		for _, v := range o.listen {
			ls, err := parseListenFlag(v)
			if err != nil {
				return nil, err
			}
			c.Listen = append(c.Listen, ls)
		}
	}
	if err := checkListen(c.Listen); err != nil {
		return nil, err
	}

	explicitPolicy := fc.Policy != nil
	if fc.Policy != nil {
		c.Open, c.Default, c.Clients = fc.Policy.Open, fc.Policy.Default, fc.Policy.Clients
	}
	if o.set["open"] {
		// --open=false only overrides the file; alone it leaves the
		// implicit policy in place.
		c.Open = o.open
		explicitPolicy = explicitPolicy || o.open
	}
	if err := checkPolicy(c, explicitPolicy); err != nil {
		return nil, err
	}

	settings := fc.Limits
	for _, v := range o.limits {
		s, err := parseLimitFlag(v)
		if err != nil {
			return nil, err
		}
		settings = append(settings, s)
	}
	for _, s := range settings {
		if err := c.Limits.Set(s.Name, s.Value); err != nil {
			return nil, err
		}
	}
	if err := c.Limits.Validate(); err != nil {
		return nil, fmt.Errorf("limits: %w", err)
	}

	if c.HelloTimeout <= 0 {
		return nil, fmt.Errorf("--hello-timeout must be positive, not %v", c.HelloTimeout)
	}
	if c.Shutdown <= 0 {
		return nil, fmt.Errorf("--shutdown-timeout must be positive, not %v", c.Shutdown)
	}
	if c.LogFormat != "text" && c.LogFormat != "json" {
		return nil, fmt.Errorf("--log-format must be text or json, not %q", c.LogFormat)
	}
	if o.metrics != "" {
		addr, err := metricsAddr(o.metrics)
		if err != nil {
			return nil, err
		}
		c.Metrics = addr
	}
	if err := checkMetrics(c, o); err != nil {
		return nil, err
	}
	if c.MetricsLabelCap = o.metricsLabelCap; c.MetricsLabelCap < 1 {
		return nil, fmt.Errorf("--metrics-label-cap must be at least 1, not %d", c.MetricsLabelCap)
	}
	return c, nil
}

// parseListenFlag reads PATH or PATH=CLIENT_ID. The id is what follows the
// last '=' (ids cannot contain one); a path containing '=' needs the file.
func parseListenFlag(v string) (listenSpec, error) {
	path, id, bound := v, "", false
	if i := strings.LastIndexByte(v, '='); i >= 0 {
		path, id, bound = v[:i], v[i+1:], true
	}
	if bound && !wire.ValidID(id) {
		return listenSpec{}, fmt.Errorf("--listen %s: %q is not a valid client id (1-64 of a-z 0-9 . _ -, starting with a letter or digit)", v, id)
	}
	return listenSpec{Path: path, Client: id}, nil
}

func checkListen(ls []listenSpec) error {
	if len(ls) == 0 {
		return errors.New("no socket: give at least one --listen PATH[=CLIENT_ID] (or \"listen\" in the config file)")
	}
	seen := map[string]bool{}
	for _, l := range ls {
		switch {
		case l.Path == "":
			return errors.New("a socket path is empty")
		case len(l.Path) > maxSocketPath:
			return fmt.Errorf("socket path %s is %d bytes; a Unix socket path holds at most %d", l.Path, len(l.Path), maxSocketPath)
		case l.Client != "" && !wire.ValidID(l.Client):
			return fmt.Errorf("socket %s: %q is not a valid client id", l.Path, l.Client)
		case seen[filepath.Clean(l.Path)]:
			return fmt.Errorf("socket %s is listed twice", l.Path)
		}
		seen[filepath.Clean(l.Path)] = true
	}
	return nil
}

// checkPolicy refuses a policy that cannot work with the sockets: unbound
// sockets need an open policy, a bound id must be admitted, and grants
// under an open policy would be silently ignored (it grants everything).
func checkPolicy(c *serveConfig, explicit bool) error {
	if c.Open && (len(c.Clients) > 0 || c.Default != nil) {
		return errors.New("an open policy admits every client with every grant: drop policy.clients and policy.default, or do not open it")
	}
	if !explicit {
		c.Clients = map[string]router.Grants{}
		for _, l := range c.Listen {
			if l.Client != "" {
				c.Clients[l.Client] = router.AllGrants()
			}
		}
	}
	for _, l := range c.Listen {
		if l.Client == "" && !c.Open {
			return fmt.Errorf("socket %s is unbound (no =CLIENT_ID): that needs --open (or policy.open), a trusted deployment where clients name themselves", l.Path)
		}
		_, listed := c.Clients[l.Client]
		if l.Client != "" && !c.Open && c.Default == nil && !listed {
			return fmt.Errorf("socket %s is bound to %s, which the policy does not admit (add it to policy.clients or set policy.default)", l.Path, l.Client)
		}
	}
	return nil
}

// parseLimitFlag reads NAME=VALUE with VALUE a decimal integer.
func parseLimitFlag(v string) (limitSetting, error) {
	name, val, ok := strings.Cut(v, "=")
	if !ok || name == "" {
		return limitSetting{}, fmt.Errorf("--limit %s: want NAME=VALUE, e.g. maxClients=128", v)
	}
	n, err := strconv.ParseUint(val, 10, 64)
	if err != nil {
		return limitSetting{}, fmt.Errorf("--limit %s: %q is not a whole number", v, val)
	}
	return limitSetting{Name: name, Value: n}, nil
}

// checkMetrics validates the metrics options: /details names every
// client, topic and service and pprof profiles the router, so neither
// reaches the network unless asked for with --metrics-public.
func checkMetrics(c *serveConfig, o *serveOptions) error {
	c.Pprof, c.MetricsPublic = o.pprof, o.metricsPublic
	if c.Metrics == "" {
		if c.Pprof || c.MetricsPublic {
			return errors.New("--pprof and --metrics-public need --metrics ADDR")
		}
		return nil
	}
	if path, ok := metricsSocket(c.Metrics); ok {
		if c.MetricsPublic {
			return fmt.Errorf("--metrics %s is a Unix socket, reachable only by this user (mode 0600): drop --metrics-public", c.Metrics)
		}
		if len(path) > maxSocketPath {
			return fmt.Errorf("metrics socket path %s is %d bytes; a Unix socket path holds at most %d", path, len(path), maxSocketPath)
		}
		for _, l := range c.Listen {
			if filepath.Clean(l.Path) == filepath.Clean(path) {
				return fmt.Errorf("metrics socket %s is also a --listen socket", path)
			}
		}
		return nil
	}
	host, _, _ := net.SplitHostPort(c.Metrics)
	if !c.MetricsPublic && !loopbackHost(host) {
		return fmt.Errorf("--metrics %s is not a loopback address: /metrics and /details (client ids, topics, services) "+
			"would be open to the network; give --metrics-public to allow that, or use 127.0.0.1:PORT or unix:PATH", c.Metrics)
	}
	return nil
}

// loopbackHost reports whether host is localhost or a loopback IP. Other
// names are not resolved (nothing is looked up before the start), so they
// need --metrics-public; serve checks the bound address again.
func loopbackHost(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.IsLoopback()
}

// metricsSocket returns the path of a unix:PATH metrics address.
func metricsSocket(addr string) (string, bool) { return strings.CutPrefix(addr, "unix:") }

// metricsAddr turns "9100" or ":9100" into 127.0.0.1:9100 (metrics and
// pprof must not reach the network unless asked for) and checks host:port.
// A URL as a browser or Prometheus is given it, http://host:port (with
// /metrics or / after it), means its host:port. unix:PATH, a Unix socket,
// is kept as it is.
func metricsAddr(s string) (string, error) {
	given := s
	if path, ok := metricsSocket(s); ok {
		if path == "" || strings.HasPrefix(path, "//") {
			return "", fmt.Errorf("metrics address %q: want unix:PATH, e.g. unix:/tmp/flybus-metrics.sock", given)
		}
		return s, nil
	}
	if rest, ok := strings.CutPrefix(s, "http://"); ok {
		s = strings.TrimSuffix(strings.TrimSuffix(rest, "/"), "/metrics")
		if s == "" || strings.Contains(s, "/") {
			return "", fmt.Errorf("metrics address %q: want http://HOST:PORT, HOST:PORT or PORT", given)
		}
	} else if scheme, _, ok := strings.Cut(s, "://"); ok {
		return "", fmt.Errorf("metrics address %q: the endpoint speaks plain http, not %s; give HOST:PORT or http://HOST:PORT", given, scheme)
	}
	if !strings.Contains(s, ":") {
		s = ":" + s
	}
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return "", fmt.Errorf("metrics address %q: %v", given, err)
	}
	if n, err := strconv.ParseUint(port, 10, 16); err != nil || (n == 0 && port != "0") {
		return "", fmt.Errorf("metrics address %q: %q is not a port number", given, port)
	}
	if host == "" {
		host = "127.0.0.1"
	}
	return net.JoinHostPort(host, port), nil
}

// parseConfig reads the JSON config file. Every object refuses keys it
// does not know, naming the key and where it was found.
func parseConfig(data []byte) (*fileConfig, error) {
	// The strict wire scanner also refuses duplicate keys, which
	// encoding/json would silently resolve to the last one.
	if err := wire.Valid(data); err != nil {
		return nil, fmt.Errorf("not strict JSON: %v", err)
	}
	top, err := object(data, "the top level")
	if err != nil {
		return nil, err
	}
	if err := knownKeys(top, "the top level", "store", "storeMode", "listen", "policy", "limits"); err != nil {
		return nil, err
	}
	fc := &fileConfig{}
	if raw, ok := top["store"]; ok {
		var s string
		if err := strictString(raw, "store", &s); err != nil {
			return nil, err
		}
		fc.Store = &s
	}
	if raw, ok := top["storeMode"]; ok {
		var s string
		if err := strictString(raw, "storeMode", &s); err != nil {
			return nil, err
		}
		if _, err := store.ParseMode(s); err != nil {
			return nil, err
		}
		fc.StoreMode = &s
	}
	if raw, ok := top["listen"]; ok {
		if fc.Listen, err = parseListen(raw); err != nil {
			return nil, err
		}
	}
	if raw, ok := top["policy"]; ok {
		if fc.Policy, err = parsePolicy(raw); err != nil {
			return nil, err
		}
	}
	if raw, ok := top["limits"]; ok {
		if fc.Limits, err = parseLimits(raw); err != nil {
			return nil, err
		}
	}
	return fc, nil
}

func parseListen(raw json.RawMessage) ([]listenSpec, error) {
	var items []json.RawMessage
	if isNull(raw) || json.Unmarshal(raw, &items) != nil {
		return nil, errors.New("listen: must be an array of {\"path\", \"client\"} objects")
	}
	out := make([]listenSpec, 0, len(items))
	for i, item := range items {
		where := fmt.Sprintf("listen[%d]", i)
		obj, err := object(item, where)
		if err != nil {
			return nil, err
		}
		if err := knownKeys(obj, where, "path", "client"); err != nil {
			return nil, err
		}
		var l listenSpec
		if err := strictString(obj["path"], where+".path", &l.Path); err != nil {
			return nil, err
		}
		if raw, ok := obj["client"]; ok && !isNull(raw) {
			if err := strictString(raw, where+".client", &l.Client); err != nil {
				return nil, err
			}
			if !wire.ValidID(l.Client) {
				return nil, fmt.Errorf("%s.client: %q is not a valid client id", where, l.Client)
			}
		}
		out = append(out, l)
	}
	return out, nil
}

func parsePolicy(raw json.RawMessage) (*policyConfig, error) {
	obj, err := object(raw, "policy")
	if err != nil {
		return nil, err
	}
	if err := knownKeys(obj, "policy", "open", "default", "clients"); err != nil {
		return nil, err
	}
	p := &policyConfig{Clients: map[string]router.Grants{}}
	if raw, ok := obj["open"]; ok {
		if isNull(raw) || json.Unmarshal(raw, &p.Open) != nil {
			return nil, errors.New("policy.open: must be true or false")
		}
	}
	if raw, ok := obj["default"]; ok && !isNull(raw) {
		g, err := parseGrants(raw, "policy.default")
		if err != nil {
			return nil, err
		}
		p.Default = &g
	}
	if raw, ok := obj["clients"]; ok {
		clients, err := object(raw, "policy.clients")
		if err != nil {
			return nil, err
		}
		for _, id := range sortedKeys(clients) {
			where := fmt.Sprintf("policy.clients[%q]", id)
			if !wire.ValidID(id) {
				return nil, fmt.Errorf("%s: not a valid client id", where)
			}
			g, err := parseGrants(clients[id], where)
			if err != nil {
				return nil, err
			}
			p.Clients[id] = g
		}
	}
	return p, nil
}

func parseGrants(raw json.RawMessage, where string) (router.Grants, error) {
	var g router.Grants
	obj, err := object(raw, where)
	if err != nil {
		return g, err
	}
	lists := []struct {
		key string
		dst *[]router.Pattern
	}{
		{"register", &g.Register}, {"call", &g.Call}, {"publish", &g.Publish},
		{"subscribe", &g.Subscribe}, {"manageTopics", &g.ManageTopics},
	}
	keys := make([]string, len(lists))
	for i, l := range lists {
		keys[i] = l.key
	}
	if err := knownKeys(obj, where, keys...); err != nil {
		return g, err
	}
	for _, l := range lists {
		raw, ok := obj[l.key]
		if !ok {
			continue
		}
		var pats []string
		if isNull(raw) || json.Unmarshal(raw, &pats) != nil {
			return g, fmt.Errorf("%s.%s: must be an array of pattern strings", where, l.key)
		}
		for _, s := range pats {
			p, err := router.ParsePattern(s)
			if err != nil {
				return g, fmt.Errorf("%s.%s: %w", where, l.key, err)
			}
			if p.HasMethods() && l.key != "call" {
				return g, fmt.Errorf("%s.%s: pattern %q: only call grants name methods", where, l.key, s)
			}
			*l.dst = append(*l.dst, p)
		}
	}
	return g, nil
}

// parseLimits reads {NAME: VALUE}. Counts are JSON integers; byte sizes
// may also be U64 strings, as the hello reply spells them.
func parseLimits(raw json.RawMessage) ([]limitSetting, error) {
	obj, err := object(raw, "limits")
	if err != nil {
		return nil, err
	}
	var out []limitSetting
	for _, name := range sortedKeys(obj) {
		if !slices.Contains(wire.LimitNames(), name) {
			return nil, fmt.Errorf("unknown key %q in limits (the names are those of the hello reply's limits, e.g. maxClients, maxStoreBytes)", name)
		}
		v, err := limitValue(name, obj[name])
		if err != nil {
			return nil, err
		}
		out = append(out, limitSetting{Name: name, Value: v})
	}
	return out, nil
}

func limitValue(name string, raw json.RawMessage) (uint64, error) {
	if len(raw) > 0 && raw[0] == '"' {
		if !wire.IsByteLimit(name) {
			return 0, fmt.Errorf("limits.%s: a count is a JSON integer, not a string", name)
		}
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return 0, fmt.Errorf("limits.%s: %v", name, err)
		}
		v, ok := wire.ParseU64(s)
		if !ok {
			return 0, fmt.Errorf("limits.%s: %q is not a U64 string (decimal digits, no sign, no leading zeros)", name, s)
		}
		return v, nil
	}
	v, err := strconv.ParseUint(string(raw), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("limits.%s: %s is not a whole number", name, raw)
	}
	return v, nil
}

// object decodes a JSON object into its raw members.
func object(raw json.RawMessage, where string) (map[string]json.RawMessage, error) {
	var obj map[string]json.RawMessage
	if isNull(raw) || json.Unmarshal(raw, &obj) != nil {
		return nil, fmt.Errorf("%s: must be a JSON object", where)
	}
	return obj, nil
}

// knownKeys refuses the first (in sorted order, so the message is stable)
// key of obj that is not allowed.
func knownKeys(obj map[string]json.RawMessage, where string, allowed ...string) error {
	for _, k := range sortedKeys(obj) {
		if !slices.Contains(allowed, k) {
			return fmt.Errorf("unknown key %q in %s (allowed: %s)", k, where, strings.Join(allowed, ", "))
		}
	}
	return nil
}

func strictString(raw json.RawMessage, where string, dst *string) error {
	if raw == nil {
		return fmt.Errorf("%s: missing", where)
	}
	if isNull(raw) || json.Unmarshal(raw, dst) != nil {
		return fmt.Errorf("%s: must be a string", where)
	}
	return nil
}

func isNull(raw json.RawMessage) bool { return string(raw) == "null" }

func sortedKeys(m map[string]json.RawMessage) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
