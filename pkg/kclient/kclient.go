// Package kclient holds the franz-go options every waitroom Kafka client
// starts from, so a service talks to real Kafka and to kfake the same way.
package kclient

import (
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/plugin/kzap"
	"go.uber.org/zap"
)

// Base returns the options shared by every client: seed brokers, client id
// and a zap logger at warn level (franz-go is chatty at info).
func Base(brokers []string, clientID string, log *zap.Logger) []kgo.Opt {
	return []kgo.Opt{
		kgo.SeedBrokers(brokers...),
		kgo.ClientID(clientID),
		kgo.WithLogger(kzap.New(log.Named("kafka"), kzap.Level(kgo.LogLevelWarn))),
	}
}
