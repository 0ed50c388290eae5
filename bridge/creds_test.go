package bridge

import (
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nkeys"
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

	a := crossesWith(t, n, func(c *NATSConfig) { c.Credentials = creds })
	refusedWith(t, a, n, func(*NATSConfig) {}, "authorization")
}
