package topics

import "strconv"

// Spec is one topic as the contract wants it.
type Spec struct {
	Name       string
	Partitions int32
	// Configs that must hold on the topic (others are left to the cluster).
	Configs map[string]string
}

// Options size the topics for a cluster.
type Options struct {
	// RegistrationPartitions is the partition count of waitroom.registrations
	// and waitroom.admissions (default 12). It bounds consumer parallelism; it
	// can never be changed on a live topic without reordering items.
	RegistrationPartitions int32
	// ReplicationFactor for created topics; -1 takes the broker default.
	ReplicationFactor int16
}

// DefaultOptions are the sizes used when nothing is configured.
func DefaultOptions() Options { return Options{RegistrationPartitions: 12, ReplicationFactor: -1} }

const day = 24 * 60 * 60 * 1000

// Specs lists every topic of the contract.
func Specs(o Options) []Spec {
	if o.RegistrationPartitions <= 0 {
		o.RegistrationPartitions = DefaultOptions().RegistrationPartitions
	}
	return []Spec{
		{Name: Registrations, Partitions: o.RegistrationPartitions, Configs: map[string]string{
			"cleanup.policy": "delete", "retention.ms": strconv.Itoa(7 * day)}},
		{Name: DLQ(Registrations), Partitions: 3, Configs: map[string]string{
			"cleanup.policy": "delete", "retention.ms": strconv.Itoa(30 * day)}},
		{Name: Items, Partitions: 3, Configs: map[string]string{
			"cleanup.policy": "compact"}},
		{Name: DLQ(Items), Partitions: 1, Configs: map[string]string{
			"cleanup.policy": "delete", "retention.ms": strconv.Itoa(30 * day)}},
		// As long as registrations: a rebuild that finds a registration must
		// also find its admission, or it would queue that person again.
		{Name: Admissions, Partitions: o.RegistrationPartitions, Configs: map[string]string{
			"cleanup.policy": "delete", "retention.ms": strconv.Itoa(7 * day)}},
		{Name: DLQ(Admissions), Partitions: 1, Configs: map[string]string{
			"cleanup.policy": "delete", "retention.ms": strconv.Itoa(30 * day)}},
		// Every api replica reads the whole topic into memory: one partition.
		{Name: Blocks, Partitions: 1, Configs: map[string]string{
			"cleanup.policy": "compact"}},
		// The latest snapshot of each line (snapshot.go): compacted, so it
		// holds about one snapshot per item whatever the history's length.
		{Name: Snapshots, Partitions: 3, Configs: map[string]string{
			"cleanup.policy": "compact"}},
	}
}
