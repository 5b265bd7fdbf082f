package store

import (
	"testing"

	"github.com/pinplan/pinplan/internal/storetest"
)

// TestContract runs the suite both stores pass (DESIGN §14).
func TestContract(t *testing.T) {
	storetest.Run(t, func(t *testing.T) storetest.Store { return openTemp(t) }, nil)
}
