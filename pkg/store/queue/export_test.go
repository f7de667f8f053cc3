package queue

// MarkSrcForTest and EnqueueSrcForTest are the scripts' sources, for tests
// that load one alone and benchmarks that run one outside Apply.
var (
	MarkSrcForTest    = markSrc
	EnqueueSrcForTest = enqueueSrc
	DrawSrcForTest    = withPrelude(drawLua)
)
