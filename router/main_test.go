package router_test

import (
	"testing"

	"github.com/flybus/flybus/internal/bustest"
)

// TestMain removes the flybus binary the process tests build.
func TestMain(m *testing.M) { bustest.Main(m) }
