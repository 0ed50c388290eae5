package main

import (
	"bytes"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/flybus/flybus/wire"
)

func TestContractCommandPrintsDigest(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run([]string{"contract"}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	if !strings.HasSuffix(out.String(), "contractDigest "+wire.ContractDigest()+"\n") {
		t.Fatalf("output ends %q", out.String()[max(0, out.Len()-100):])
	}
}

func TestUnknownCommandExits2(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run([]string{"bogus"}, &out, &errb); code != 2 || !strings.Contains(errb.String(), "unknown command") {
		t.Fatalf("exit %d, stderr %q", code, errb.String())
	}
	if code := run(nil, &out, &errb); code != 2 {
		t.Fatalf("no args: exit %d", code)
	}
}

func TestEveryCommandHasHelp(t *testing.T) {
	for _, c := range commands {
		t.Run(c.name, func(t *testing.T) {
			var want bytes.Buffer
			if code := run([]string{"help", c.name}, &want, &want); code != 0 {
				t.Fatalf("help %s: exit %d", c.name, code)
			}
			for _, part := range []string{"Usage: flybus " + c.name, "\nExample:\n  flybus "} {
				if !strings.Contains(want.String(), part) {
					t.Errorf("help lacks %q:\n%s", part, want.String())
				}
			}
			for _, flag := range []string{"--help", "-h"} {
				var out, errb bytes.Buffer
				if code := run([]string{c.name, flag}, &out, &errb); code != 0 || out.String() != want.String() || errb.Len() > 0 {
					t.Errorf("%s %s: exit %d, stderr %q, same help %v", c.name, flag, code, errb.String(), out.String() == want.String())
				}
			}
			if c.name == "perf" {
				return // package perf reports its own usage errors
			}
			// A usage error is the error and where the help is, not the help.
			var out, errb bytes.Buffer
			wantErr := "flybus " + c.name + ": flag provided but not defined: --no-such-flag\nsee flybus " + c.name + " --help\n"
			if code := run([]string{c.name, "--no-such-flag"}, &out, &errb); code != 2 || out.Len() > 0 || errb.String() != wantErr {
				t.Errorf("bad flag: exit %d, stderr %q, want %q", code, errb.String(), wantErr)
			}
		})
	}
}

func TestTopLevelHelp(t *testing.T) {
	for _, args := range [][]string{{"help"}, {"--help"}, {"-h"}} {
		var out, errb bytes.Buffer
		if code := run(args, &out, &errb); code != 0 {
			t.Fatalf("%v: exit %d", args, code)
		}
		for _, want := range []string{"serve", "call", "stats", "contract", "perf", "demo", "\n  declare ", "\n  pub ", "\n  sub "} {
			if !strings.Contains(out.String(), want) {
				t.Errorf("%v: help lacks %q", args, want)
			}
		}
	}
	var out, errb bytes.Buffer
	if code := run([]string{"help", "bogus"}, &out, &errb); code != 2 {
		t.Errorf("help bogus: exit %d", code)
	}
}

func TestUsageErrorsExit2(t *testing.T) {
	for _, args := range [][]string{
		{"serve", "extra"},
		{"call", "only-a-socket"},
		{"call", "s", "Bad Name", "M", "{}"},
		{"call", "s", "svc", "M", "{"},
		{"call", "s", "svc", "M", "{}", "--client", "Nope"},
		{"call", "s", "svc", "M", "{}", "--timeout", "-1s"},
		{"stats"},
		{"stats", "--metrics", "x:y"},
		{"contract", "extra"},
	} {
		var out, errb bytes.Buffer
		if code := run(args, &out, &errb); code != 2 || !strings.HasSuffix(errb.String(), "\nsee flybus "+args[0]+" --help\n") ||
			strings.Contains(errb.String(), "Usage:") || strings.Count(errb.String(), "\n") != 2 {
			t.Errorf("%v: exit %d, stderr %q", args, code, errb.String())
		}
	}
}

func TestInterspersedFlags(t *testing.T) {
	o := &callOptions{}
	pos, _, ok := parse(callCmd, callFlags(o), []string{"a", "--client", "x", "b", "--timeout=3s", "c", "--", "--d"}, io.Discard, io.Discard)
	if !ok || strings.Join(pos, " ") != "a b c --d" || o.client != "x" || o.timeout != 3*time.Second {
		t.Fatalf("pos %q, options %+v", pos, o)
	}
}
