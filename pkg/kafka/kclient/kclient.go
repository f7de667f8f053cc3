// Package kclient holds the franz-go options every waitroom Kafka client
// starts from (brokers, client id, logger, TLS and SASL), so every service
// and waitroomctl talk to a secured Kafka, a plain one and kfake the same way.
package kclient

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"

	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/aws"
	"github.com/twmb/franz-go/pkg/sasl/oauth"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"
	"github.com/twmb/franz-go/plugin/kzap"
	"github.com/waitroom/waitroom/pkg/foundation/config"
	"go.uber.org/zap"
)

// Opts returns the options shared by every client of k: seed brokers, client
// id, a zap logger at warn level (franz-go is chatty at info), and the TLS
// dialer and SASL mechanism of k.Security. It reads the TLS files now (a bad
// file fails here, at start); it does not connect: Check does.
func Opts(ctx context.Context, k config.Kafka, clientID string, log *zap.Logger) ([]kgo.Opt, error) {
	if err := k.Validate(); err != nil {
		return nil, fmt.Errorf("kafka config: %w", err)
	}
	opts := []kgo.Opt{
		kgo.SeedBrokers(k.Brokers...),
		kgo.ClientID(clientID),
		kgo.WithLogger(kzap.New(log.Named("kafka"), kzap.Level(kgo.LogLevelWarn))),
	}
	s := k.Security
	if s.TLS {
		tc, err := TLSConfig(s)
		if err != nil {
			return nil, err
		}
		opts = append(opts, kgo.DialTLSConfig(tc))
	}
	if s.SASLMechanism != "" {
		m, err := Mechanism(ctx, s)
		if err != nil {
			return nil, err
		}
		opts = append(opts, kgo.SASL(m))
	}
	return opts, nil
}

// TLSConfig builds the client TLS config of s: the CA file's roots (else the
// system's), the client certificate when set, and the server name override.
func TLSConfig(s config.KafkaSecurity) (*tls.Config, error) {
	return config.ClientTLS("WR_KAFKA", s.TLSCAFile, s.TLSCertFile, s.TLSKeyFile, s.TLSServerName)
}

// Mechanism returns franz-go's SASL mechanism for s. OAUTHBEARER reads its
// token file or runs its command on every authentication, so a rotated token
// is picked up by the next connection. AWS_MSK_IAM loads the AWS SDK's
// default credential chain now and asks it for (cached, refreshed)
// credentials on every authentication.
func Mechanism(ctx context.Context, s config.KafkaSecurity) (sasl.Mechanism, error) {
	switch strings.ToUpper(s.SASLMechanism) {
	case config.SASLPlain:
		return plain.Auth{User: s.SASLUsername, Pass: s.SASLPassword}.AsMechanism(), nil
	case config.SASLScram256:
		return scram.Auth{User: s.SASLUsername, Pass: s.SASLPassword}.AsSha256Mechanism(), nil
	case config.SASLScram512:
		return scram.Auth{User: s.SASLUsername, Pass: s.SASLPassword}.AsSha512Mechanism(), nil
	case config.SASLOAuthBearer:
		return oauth.Oauth(func(ctx context.Context) (oauth.Auth, error) {
			tok, err := OAuthToken(ctx, s)
			return oauth.Auth{Token: tok}, err
		}), nil
	case config.SASLAWSMSKIAM:
		var lo []func(*awsconfig.LoadOptions) error
		if s.AWSRegion != "" {
			lo = append(lo, awsconfig.WithRegion(s.AWSRegion))
		}
		ac, err := awsconfig.LoadDefaultConfig(ctx, lo...)
		if err != nil {
			return nil, fmt.Errorf("load AWS credentials for AWS_MSK_IAM: %w", err)
		}
		return aws.ManagedStreamingIAM(func(ctx context.Context) (aws.Auth, error) {
			c, err := ac.Credentials.Retrieve(ctx)
			if err != nil {
				return aws.Auth{}, fmt.Errorf("retrieve AWS credentials for AWS_MSK_IAM: %w", err)
			}
			return aws.Auth{AccessKey: c.AccessKeyID, SecretKey: c.SecretAccessKey, SessionToken: c.SessionToken}, nil
		}), nil
	default:
		return nil, fmt.Errorf("WR_KAFKA_SASL_MECHANISM %q: not supported", s.SASLMechanism)
	}
}

// tokenCommandTimeout bounds one run of WR_KAFKA_SASL_OAUTH_TOKEN_COMMAND.
const tokenCommandTimeout = 30 * time.Second

// OAuthToken returns the current OAUTHBEARER token of s: the token file's
// content, or the token command's standard output, trimmed.
func OAuthToken(ctx context.Context, s config.KafkaSecurity) (string, error) {
	var raw []byte
	var err error
	if s.OAuthTokenFile != "" {
		if raw, err = os.ReadFile(s.OAuthTokenFile); err != nil {
			return "", fmt.Errorf("read WR_KAFKA_SASL_OAUTH_TOKEN_FILE: %w", err)
		}
	} else {
		ctx, cancel := context.WithTimeout(ctx, tokenCommandTimeout)
		defer cancel()
		cmd := exec.CommandContext(ctx, "sh", "-c", s.OAuthTokenCommand)
		cmd.Stderr = os.Stderr
		if raw, err = cmd.Output(); err != nil {
			return "", fmt.Errorf("run WR_KAFKA_SASL_OAUTH_TOKEN_COMMAND: %w", err)
		}
	}
	tok := strings.TrimSpace(string(raw))
	if tok == "" {
		return "", errors.New("OAUTHBEARER token is empty")
	}
	return tok, nil
}

// ErrAuth marks a Kafka that refused who we are: a wrong password, token or
// certificate. Retrying will not help; the process should stop and say so.
var ErrAuth = errors.New("kafka refused our credentials")

// NewChecked makes a client of opts for what (named in its errors) and
// Checks it against the cluster (closed again when refused): every service's
// start-up producer.
func NewChecked(ctx context.Context, k config.Kafka, what string, opts ...kgo.Opt) (*kgo.Client, error) {
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("kafka %s: %w", what, err)
	}
	if err := Check(ctx, cl, k); err != nil {
		cl.Close()
		return nil, err
	}
	return cl, nil
}

// checkTimeout bounds Check: an unreachable Kafka is not its business.
const checkTimeout = 10 * time.Second

// Check asks the cluster for its brokers once, so a service learns at start
// whether its TLS and SASL settings are accepted. It returns an error wrapping
// ErrAuth (with the mechanism and user) when they are not, and nil otherwise,
// also when Kafka is only unreachable: the clients retry that by themselves.
func Check(ctx context.Context, cl *kgo.Client, k config.Kafka) error {
	ctx, cancel := context.WithTimeout(ctx, checkTimeout)
	defer cancel()
	err := cl.Ping(ctx)
	if err == nil {
		return nil
	}
	why := ""
	switch {
	case IsAuthError(err):
		why = err.Error()
	case k.Security.SASLMechanism != "" && closedByBroker(err) && reachable(ctx, k):
		// Some brokers (kfake, older Kafka) answer a failed SASL exchange
		// by closing the connection: it is up, and it hung up on us.
		why = "the broker closed the connection during SASL authentication (" + err.Error() + "): wrong user, password or mechanism"
	default:
		return nil
	}
	who := "without SASL"
	if m := k.Security.SASLMechanism; m != "" {
		who = "with SASL " + strings.ToUpper(m)
		if k.Security.SASLUsername != "" {
			who += " as user " + k.Security.SASLUsername
		}
	}
	over := "plaintext"
	if k.Security.TLS {
		over = "TLS"
	}
	return fmt.Errorf("%w: connecting to %s over %s %s: %s (check WR_KAFKA_SASL_* and WR_KAFKA_TLS_*)",
		ErrAuth, strings.Join(k.Brokers, ","), over, who, why)
}

func closedByBroker(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET)
}

// reachable reports whether some broker accepts a connection (and a TLS
// handshake, with TLS): then a closed connection was its answer to our SASL.
func reachable(ctx context.Context, k config.Kafka) bool {
	var tc *tls.Config
	if k.Security.TLS {
		var err error
		if tc, err = TLSConfig(k.Security); err != nil {
			return false
		}
	}
	for _, b := range k.Brokers {
		d := &net.Dialer{Timeout: 5 * time.Second}
		var c net.Conn
		var err error
		if tc != nil {
			c, err = (&tls.Dialer{NetDialer: d, Config: tc}).DialContext(ctx, "tcp", b)
		} else {
			c, err = d.DialContext(ctx, "tcp", b)
		}
		if err == nil {
			_ = c.Close()
			return true
		}
	}
	return false
}

// IsAuthError tells a refused credential or certificate (fatal) from a
// network fault (retried).
func IsAuthError(err error) bool {
	if errors.Is(err, kerr.SaslAuthenticationFailed) || errors.Is(err, kerr.IllegalSaslState) ||
		errors.Is(err, kerr.UnsupportedSaslMechanism) || errors.Is(err, kerr.ClusterAuthorizationFailed) {
		return true
	}
	var (
		ue  x509.UnknownAuthorityError
		he  x509.HostnameError
		ce  x509.CertificateInvalidError
		ae  tls.AlertError
		rhe tls.RecordHeaderError
		ve  *tls.CertificateVerificationError
	)
	if errors.As(err, &ue) || errors.As(err, &he) || errors.As(err, &ce) || errors.As(err, &ae) || errors.As(err, &rhe) || errors.As(err, &ve) {
		return true
	}
	var ne net.Error
	if errors.As(err, &ne) {
		return false
	}
	// franz-go reports a broker that closed the connection during SASL
	// (how Kafka answers a bad SCRAM proof) as a plain error naming sasl.
	return strings.Contains(strings.ToLower(err.Error()), "sasl")
}
