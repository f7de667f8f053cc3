// Command waitroom-scheduler admits people from the lines at each item's rate;
// run several replicas: one leads at a time. It also serves the admin API.
package main

import (
	"context"

	"github.com/waitroom/waitroom/pkg/config"
	"github.com/waitroom/waitroom/pkg/service"
	"github.com/waitroom/waitroom/services/scheduler/admission"
	"go.uber.org/zap"
)

func main() {
	service.Main("scheduler", func(c admission.Config) config.Log { return c.Log },
		func(ctx context.Context, cfg admission.Config, log *zap.Logger) error {
			return admission.Run(ctx, cfg, nil, log, nil)
		})
}
