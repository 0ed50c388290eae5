package bridge

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/flybus/flybus/wire"
)

// Config is a bridge's configuration file, as ParseConfig reads it.
type Config struct {
	// Origin names this bridge in the frames it exports; an import drops
	// frames carrying its own origin, so a frame never comes back to the
	// router it left. Default: "<hostname>.<local clientId>".
	Origin  string         `json:"origin,omitempty"`
	NATS    NATSConfig     `json:"nats"`
	Local   LocalConfig    `json:"local"`
	Exports []ExportConfig `json:"exports,omitempty"`
	Imports []ImportConfig `json:"imports,omitempty"`
	History *HistoryConfig `json:"history,omitempty"`
}

// NATSConfig is the NATS connection, with the options nats users know.
type NATSConfig struct {
	URLs        []string   `json:"urls"`
	Name        string     `json:"name,omitempty"`
	Credentials string     `json:"credentials,omitempty"` // a .creds file (JWT and nkey seed)
	TLS         *TLSConfig `json:"tls,omitempty"`
	// MaxReconnects is nats.MaxReconnects: -1 retries forever [-1].
	MaxReconnects *int `json:"maxReconnects,omitempty"`
	// ReconnectWait is nats.ReconnectWait [2s].
	ReconnectWait Duration `json:"reconnectWait,omitempty"`
	// ReconnectBufSize is nats.ReconnectBufSize in bytes; the bridge never
	// publishes while disconnected, so only control traffic uses it [8 MiB].
	ReconnectBufSize int `json:"reconnectBufSize,omitempty"`
	// Timeout bounds a connect, a flush and a JetStream request [5s].
	Timeout Duration `json:"timeout,omitempty"`
}

// TLSConfig names PEM files: a CA to verify the server, and a client
// certificate and key for mutual TLS.
type TLSConfig struct {
	CA   string `json:"ca,omitempty"`
	Cert string `json:"cert,omitempty"`
	Key  string `json:"key,omitempty"`
}

// LocalConfig is the connection to the local router.
type LocalConfig struct {
	Socket    string `json:"socket"`
	ClientID  string `json:"clientId"`
	StoreRoot string `json:"storeRoot"` // the router's --store directory
	// ReconnectWait is no longer used: the bridge reconnects with the
	// client library's backoff (50 ms doubling to 2 s, with jitter). It is
	// still accepted so that older configurations load.
	ReconnectWait Duration `json:"reconnectWait,omitempty"`
}

// ExportConfig sends one local topic to a NATS subject.
type ExportConfig struct {
	Topic   string `json:"topic"`
	Subject string `json:"subject"`
	// Mode is "latest" (send the newest frame; never a backlog) or
	// "bounded" (every frame, in order; a slow link slows the producer).
	Mode string `json:"mode"`
	// Declare, when set ("none" or "latest"), declares the topic with that
	// retention; otherwise the bridge waits for the producer to declare it.
	Declare string        `json:"declare,omitempty"`
	Stream  *StreamConfig `json:"stream,omitempty"`
}

// StreamConfig stores an export's frames in a JetStream stream.
type StreamConfig struct {
	Name     string   `json:"name"`
	MaxAge   Duration `json:"maxAge,omitempty"`   // 0: no age limit
	MaxBytes int64    `json:"maxBytes,omitempty"` // 0: no byte limit
	Replicas int      `json:"replicas,omitempty"` // [1]
	// Storage is "file" (default) or "memory".
	Storage string `json:"storage,omitempty"`
}

// ImportConfig publishes the frames of a NATS subject to a local topic.
type ImportConfig struct {
	Subject string `json:"subject"`
	Topic   string `json:"topic"`
	// Retained is the retention the bridge declares the topic with:
	// "none" (default) or "latest".
	Retained string `json:"retained,omitempty"`
	// Mode is "bounded" (default: every complete frame, in order; while the
	// local side is slow NATS holds up to PendingBytes, then drops) or
	// "latest" (frames are assembled in memory as they come and the newest
	// complete one is written locally; a slow local side skips frames,
	// counted as Coalesced, and never builds a backlog).
	Mode string `json:"mode,omitempty"`
	// PendingBytes bounds what NATS may hold for this import while it is
	// busy; past it NATS drops messages (counted) [64 MiB].
	PendingBytes int `json:"pendingBytes,omitempty"`
	// FrameTimeout drops a frame whose next chunk does not come in time [5s].
	FrameTimeout Duration `json:"frameTimeout,omitempty"`
}

// HistoryConfig registers the local history service.
type HistoryConfig struct {
	Service string `json:"service"`
}

// Duration is a time.Duration written as a Go duration string ("500ms").
type Duration time.Duration

// UnmarshalJSON takes "1.5s"; a bare number is refused, since its unit
// would be a guess.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("a duration is a string with a unit, such as \"500ms\" (got %s)", b)
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("duration %q: %v", s, err)
	}
	if v < 0 {
		return fmt.Errorf("duration %q is negative", s)
	}
	*d = Duration(v)
	return nil
}

// MarshalJSON writes the duration string.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

// ErrConfig marks a configuration error (flybus-bridge exits 2 on it).
var ErrConfig = errors.New("bad bridge configuration")

func configErr(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrConfig}, args...)...)
}

// LoadConfig reads and parses a configuration file.
func LoadConfig(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrConfig, err)
	}
	c, err := ParseConfig(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}

// ParseConfig parses strict JSON (duplicate keys and unknown keys are
// refused), fills defaults and validates the result.
func ParseConfig(data []byte) (*Config, error) {
	// encoding/json would silently keep the last of two equal keys.
	if err := wire.Valid(data); err != nil {
		return nil, configErr("not strict JSON: %v", err)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var c Config
	if err := dec.Decode(&c); err != nil {
		return nil, configErr("%s", strings.TrimPrefix(err.Error(), "json: "))
	}
	if err := c.Validate(); err != nil {
		return nil, err
	}
	return &c, nil
}

// Validate fills defaults and checks every field; errors match ErrConfig.
func (c *Config) Validate() error {
	if len(c.NATS.URLs) == 0 {
		return configErr("nats.urls: give at least one NATS URL, such as \"nats://127.0.0.1:4222\"")
	}
	for _, u := range c.NATS.URLs {
		if !strings.Contains(u, "://") && !strings.Contains(u, ":") {
			return configErr("nats.urls: %q is not a URL such as nats://host:4222", u)
		}
	}
	if c.NATS.MaxReconnects == nil {
		forever := -1
		c.NATS.MaxReconnects = &forever
	}
	if c.NATS.ReconnectWait == 0 {
		c.NATS.ReconnectWait = Duration(2 * time.Second)
	}
	if c.NATS.Timeout == 0 {
		c.NATS.Timeout = Duration(5 * time.Second)
	}
	if t := c.NATS.TLS; t != nil && (t.Cert == "") != (t.Key == "") {
		return configErr("nats.tls: cert and key go together")
	}
	if c.Local.Socket == "" {
		return configErr("local.socket: the local router's socket path is missing")
	}
	if !wire.ValidID(c.Local.ClientID) {
		return configErr("local.clientId %q: want [a-z0-9][a-z0-9._-]{0,63}", c.Local.ClientID)
	}
	if c.Origin == "" {
		h, _ := os.Hostname()
		c.Origin = sanitizeToken(h) + "." + c.Local.ClientID
	}
	if !validToken(c.Origin) {
		return configErr("origin %q: use letters, digits, '.', '_' and '-'", c.Origin)
	}
	if len(c.Exports) == 0 && len(c.Imports) == 0 {
		return configErr("nothing to bridge: give exports, imports or both")
	}
	topics := map[string]bool{}
	streams := map[string]bool{}
	for i := range c.Exports {
		e := &c.Exports[i]
		where := fmt.Sprintf("exports[%d]", i)
		if !wire.ValidName(e.Topic) {
			return configErr("%s.topic %q is not a topic name", where, e.Topic)
		}
		if topics[e.Topic] {
			return configErr("%s.topic %q is exported twice", where, e.Topic)
		}
		topics[e.Topic] = true
		if !validSubject(e.Subject) {
			return configErr("%s.subject %q: a NATS subject without wildcards", where, e.Subject)
		}
		switch e.Mode {
		case "latest", "bounded":
		default:
			return configErr("%s.mode %q: want \"latest\" or \"bounded\"", where, e.Mode)
		}
		if e.Declare != "" {
			if _, err := parseRetention(e.Declare); err != nil {
				return configErr("%s.declare: %v", where, err)
			}
		}
		if s := e.Stream; s != nil {
			if !validToken(s.Name) || strings.Contains(s.Name, ".") {
				return configErr("%s.stream.name %q: letters, digits, '_' and '-'", where, s.Name)
			}
			if streams[s.Name] {
				return configErr("%s.stream.name %q is used twice", where, s.Name)
			}
			streams[s.Name] = true
			if s.MaxBytes < 0 {
				return configErr("%s.stream.maxBytes is negative", where)
			}
			switch s.Storage {
			case "", "file", "memory":
			default:
				return configErr("%s.stream.storage %q: want \"file\" or \"memory\"", where, s.Storage)
			}
			if s.Replicas < 0 || s.Replicas > 5 {
				return configErr("%s.stream.replicas %d: 1 to 5", where, s.Replicas)
			}
		}
	}
	imported := map[string]bool{}
	for i := range c.Imports {
		im := &c.Imports[i]
		where := fmt.Sprintf("imports[%d]", i)
		if !validSubject(im.Subject) {
			return configErr("%s.subject %q: a NATS subject without wildcards", where, im.Subject)
		}
		if !wire.ValidName(im.Topic) {
			return configErr("%s.topic %q is not a topic name", where, im.Topic)
		}
		if imported[im.Topic] {
			return configErr("%s.topic %q is imported twice", where, im.Topic)
		}
		imported[im.Topic] = true
		if im.Retained == "" {
			im.Retained = "none"
		}
		if _, err := parseRetention(im.Retained); err != nil {
			return configErr("%s.retained: %v", where, err)
		}
		switch im.Mode {
		case "":
			im.Mode = "bounded"
		case "latest", "bounded":
		default:
			return configErr("%s.mode %q: want \"latest\" or \"bounded\"", where, im.Mode)
		}
		if im.PendingBytes == 0 {
			im.PendingBytes = 64 << 20
		}
		if im.PendingBytes < 0 {
			return configErr("%s.pendingBytes is negative", where)
		}
		if im.FrameTimeout == 0 {
			im.FrameTimeout = Duration(5 * time.Second)
		}
	}
	if c.History != nil {
		if !wire.ValidName(c.History.Service) {
			return configErr("history.service %q is not a service name", c.History.Service)
		}
		if len(streams) == 0 {
			return configErr("history.service: no export has a stream to answer from")
		}
	}
	if c.Local.StoreRoot == "" {
		// Exports map artifacts; imports and history write them.
		return configErr("local.storeRoot: give the router's store root (its --store directory), where artifacts are read and written")
	}
	return nil
}

func parseRetention(s string) (wire.Retention, error) {
	if r, ok := wire.ParseRetention(s); ok {
		return r, nil
	}
	return 0, fmt.Errorf("%q: want \"none\" or \"latest\"", s)
}

func validToken(s string) bool {
	if s == "" || len(s) > 128 {
		return false
	}
	for _, c := range []byte(s) {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return false
		}
	}
	return !strings.HasPrefix(s, ".") && !strings.HasSuffix(s, ".") && !strings.Contains(s, "..")
}

// validSubject accepts a literal subject: frames travel on SUBJECT.<seq>.
func validSubject(s string) bool {
	if !validToken(s) {
		return false
	}
	return !strings.ContainsAny(s, "*> \t")
}

func sanitizeToken(s string) string {
	b := []byte(s)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			b[i] = '-'
		}
	}
	if len(b) == 0 {
		return "host"
	}
	return string(b)
}
