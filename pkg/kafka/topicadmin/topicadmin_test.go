package topicadmin

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/waitroom/waitroom/topics"
)

func TestEnsureAndCheck(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	require.NoError(t, err)
	defer c.Close()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	require.NoError(t, err)
	defer cl.Close()
	adm := kadm.NewClient(cl)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	specs := topics.Specs(topics.Options{RegistrationPartitions: 4})

	st, err := Check(ctx, adm, specs)
	require.NoError(t, err)
	assert.False(t, Healthy(st))
	for _, s := range st {
		assert.Equal(t, "missing", s.State, s.Topic)
	}
	st, err = Ensure(ctx, adm, specs, -1)
	require.NoError(t, err)
	for _, s := range st {
		assert.Equal(t, "created", s.State, s.Topic)
	}
	st, err = Check(ctx, adm, specs)
	require.NoError(t, err)
	assert.True(t, Healthy(st), "%+v", st)

	// Drift: a config changed by hand is reported, and Ensure sets it back.
	v := "delete"
	_, err = adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Op: kadm.SetConfig, Name: "cleanup.policy", Value: &v}}, topics.Items)
	require.NoError(t, err)
	st, err = Check(ctx, adm, specs)
	require.NoError(t, err)
	assert.False(t, Healthy(st))
	st, err = Ensure(ctx, adm, specs, -1)
	require.NoError(t, err)
	assert.True(t, Healthy(st))
	st, err = Check(ctx, adm, specs)
	require.NoError(t, err)
	assert.True(t, Healthy(st), "%+v", st)

	// A partition count that differs is reported and never changed.
	st, err = Ensure(ctx, adm, topics.Specs(topics.Options{RegistrationPartitions: 8}), -1)
	require.NoError(t, err)
	assert.False(t, Healthy(st))
	td, err := adm.ListTopics(kadm.WithAuthorizedOps(ctx), topics.Registrations)
	require.NoError(t, err)
	assert.Len(t, td[topics.Registrations].Partitions, 4)
}
