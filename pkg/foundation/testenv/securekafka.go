package testenv

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

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/waitroom/waitroom/pkg/foundation/config"
)

// Secured Kafka credentials of SecureKafka's users.
const (
	KafkaUser     = "waitroom"
	KafkaPassword = "s3cret-password"
)

// SecureKafka starts an in-process Kafka that only speaks TLS (a fresh CA,
// the server certificate for 127.0.0.1 and "localhost") and requires SASL,
// with user KafkaUser/KafkaPassword for PLAIN, SCRAM-SHA-256 and
// SCRAM-SHA-512, and no topics. It returns the config of a client
// that authenticates with mechanism (config.SASLScram256...) and trusts the
// CA, whose PEM file is in the test's temporary directory.
func SecureKafka(t testing.TB, mechanism string, opts ...kfake.Opt) config.Kafka {
	t.Helper()
	caFile, srv := serverCert(t, t.TempDir())
	c, err := kfake.NewCluster(append([]kfake.Opt{kfake.NumBrokers(1), kfake.EnableSASL(),
		kfake.Superuser(config.SASLPlain, KafkaUser, KafkaPassword),
		kfake.Superuser(config.SASLScram256, KafkaUser, KafkaPassword),
		kfake.Superuser(config.SASLScram512, KafkaUser, KafkaPassword),
		kfake.TLS(&tls.Config{Certificates: []tls.Certificate{srv}, MinVersion: tls.VersionTLS12}),
	}, opts...)...)
	if err != nil {
		t.Fatalf("start kfake with TLS and SASL: %v", err)
	}
	t.Cleanup(c.Close)
	k := config.Kafka{Brokers: c.ListenAddrs(), ClientID: "waitroom-test", Security: config.KafkaSecurity{
		TLS: true, TLSCAFile: caFile, SASLMechanism: mechanism, SASLUsername: KafkaUser, SASLPassword: KafkaPassword,
	}}
	return k
}

// ClientCert issues a client certificate from a new CA into dir and returns
// the cert and key files (for tests of the TLS settings' parsing).
func ClientCert(t testing.TB, dir string) (certFile, keyFile string) {
	t.Helper()
	caCert, caKey := newCA(t)
	cert := issue(t, caCert, caKey, "waitroom-client", true)
	certFile, keyFile = filepath.Join(dir, "client.pem"), filepath.Join(dir, "client-key.pem")
	writePEM(t, certFile, "CERTIFICATE", cert.Certificate[0])
	der, err := x509.MarshalECPrivateKey(cert.PrivateKey.(*ecdsa.PrivateKey))
	if err != nil {
		t.Fatal(err)
	}
	writePEM(t, keyFile, "EC PRIVATE KEY", der)
	return certFile, keyFile
}

// serverCert writes a new CA's certificate to dir/ca.pem and returns its
// file and a server certificate it issued for 127.0.0.1 and "localhost".
func serverCert(t testing.TB, dir string) (caFile string, srv tls.Certificate) {
	t.Helper()
	caCert, caKey := newCA(t)
	caFile = filepath.Join(dir, "ca.pem")
	writePEM(t, caFile, "CERTIFICATE", caCert.Raw)
	return caFile, issue(t, caCert, caKey, "localhost", false)
}

func newCA(t testing.TB) (*x509.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "waitroom test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return cert, key
}

func issue(t testing.TB, ca *x509.Certificate, caKey *ecdsa.PrivateKey, name string, client bool) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	usage := x509.ExtKeyUsageServerAuth
	if client {
		usage = x509.ExtKeyUsageClientAuth
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: name},
		DNSNames: []string{name}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

func writePEM(t testing.TB, file, typ string, der []byte) {
	t.Helper()
	if err := os.WriteFile(file, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}
