package bridge

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nkeys"

	"github.com/flybus/flybus/client"
	"github.com/flybus/flybus/wire"
)

// userCreds signs an operator, an account and a user, as nsc would, and
// returns the operator's claims, the account's public key and JWT, and a
// .creds file for the user.
func userCreds(t *testing.T) (op *jwt.OperatorClaims, accPub, accJWT, credsFile string) {
	t.Helper()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	okp, err := nkeys.CreateOperator()
	must(err)
	opub, err := okp.PublicKey()
	must(err)
	op = jwt.NewOperatorClaims(opub)
	akp, err := nkeys.CreateAccount()
	must(err)
	accPub, err = akp.PublicKey()
	must(err)
	ac := jwt.NewAccountClaims(accPub)
	accJWT, err = ac.Encode(okp)
	must(err)
	ukp, err := nkeys.CreateUser()
	must(err)
	upub, err := ukp.PublicKey()
	must(err)
	ujwt, err := jwt.NewUserClaims(upub).Encode(akp)
	must(err)
	seed, err := ukp.Seed()
	must(err)
	creds, err := jwt.FormatUserConfig(ujwt, seed)
	must(err)
	credsFile = filepath.Join(t.TempDir(), "bridge.creds")
	must(os.WriteFile(credsFile, creds, 0o600))
	return op, accPub, accJWT, credsFile
}

// A NATS server that trusts one operator (decentralized JWT auth, as
// deployments set up with nsc run): bridges given the user's credentials
// file carry a frame across, digests checked; a bridge without them is
// refused, stops once its reconnects are spent, and says why.
func TestCredentialsFile(t *testing.T) {
	op, accPub, accJWT, creds := userCreds(t)
	res := &server.MemAccResolver{}
	if err := res.Store(accPub, accJWT); err != nil {
		t.Fatal(err)
	}
	s, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, NoLog: true, NoSigs: true,
		TrustedOperators: []*jwt.OperatorClaims{op}, AccountResolver: res})
	if err != nil {
		t.Fatal(err)
	}
	s.Start()
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats server not ready")
	}
	n := &natsHarness{t: t, port: s.Addr().(*net.TCPAddr).Port} // for bridgeConfig's URL only

	a, b := newHost(t, "a"), newHost(t, "b")
	prod := a.connect("producer")
	if _, err := prod.DeclareTopic(ctxT(t), "cam.frames", wire.RetainNone); err != nil {
		t.Fatal(err)
	}
	cb := bridgeConfig(b, n, "bridge-b")
	cb.NATS.Credentials = creds
	cb.Imports = []ImportConfig{{Subject: "site.cam", Topic: "cam.frames"}}
	startBridge(t, cb, Options{})
	ca := bridgeConfig(a, n, "bridge-a")
	ca.NATS.Credentials = creds
	ca.Exports = []ExportConfig{{Topic: "cam.frames", Subject: "site.cam", Mode: "bounded"}}
	startBridge(t, ca, Options{})
	waitFor(t, "the import's topic", func() bool { return b.r.Stats().Topics == 1 })
	sub, err := b.connect("consumer").Subscribe(ctxT(t), "cam.frames", client.Bounded())
	if err != nil {
		t.Fatal(err)
	}
	publishFrame(t, prod, "cam.frames", 1, frameSizes)
	expectFrame(t, sub, 1)

	c := bridgeConfig(a, n, "bridge-c")
	c.Exports = []ExportConfig{{Topic: "cam.frames", Subject: "site.other", Mode: "bounded"}}
	none := 0
	c.NATS.MaxReconnects = &none
	br, err := New(c, Options{Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	if err := br.Run(ctxT(t)); err == nil || !strings.HasPrefix(err.Error(), "nats:") || !strings.Contains(strings.ToLower(err.Error()), "authorization") {
		t.Errorf("without credentials: Run returned %v, want the NATS connection's authorization failure", err)
	}
}
