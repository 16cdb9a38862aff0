package nats_test

import (
	"testing"
	"time"

	"github.com/listwatch/mirror"
	natsmirror "github.com/listwatch/mirror/adapters/nats"
	"github.com/listwatch/mirror/source"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
)

func TestListWatch_UserWithoutPermissionIsPermanent(t *testing.T) {
	ctx := testContext(t)
	srv := startServerOpts(t, server.Options{Users: []*server.User{
		{Username: "admin", Password: "admin"},
		{Username: "reader", Password: "reader", Permissions: &server.Permissions{
			Publish: &server.SubjectPermission{Deny: []string{"$JS.API.>"}},
		}},
	}})
	_, admin := connect(t, srv.url(), nats.UserInfo("admin", "admin"))
	kv := newBucket(t, admin, jetstream.KeyValueConfig{})
	put(t, kv, "a", "1")

	_, js := connect(t, srv.url(), nats.UserInfo("reader", "reader"))
	lw := natsmirror.New(js, "mirror", natsmirror.Options{RequestTimeout: 500 * time.Millisecond})
	_, err := lw.List(ctx, source.ListOptions{})
	t.Log(err)
	require.ErrorIs(t, err, mirror.ErrPermanent)
	_, err = lw.Watch(ctx, source.WatchOptions{})
	t.Log(err)
	require.ErrorIs(t, err, mirror.ErrPermanent)
}
