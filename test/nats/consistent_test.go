package nats_test

import (
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"

	"github.com/listwatch/mirror"
	natsmirror "github.com/listwatch/mirror/adapters/nats"
	"github.com/listwatch/mirror/source"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestConsistent_ReadsSeeEveryWriteAcknowledgedBeforeThem writes through
// the bucket from several goroutines and, as soon as each write is
// acknowledged, reads the mirror with a consistent read and with a
// read-your-writes read of the key: each sees the write (or a later one
// of the same key), never an older value.
func TestConsistent_ReadsSeeEveryWriteAcknowledgedBeforeThem(t *testing.T) {
	srv := startServer(t)
	_, writer := connect(t, srv.url())
	kv := newBucket(t, writer, jetstream.KeyValueConfig{History: 1})
	_, js := connect(t, srv.url())
	lw := natsmirror.New(js, "mirror", natsmirror.Options{})
	inf, _ := runInformer(t, lw)

	const writers, writes = 4, 50
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for w := range writers {
		wg.Go(func() {
			key := fmt.Sprintf("k%d", w)
			for i := range writes {
				ctx := testContext(t)
				rev, err := kv.Put(ctx, key, []byte(strconv.Itoa(i)))
				if err != nil {
					errs <- err
					return
				}
				r, err := inf.Consistent(ctx, mirror.ConsistentOptions{})
				if err != nil {
					errs <- err
					return
				}
				if o, ok := r.GetByKey(key); !ok || o.Revision < rev {
					errs <- fmt.Errorf("consistent read of %s after revision %d: %+v, %v", key, rev, o, ok)
					return
				}
				if err := inf.RecordWrite(key, strconv.FormatUint(rev, 10)); err != nil {
					errs <- err
					return
				}
				o, ok, err := inf.GetAfterWrite(ctx, key, mirror.ConsistentOptions{})
				if err != nil || !ok || o.Revision < rev {
					errs <- errors.Join(err, fmt.Errorf("read after write of %s at revision %d: %+v, %v", key, rev, o, ok))
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	v, err := lw.CurrentVersion(testContext(t))
	require.NoError(t, err)
	assert.Equal(t, strconv.Itoa(writers*writes), v, "every put is one revision")
}

func TestCompareVersions_OrdersRevisions(t *testing.T) {
	lw := natsmirror.New(nil, "b", natsmirror.Options{})
	c, err := lw.CompareVersions("9", "10")
	require.NoError(t, err)
	assert.Equal(t, -1, c)
	c, err = lw.CompareVersions("0", "0")
	require.NoError(t, err)
	assert.Equal(t, 0, c)
	_, err = lw.CompareVersions("x", "1")
	require.ErrorIs(t, err, source.ErrInvalidVersion)
}
