package main

import (
	"bytes"
	"strings"
	"testing"

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
