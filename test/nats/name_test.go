package nats_test

import (
	"context"
	"sync"
	"testing"
	"time"

	natsmirror "github.com/listwatch/mirror/adapters/nats"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// An informer from natsmirror.NewInformer is named after its bucket
// unless the caller names it, so that its errors say which bucket they
// are about. A bucket that does not exist gives it one to report.
func TestNewInformer_NamedAfterItsBucketUnlessNamed(t *testing.T) {
	s := startServer(t)
	_, js := connect(t, s.url())
	for _, tc := range []struct {
		name, given, want string
	}{
		{name: "unnamed", want: `mirror: reflector "absent": `},
		{name: "named by the caller", given: "mine", want: `mirror: reflector "mine": `},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var mu sync.Mutex
			var first error
			inf := natsmirror.NewInformer(natsmirror.New(js, "absent", natsmirror.Options{}), natsmirror.InformerOptions[[]byte]{
				Name: tc.given,
				ErrorHandler: func(err error) {
					mu.Lock()
					defer mu.Unlock()
					if first == nil {
						first = err
					}
				},
			})
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- inf.Run(ctx) }()
			defer func() {
				cancel()
				assert.NoError(t, <-done)
			}()
			require.Eventually(t, func() bool {
				mu.Lock()
				defer mu.Unlock()
				return first != nil
			}, 30*time.Second, 10*time.Millisecond)
			mu.Lock()
			defer mu.Unlock()
			assert.ErrorContains(t, first, tc.want)
		})
	}
}
