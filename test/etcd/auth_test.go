package etcd

import (
	"context"
	"testing"

	"github.com/listwatch/mirror"
	etcdmirror "github.com/listwatch/mirror/adapters/etcd"
	"github.com/listwatch/mirror/source"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// enableAuth turns on authentication in m's cluster, with a root user and
// a user "reader" (password "pw") that may read /other/ and nothing else.
func enableAuth(t *testing.T, m *member) {
	t.Helper()
	c := newClient(t, m.endpoint())
	ctx := context.Background()
	for _, step := range []func() error{
		func() error { _, err := c.UserAdd(ctx, "root", "rootpw"); return err },
		func() error { _, err := c.UserGrantRole(ctx, "root", "root"); return err },
		func() error { _, err := c.RoleAdd(ctx, "other-reader"); return err },
		func() error {
			_, err := c.RoleGrantPermission(ctx, "other-reader", "/other/", clientv3.GetPrefixRangeEnd("/other/"), clientv3.PermissionType(clientv3.PermRead))
			return err
		},
		func() error { _, err := c.UserAdd(ctx, "reader", "pw"); return err },
		func() error { _, err := c.UserGrantRole(ctx, "reader", "other-reader"); return err },
		func() error { _, err := c.AuthEnable(ctx); return err },
	} {
		require.NoError(t, step())
	}
}

// newUserClient returns a client of m that authenticates as user (none if
// empty), closed when the test ends.
func newUserClient(t *testing.T, m *member, user, password string) *clientv3.Client {
	t.Helper()
	c, err := clientv3.New(clientv3.Config{
		Endpoints:   []string{m.endpoint()},
		DialTimeout: eventTimeout, // authenticating is slow under -race
		Logger:      zap.NewNop(),
		Username:    user,
		Password:    password,
	})
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func TestListWatch_RefusedReadIsPermanent(t *testing.T) {
	t.Parallel()
	m := startEtcd(t)
	enableAuth(t, m)
	ctx := context.Background()
	for _, tc := range []struct {
		name           string
		user, password string
		cause          error
	}{
		{"user without a role on the prefix", "reader", "pw", rpctypes.ErrPermissionDenied},
		{"no credentials", "", "", rpctypes.ErrUserEmpty},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newUserClient(t, m, tc.user, tc.password)
			lw := etcdmirror.New(c, "/p/", etcdmirror.Options{})

			_, err := lw.List(ctx, source.ListOptions{})
			require.ErrorIs(t, err, mirror.ErrPermanent, "list")
			require.ErrorIs(t, err, tc.cause, "list")

			w, err := lw.Watch(ctx, source.WatchOptions{})
			if err == nil {
				t.Cleanup(w.Stop)
				_, err = nextErr(w)
			}
			require.ErrorIs(t, err, mirror.ErrPermanent, "watch")
			require.ErrorIs(t, err, tc.cause, "watch")
			assert.NotErrorIs(t, err, source.ErrUnavailable, "watch")
		})
	}
	t.Run("the reader's own prefix", func(t *testing.T) {
		// The refusals above are about the prefix, not the credentials.
		lw := etcdmirror.New(newUserClient(t, m, "reader", "pw"), "/other/", etcdmirror.Options{})
		list, err := lw.List(ctx, source.ListOptions{})
		require.NoError(t, err)
		w := watch(t, lw, source.WatchOptions{ResourceVersion: list.ResourceVersion})
		_, err = newUserClient(t, m, "root", "rootpw").Put(ctx, "/other/k", "v")
		require.NoError(t, err)
		assert.Equal(t, "/other/k", next(t, w).Object.Key)
	})
}
