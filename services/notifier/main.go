// Command waitroom-notifier streams where each queue token stands to the
// browser over Server-Sent Events; run as many replicas as the streams need.
package main

import (
	"context"

	"github.com/waitroom/waitroom/pkg/app/service"
	"github.com/waitroom/waitroom/pkg/foundation/config"
	"github.com/waitroom/waitroom/services/notifier/sse"
	"go.uber.org/zap"
)

func main() {
	service.Main("notifier", func(c sse.Config) config.Log { return c.Log },
		func(ctx context.Context, cfg sse.Config, log *zap.Logger) error {
			return sse.Run(ctx, cfg, nil, log, nil)
		})
}
