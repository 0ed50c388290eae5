package bridge

import (
	"encoding/json"
	"errors"
	"os"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"
)

const goodConfig = `{
  "origin": "sim-host",
  "nats": {"urls": ["nats://127.0.0.1:4222", "nats://10.0.0.6:4222"], "maxReconnects": 10, "reconnectWait": "1s"},
  "local": {"socket": "/tmp/fb.sock", "clientId": "bridge", "storeRoot": "/dev/shm/flybus"},
  "exports": [{"topic": "cam.frames", "subject": "site.cam", "mode": "latest",
               "stream": {"name": "CAM", "maxAge": "10m", "maxBytes": 1000000}}],
  "imports": [{"subject": "site.actions", "topic": "agent.actions", "retained": "latest"}],
  "history": {"service": "bridge.history"}
}`

func TestConfigParsesAndFillsDefaults(t *testing.T) {
	c, err := ParseConfig([]byte(goodConfig))
	if err != nil {
		t.Fatal(err)
	}
	if *c.NATS.MaxReconnects != 10 || time.Duration(c.NATS.ReconnectWait) != time.Second ||
		time.Duration(c.Exports[0].Stream.MaxAge) != 10*time.Minute ||
		c.Imports[0].PendingBytes != 64<<20 || time.Duration(c.Imports[0].FrameTimeout) != 5*time.Second ||
		c.Imports[0].Mode != "bounded" {
		t.Fatalf("%+v", c)
	}
}

// Unknown keys, duplicate keys and bad values are refused with a message
// that names the problem, as ErrConfig.
func TestConfigIsStrict(t *testing.T) {
	for _, tc := range []struct{ edit, want string }{
		{`"origin": "sim-host",`, ``},
		{`"origin": "sim-host"`, `"origin": "sim-host", "extra": 1`},
		{`"mode": "latest"`, `"mode": "latest", "mdoe": "x"`},
		{`"origin": "sim-host"`, `"origin": "a", "origin": "b"`},
		{`"mode": "latest"`, `"mode": "newest"`},
		{`"reconnectWait": "1s"`, `"reconnectWait": 1`},
		{`"subject": "site.cam"`, `"subject": "site.*"`},
		{`"clientId": "bridge"`, `"clientId": "Bridge!"`},
		{`"storeRoot": "/dev/shm/flybus"`, `"storeRoot": ""`},
		{`"retained": "latest"`, `"retained": "all"`},
		{`"retained": "latest"`, `"retained": "latest", "mode": "newest"`},
		{`"maxBytes": 1000000`, `"maxBytes": -1`},
		{`["nats://127.0.0.1:4222", "nats://10.0.0.6:4222"]`, `[]`},
		{`"service": "bridge.history"`, `"service": "Bad Name"`},
	} {
		in := strings.Replace(goodConfig, tc.edit, tc.want, 1)
		if tc.want == "" {
			in = goodConfig + "x" // trailing bytes
		}
		_, err := ParseConfig([]byte(in))
		if err == nil || !errors.Is(err, ErrConfig) {
			t.Errorf("%s -> %s: %v", tc.edit, tc.want, err)
			continue
		}
		t.Logf("%s: %v", tc.want, err)
	}
	_, err := ParseConfig([]byte(strings.Replace(goodConfig, `"mode": "latest"`, `"mode": "latest", "mdoe": "x"`, 1)))
	if !strings.Contains(err.Error(), `unknown field "mdoe"`) {
		t.Fatalf("message: %v", err)
	}
}

// The configurations the READMEs show are valid ones.
func TestREADMEConfigsParse(t *testing.T) {
	n := 0
	for _, path := range []string{"README.md", "../README.md"} {
		md, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range regexp.MustCompile("(?ms)^```json\n(.*?)^```").FindAllSubmatch(md, -1) {
			if !strings.Contains(string(m[1]), `"local"`) {
				continue // not a bridge configuration
			}
			n++
			if _, err := ParseConfig(m[1]); err != nil {
				t.Errorf("%s: %v in\n%s", path, err, m[1])
			}
		}
	}
	if n < 4 {
		t.Fatalf("%d bridge configurations in the READMEs, want the four two-host ones", n)
	}
}

// FuzzParseConfig: any input is refused with ErrConfig or accepted, and
// an accepted configuration, written out again, parses to itself (its
// defaults filled once and for all).
func FuzzParseConfig(f *testing.F) {
	f.Add([]byte(goodConfig))
	f.Add([]byte(`{"nats":{"urls":["nats://a:1"]},"local":{"socket":"/s","clientId":"b","storeRoot":"/r"},"imports":[{"subject":"s","topic":"t","mode":"latest"}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := ParseConfig(data)
		if err != nil {
			if !errors.Is(err, ErrConfig) {
				t.Fatalf("refused without ErrConfig: %v", err)
			}
			return
		}
		out, err := json.Marshal(c)
		if err != nil {
			t.Fatal(err)
		}
		again, err := ParseConfig(out)
		if err != nil {
			t.Fatalf("an accepted configuration, written out, is refused: %v\n%s", err, out)
		}
		if !reflect.DeepEqual(c, again) {
			t.Fatalf("written out and parsed again it changed:\n%+v\n%+v", c, again)
		}
	})
}
