package queue_test

import (
	"os"
	"testing"

	"github.com/waitroom/waitroom/pkg/foundation/testenv"
)

// Under WR_TEST_REDIS=cluster the package's tests share one Redis Cluster,
// emptied for each (testenv.Main).
func TestMain(m *testing.M) { os.Exit(testenv.Main(m)) }
