package record

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// The interop tests run record/testdata/mcapjs (the npm package @mcap/core,
// installed there by `npm ci`). Without node_modules they are skipped, unless
// FLYBUS_REQUIRE_NODE is set, which makes a missing install a failure (CI
// sets it).
func mcapjs(t *testing.T) (node, dir string) {
	t.Helper()
	dir, err := filepath.Abs(filepath.Join("testdata", "mcapjs"))
	if err != nil {
		t.Fatal(err)
	}
	required := os.Getenv("FLYBUS_REQUIRE_NODE") != ""
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "@mcap", "core")); err != nil {
		if !required {
			t.Skip("record/testdata/mcapjs/node_modules is absent (run npm ci there, or set FLYBUS_REQUIRE_NODE=1 to fail instead)")
		}
		t.Fatalf("FLYBUS_REQUIRE_NODE is set but @mcap/core is not installed: run npm ci in %s", dir)
	}
	node, err = exec.LookPath("node")
	if err != nil {
		t.Fatalf("@mcap/core is installed in %s but node is not on PATH", dir)
	}
	return node, dir
}

// jsFile is what interop.js's reader saw in one file.
type jsFile struct {
	File               string         `json:"file"`
	Profile            string         `json:"profile"`
	Messages           int            `json:"messages"`
	ByTopic            map[string]int `json:"byTopic"`
	IndexedMessages    int            `json:"indexedMessages"`
	StatisticsMessages int            `json:"statisticsMessages"`
	Chunks             int            `json:"chunks"`
	Metadata           []string       `json:"metadata"`
	DataCRCOK          *bool          `json:"dataCrcOk"`
	DataEndSeen        bool           `json:"dataEndSeen"`
}

// checkWithNode has @mcap/core read every file, with its streaming reader
// (chunk CRCs checked) and its indexed reader (summary, indexes), and
// checks that both count the messages flybus wrote: per file, the same as
// flybus's summary, topic by topic, and want in all the files together.
func checkWithNode(t *testing.T, files []string, want int) {
	t.Helper()
	node, dir := mcapjs(t)
	cmd := exec.Command(node, append([]string{"interop.js", "read"}, files...)...)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("@mcap/core could not read the files: %v\n%s", err, stderr.String())
	}
	sc := bufio.NewScanner(bytes.NewReader(out))
	n := 0
	for sc.Scan() {
		var got jsFile
		if err := json.Unmarshal(sc.Bytes(), &got); err != nil {
			t.Fatalf("%v: %s", err, sc.Text())
		}
		fi, err := Info(got.File)
		if err != nil {
			t.Fatal(err)
		}
		if uint64(got.Messages) != fi.Messages || got.IndexedMessages != got.Messages || got.StatisticsMessages != got.Messages ||
			got.Chunks != fi.Chunks || got.Profile != Profile || len(got.Metadata) != 1 || got.DataCRCOK == nil || !*got.DataCRCOK {
			t.Fatalf("@mcap/core saw %+v; flybus's summary says %d messages in %d chunks", got, fi.Messages, fi.Chunks)
		}
		for _, tp := range fi.Topics {
			if uint64(got.ByTopic[tp.Topic]) != tp.Publications {
				t.Fatalf("%s: @mcap/core counted %d messages on %s, flybus %d publications", got.File, got.ByTopic[tp.Topic], tp.Topic, tp.Publications)
			}
		}
		n += got.Messages
	}
	if n != want {
		t.Fatalf("@mcap/core counted %d messages in %d files, want %d", n, len(files), want)
	}
}

// A recording written by @mcap/core, in flybus's layout and with a foreign
// channel, reads as flybus publications.
func TestReadFileWrittenByMcapJS(t *testing.T) {
	node, dir := mcapjs(t)
	path := filepath.Join(t.TempDir(), "js.mcap")
	cmd := exec.Command(node, "interop.js", "write", path)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr.String())
	}
	var want struct {
		Publications []struct {
			I     int    `json:"i"`
			Bytes int    `json:"bytes"`
			Sum   string `json:"sum"`
		} `json:"publications"`
	}
	if err := json.Unmarshal(out, &want); err != nil {
		t.Fatal(err)
	}
	r, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	for _, w := range want.Publications {
		p, err := r.Next()
		if err != nil {
			t.Fatal(err)
		}
		var payload struct{ I int }
		json.Unmarshal(p.Payload, &payload)
		if p.Topic != "js.camera" || payload.I != w.I || p.Retention.String() != "latest" || len(p.Artifacts) != 1 ||
			len(p.Artifacts[0].Data) != w.Bytes || sum(p.Artifacts[0].Data) != w.Sum {
			t.Fatalf("publication %d: %+v", w.I, p)
		}
	}
	if p, err := r.Next(); p != nil || err == nil || r.Skipped != 5 {
		t.Fatalf("after the last: %v %v, skipped %d", p, err, r.Skipped)
	}
	fi, err := Info(path)
	if err != nil || !fi.Complete || fi.Publications != 5 || fi.Other != 5 {
		t.Fatalf("info: %+v %v", fi, err)
	}
}
