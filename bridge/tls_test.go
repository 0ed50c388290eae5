package bridge

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// testPKI is a CA and the certificates it signed, as PEM files.
type testPKI struct {
	dir    string
	ca     *x509.Certificate
	caKey  *ecdsa.PrivateKey
	caFile string
}

func newPKI(t *testing.T) *testPKI {
	t.Helper()
	p := &testPKI{dir: t.TempDir()}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "flybus test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true,
		KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	if p.ca, err = x509.ParseCertificate(der); err != nil {
		t.Fatal(err)
	}
	p.caKey = key
	p.caFile = p.write(t, "ca.pem", "CERTIFICATE", der)
	return p
}

func (p *testPKI) write(t *testing.T, name, typ string, der []byte) string {
	t.Helper()
	path := filepath.Join(p.dir, name)
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// issue signs a certificate for name (a server on 127.0.0.1, or a client)
// and returns its certificate and key files.
func (p *testPKI) issue(t *testing.T, name string, usage x509.ExtKeyUsage) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.ca, &key.PublicKey, p.caKey)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return p.write(t, name+".pem", "CERTIFICATE", der), p.write(t, name+".key", "EC PRIVATE KEY", kder)
}

// A NATS server that speaks only TLS and asks every client for a
// certificate: two bridges configured with the CA, a certificate and a key
// carry a frame across, digests checked; a bridge without a certificate,
// or trusting another CA, stops once its reconnects are spent (none here)
// and says why.
func TestMutualTLS(t *testing.T) {
	pki := newPKI(t)
	srvCert, srvKey := pki.issue(t, "nats-server", x509.ExtKeyUsageServerAuth)
	cliCert, cliKey := pki.issue(t, "bridge", x509.ExtKeyUsageClientAuth)
	pair, err := tls.LoadX509KeyPair(srvCert, srvKey)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(pki.ca)
	n := &natsHarness{t: t, dir: t.TempDir(), port: -1, maxPayload: 64 << 10, tls: &tls.Config{
		Certificates: []tls.Certificate{pair}, ClientCAs: roots, ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS12}}
	n.start()
	t.Cleanup(n.stop)

	a := crossesWith(t, n, func(c *NATSConfig) { c.TLS = &TLSConfig{CA: pki.caFile, Cert: cliCert, Key: cliKey} })
	other := newPKI(t) // a CA that signed neither the server nor the bridge
	t.Run("no client certificate", func(t *testing.T) {
		// TLS 1.3 refuses a missing client certificate after the
		// handshake: either reason may arrive.
		refusedWith(t, a, n, func(c *NATSConfig) { c.TLS = &TLSConfig{CA: pki.caFile} },
			"certificate required", "closed by remote after tls handshake")
	})
	t.Run("another CA", func(t *testing.T) {
		refusedWith(t, a, n, func(c *NATSConfig) { c.TLS = &TLSConfig{CA: other.caFile, Cert: cliCert, Key: cliKey} },
			"certificate signed by unknown authority")
	})
}
