// Command k6 is k6 built with waitroom's extensions, exactly what xk6 would
// generate: k6's own entry point with k6/x/sse registered.
package main

import (
	k6cmd "go.k6.io/k6/cmd"

	_ "github.com/waitroom/waitroom/k6/sse" // registers k6/x/sse
)

func main() {
	k6cmd.Execute()
}
