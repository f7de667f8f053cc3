package queue

// MarkSrcForTest is mark.lua's source, for tests that load it alone.
var MarkSrcForTest = markSrc
