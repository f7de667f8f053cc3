// Command waitroom-api serves the registration API.
package main

import (
	"context"

	"github.com/waitroom/waitroom/pkg/app/service"
	"github.com/waitroom/waitroom/pkg/foundation/config"
	"github.com/waitroom/waitroom/services/api/httpapi"
	"go.uber.org/zap"
)

func main() {
	service.Main("api", func(c httpapi.Config) config.Log { return c.Log },
		func(ctx context.Context, cfg httpapi.Config, log *zap.Logger) error {
			return httpapi.Run(ctx, cfg, nil, log, nil)
		})
}
