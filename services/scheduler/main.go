// Command waitroom-scheduler admits people from the lines at each item's rate;
// run several replicas: one leads at a time. It also serves the admin API.
package main

import (
	"context"

	"github.com/waitroom/waitroom/pkg/app/service"
	"github.com/waitroom/waitroom/pkg/foundation/config"
	"github.com/waitroom/waitroom/services/scheduler/promote"
	"go.uber.org/zap"
)

func main() {
	service.Main("scheduler", func(c promote.Config) config.Log { return c.Log },
		func(ctx context.Context, cfg promote.Config, log *zap.Logger) error {
			return promote.Run(ctx, cfg, nil, log, nil)
		})
}
