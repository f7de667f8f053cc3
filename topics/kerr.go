package topics

import "github.com/twmb/franz-go/pkg/kerr"

var (
	kerrUnknownTopic = kerr.UnknownTopicOrPartition
	kerrTopicExists  = kerr.TopicAlreadyExists
)
