module github.com/waitroom/waitroom/services/notifier

go 1.26.8

require (
	github.com/waitroom/waitroom/pkg v0.0.0
	github.com/waitroom/waitroom/services/scheduler v0.0.0
	github.com/waitroom/waitroom/topics v0.0.0
)

replace (
	github.com/waitroom/waitroom/pkg => ../../pkg
	github.com/waitroom/waitroom/services/scheduler => ../scheduler
	github.com/waitroom/waitroom/topics => ../../topics
)
