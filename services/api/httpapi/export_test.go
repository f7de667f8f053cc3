package httpapi

// Mount is mount, for the test that holds the served routes to the spec.
var Mount = mount

// KeepStatusBucketsInRedis keeps the status reads' per-token buckets in
// Redis, as every other bucket, until the returned func puts them back in
// memory: the comparison BenchmarkStatusReads makes.
func KeepStatusBucketsInRedis() (restore func()) {
	memKinds = map[string]bool{}
	return func() { memKinds = map[string]bool{byStatus: true} }
}
