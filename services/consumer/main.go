// Command waitroom-consumer applies registrations and item updates from Kafka
// to the lines in Redis.
package main

import (
	"context"

	"github.com/waitroom/waitroom/pkg/app/service"
	"github.com/waitroom/waitroom/pkg/foundation/config"
	"github.com/waitroom/waitroom/services/consumer/ingest"
	"go.uber.org/zap"
)

func main() {
	service.Main("consumer", func(c ingest.Config) config.Log { return c.Log },
		func(ctx context.Context, cfg ingest.Config, log *zap.Logger) error {
			return ingest.Run(ctx, cfg, nil, log, nil)
		})
}
