package nats_test

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	natsmirror "github.com/listwatch/mirror/adapters/nats"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// purgeAll makes PurgeDeletes remove every deletion marker, however recent.
var purgeAll = jetstream.DeleteMarkersOlderThan(-1)

// TestInformer_RandomRunMatchesTheBucket writes, deletes, purges and
// re-creates keys, and purges deletions (PurgeDeletes), at random while
// the mirror is cut off from the server and restored at random, and the
// server restarted once. It ends with a quiet cut-off: a key deleted while
// the mirror is cut off, its deletion the bucket's last revision, purged
// by PurgeDeletes, and nothing written after. It then checks the mirror
// against the bucket's own state: the cache and what the handler was told
// both equal it, no notification contradicts the one before, and a key
// that never left the bucket was never reported deleted.
func TestInformer_RandomRunMatchesTheBucket(t *testing.T) {
	for _, history := range []uint8{1, 4} {
		t.Run(fmt.Sprintf("history %d", history), func(t *testing.T) {
			seed := uint64(time.Now().UnixNano())
			t.Logf("seed %d", seed)
			rng := rand.New(rand.NewPCG(seed, 0))

			srv := startServer(t)
			px := startProxy(t, srv.srv.Addr().String())
			_, writer := connect(t, srv.url())
			kv := newBucket(t, writer, jetstream.KeyValueConfig{History: history})
			const keys = 16
			key := func() string { return fmt.Sprintf("k%02d", rng.IntN(keys)) }
			for range keys / 2 {
				put(t, kv, key(), "v0")
			}
			_, js := connect(t, px.url())
			lw := natsmirror.New(js, "mirror", natsmirror.Options{})
			inf, rec := runInformer(t, lw)

			left := map[string]bool{} // keys deleted or purged at least once
			write := func(op func() error) {
				t.Helper()
				require.Eventually(t, func() bool { return op() == nil }, 30*time.Second, 10*time.Millisecond)
			}
			for i := range 400 {
				k := key()
				switch r := rng.IntN(100); {
				case r < 60:
					write(func() error { _, err := kv.PutString(t.Context(), k, fmt.Sprint("v", i)); return err })
				case r < 75:
					write(func() error { return kv.Delete(t.Context(), k) })
					left[k] = true
				case r < 85:
					write(func() error { return kv.Purge(t.Context(), k) })
					left[k] = true
				case r < 90:
					write(func() error { return kv.PurgeDeletes(t.Context(), purgeAll) })
				default:
					px.setCut(rng.IntN(2) == 0)
				}
				if i == 200 {
					srv.restart()
				}
			}
			px.setCut(false)
			waitCurrent(t, kv, rec) // the mirror holds zz

			// The quiet cut-off: no later write reveals that the
			// deletion of zz is gone.
			px.setCut(true)
			write(func() error { return kv.Delete(t.Context(), "zz") })
			left["zz"] = true
			write(func() error { return kv.PurgeDeletes(t.Context(), purgeAll) })
			px.setCut(false)

			want := bucketState(t, kv)
			require.NotContains(t, want, "zz")
			require.Eventually(t, func() bool {
				return maps.Equal(want, cacheState(inf)) && maps.Equal(want, rec.snapshot())
			}, 30*time.Second, 5*time.Millisecond, "the mirror never converged")
			assert.Equal(t, want, cacheState(inf))
			assert.Equal(t, want, rec.snapshot())
			assert.Empty(t, rec.errs)
			for k := range rec.notes {
				if left[k] {
					continue
				}
				for _, n := range rec.since(k, 0) {
					assert.False(t, strings.HasPrefix(n, "delete"), "%s never left the bucket, yet: %v", k, rec.since(k, 0))
				}
			}
			t.Logf("stats: %+v", lw.Stats())
		})
	}
}
