package queue

// MarkSrcForTest and EnqueueSrcForTest are the scripts' sources, for tests
// that load one alone and benchmarks that run one outside Apply.
var (
	MarkSrcForTest    = markSrc
	EnqueueSrcForTest = enqueueSrc
	DrawSrcForTest    = withPrelude(drawLua)
)

// EnqueueArgsForTest is the ARGV of one enqueue.lua call of ops (all
// registrations of one item and partition), as Apply and Replay send it.
func EnqueueArgsForTest(ops []Op) []any {
	idx := make([]int, len(ops))
	for i := range idx {
		idx[i] = i
	}
	return enqueueArgs(ops, idx)
}

// EnqueueResultsForTest reads one enqueue.lua call's answer for ops, as
// Apply does.
func EnqueueResultsForTest(vals []any, ops []Op) ([]Result, error) {
	idx := make([]int, len(ops))
	for i := range idx {
		idx[i] = i
	}
	out := make([]Result, len(ops))
	err := parseEnqueue(vals, ops, idx, out, func(i int, err error) { out[i] = Result{Err: err} })
	return out, err
}
