package config

import (
	"errors"
	"fmt"
	"os"
	"strings"
)

// SASL mechanisms WR_KAFKA_SASL_MECHANISM accepts.
const (
	SASLPlain       = "PLAIN"
	SASLScram256    = "SCRAM-SHA-256"
	SASLScram512    = "SCRAM-SHA-512"
	SASLOAuthBearer = "OAUTHBEARER"
	SASLAWSMSKIAM   = "AWS_MSK_IAM"
)

// KafkaSecurity is how a service proves itself to a secured Kafka (MSK,
// Confluent Cloud, Aiven...): TLS, and one SASL mechanism. Empty, it talks
// plaintext without authentication, as to the dev stack.
type KafkaSecurity struct {
	TLS           bool   `env:"WR_KAFKA_TLS" envDefault:"false"`
	TLSCAFile     string `env:"WR_KAFKA_TLS_CA_FILE"`     // PEM; empty: the system's roots
	TLSCertFile   string `env:"WR_KAFKA_TLS_CERT_FILE"`   // PEM client certificate (mutual TLS), with the key
	TLSKeyFile    string `env:"WR_KAFKA_TLS_KEY_FILE"`    // PEM key of the client certificate
	TLSServerName string `env:"WR_KAFKA_TLS_SERVER_NAME"` // empty: the broker's host name

	SASLMechanism string `env:"WR_KAFKA_SASL_MECHANISM"` // PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER, AWS_MSK_IAM
	SASLUsername  string `env:"WR_KAFKA_SASL_USERNAME"`
	SASLPassword  string `env:"WR_KAFKA_SASL_PASSWORD" secret:"true"`
	// OAUTHBEARER: the token is read again for every connection, from a file
	// (kept fresh by a sidecar) or from a command's standard output.
	OAuthTokenFile    string `env:"WR_KAFKA_SASL_OAUTH_TOKEN_FILE"`
	OAuthTokenCommand string `env:"WR_KAFKA_SASL_OAUTH_TOKEN_COMMAND" secret:"true"` // run with sh -c; may hold a secret
	// AWS_MSK_IAM: credentials come from the AWS SDK's default chain
	// (AWS_ACCESS_KEY_ID..., profiles, web identity, instance roles).
	AWSRegion string `env:"WR_KAFKA_SASL_AWS_REGION"` // empty: AWS_REGION
}

// Validate checks that the settings name one complete way to connect, and
// that the files they name can be read.
func (s KafkaSecurity) Validate() error {
	if !s.TLS && (s.TLSCAFile != "" || s.TLSCertFile != "" || s.TLSKeyFile != "" || s.TLSServerName != "") {
		return errors.New("WR_KAFKA_TLS_* set while WR_KAFKA_TLS is false: set WR_KAFKA_TLS=true")
	}
	if (s.TLSCertFile == "") != (s.TLSKeyFile == "") {
		return errors.New("WR_KAFKA_TLS_CERT_FILE and WR_KAFKA_TLS_KEY_FILE go together: set both or neither")
	}
	for name, f := range map[string]string{"WR_KAFKA_TLS_CA_FILE": s.TLSCAFile, "WR_KAFKA_TLS_CERT_FILE": s.TLSCertFile,
		"WR_KAFKA_TLS_KEY_FILE": s.TLSKeyFile, "WR_KAFKA_SASL_OAUTH_TOKEN_FILE": s.OAuthTokenFile} {
		if f == "" {
			continue
		}
		if _, err := os.Stat(f); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
	}
	userPass := func() error {
		if s.SASLUsername == "" || s.SASLPassword == "" {
			return fmt.Errorf("WR_KAFKA_SASL_MECHANISM=%s needs WR_KAFKA_SASL_USERNAME and WR_KAFKA_SASL_PASSWORD", s.SASLMechanism)
		}
		return nil
	}
	oauthSet := s.OAuthTokenFile != "" || s.OAuthTokenCommand != ""
	switch m := strings.ToUpper(s.SASLMechanism); m {
	case "":
		if s.SASLUsername != "" || s.SASLPassword != "" || oauthSet || s.AWSRegion != "" {
			return errors.New("WR_KAFKA_SASL_* set without WR_KAFKA_SASL_MECHANISM")
		}
	case SASLPlain, SASLScram256, SASLScram512:
		if oauthSet {
			return fmt.Errorf("WR_KAFKA_SASL_OAUTH_TOKEN_* set with WR_KAFKA_SASL_MECHANISM=%s", m)
		}
		return userPass()
	case SASLOAuthBearer:
		if (s.OAuthTokenFile == "") == (s.OAuthTokenCommand == "") {
			return errors.New("WR_KAFKA_SASL_MECHANISM=OAUTHBEARER needs exactly one of WR_KAFKA_SASL_OAUTH_TOKEN_FILE and WR_KAFKA_SASL_OAUTH_TOKEN_COMMAND")
		}
	case SASLAWSMSKIAM:
		if oauthSet || s.SASLUsername != "" || s.SASLPassword != "" {
			return errors.New("WR_KAFKA_SASL_MECHANISM=AWS_MSK_IAM takes its credentials from the AWS SDK (AWS_ACCESS_KEY_ID..., roles), not from WR_KAFKA_SASL_USERNAME/PASSWORD/OAUTH_*")
		}
	default:
		return fmt.Errorf("WR_KAFKA_SASL_MECHANISM %q: want PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER or AWS_MSK_IAM", s.SASLMechanism)
	}
	return nil
}
