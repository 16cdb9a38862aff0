package main

import (
	"bytes"
	"context"
	"net"
	"testing"
	"time"

	"github.com/listwatch/mirror/examples/internal/cli/clitest"
	"github.com/listwatch/mirror/examples/internal/embedetcd"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// clusterEtcd starts an embedded etcd for a test of --endpoints, with the
// keys given, and returns its endpoint and a client of it.
func clusterEtcd(t *testing.T, keys ...string) (string, *clientv3.Client) {
	t.Helper()
	noEtcdctlEnv(t)
	srv, err := embedetcd.Start(t.Context(), "etcd-mirror-test")
	require.NoError(t, err)
	t.Cleanup(srv.Close)
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{srv.Endpoint}, Logger: zap.NewNop()})
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	for _, k := range keys {
		_, err := c.Put(t.Context(), k, `{"name":"x","zone":"eu","port":1}`)
		require.NoError(t, err)
	}
	return srv.Endpoint, c
}

// noEtcdctlEnv keeps the credentials of the environment the tests run in
// out of them.
func noEtcdctlEnv(t *testing.T) {
	t.Setenv("ETCDCTL_USER", "")
	t.Setenv("ETCDCTL_PASSWORD", "")
}

// runUntil runs the program with args until it prints marker, then
// interrupts it, and returns what it returned and printed.
func runUntil(t *testing.T, marker string, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	out := clitest.CancelAt(marker, cancel)
	err := run(ctx, args, out)
	return out.String(), err
}

func TestParseFlags_UserAndPasswordAsEtcdctlTakesThem(t *testing.T) {
	const ep = "http://127.0.0.1:2379"
	for _, tc := range []struct {
		name           string
		args           []string
		env            map[string]string
		user, password string
		err            string
	}{
		{name: "flags", args: []string{"--endpoints", ep, "--user", "root", "--password", "pw"}, user: "root", password: "pw"},
		{name: "name:password", args: []string{"--endpoints", ep, "--user", "root:p:w"}, user: "root", password: "p:w"},
		{name: "environment", args: []string{"--endpoints", ep},
			env: map[string]string{"ETCDCTL_USER": "root", "ETCDCTL_PASSWORD": "pw"}, user: "root", password: "pw"},
		{name: "name:password in the environment", args: []string{"--endpoints", ep},
			env: map[string]string{"ETCDCTL_USER": "root:pw"}, user: "root", password: "pw"},
		{name: "flags win over the environment", args: []string{"--endpoints", ep, "--user", "me", "--password", "mine"},
			env: map[string]string{"ETCDCTL_USER": "root", "ETCDCTL_PASSWORD": "pw"}, user: "me", password: "mine"},
		{name: "no credentials", args: []string{"--endpoints", ep}},
		{name: "a user without a password", args: []string{"--endpoints", ep, "--user", "root"}, err: "needs a password"},
		{name: "a password without a user", args: []string{"--endpoints", ep, "--password", "pw"}, err: "--password needs --user"},
		{name: "the demo has no users", args: []string{"--user", "root:pw"}, err: "need --endpoints"},
		{name: "the demo ignores the environment", env: map[string]string{"ETCDCTL_USER": "root:pw"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			noEtcdctlEnv(t)
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			var out bytes.Buffer
			cfg, err := parseFlags(tc.args, &out)
			if tc.err != "" {
				require.ErrorContains(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.user, cfg.user)
			assert.Equal(t, tc.password, cfg.password)
		})
	}
}

// A cluster with password authentication is mirrored with --user and
// --password; credentials it refuses end the run at once, saying so.
func TestRun_ClusterWithPasswordAuthentication(t *testing.T) {
	endpoint, c := clusterEtcd(t, "/app/a", "/app/b")
	_, err := c.UserAdd(t.Context(), "root", "secret")
	require.NoError(t, err)
	_, _ = c.RoleAdd(t.Context(), "root") // etcd may have it already
	_, err = c.UserGrantRole(t.Context(), "root", "root")
	require.NoError(t, err)
	_, err = c.AuthEnable(t.Context())
	require.NoError(t, err)

	t.Run("right password", func(t *testing.T) {
		out, err := runUntil(t, "synced", "--endpoints", endpoint, "--prefix", "/app/", "--user", "root", "--password", "secret")
		require.NoError(t, err, out)
		assert.Contains(t, out, "synced 2 keys")
		assert.Contains(t, out, "summary: 2 keys mirrored")
	})
	t.Run("from the environment", func(t *testing.T) {
		t.Setenv("ETCDCTL_USER", "root:secret")
		out, err := runUntil(t, "synced", "--endpoints", endpoint, "--prefix", "/app/")
		require.NoError(t, err, out)
		assert.Contains(t, out, "synced 2 keys")
	})
	t.Run("wrong password", func(t *testing.T) {
		out, err := runUntil(t, "synced", "--endpoints", endpoint, "--prefix", "/app/", "--user", "root", "--password", "wrong")
		require.Error(t, err, out)
		assert.ErrorContains(t, err, `connect to etcd as "root"`)
		assert.ErrorContains(t, err, "authentication failed")
	})
	t.Run("no credentials", func(t *testing.T) {
		out, err := runUntil(t, "synced", "--endpoints", endpoint, "--prefix", "/app/")
		require.Error(t, err, out)
		assert.ErrorContains(t, err, "etcd refuses the mirror")
		assert.ErrorContains(t, err, "user name is empty")
	})
}

// etcd prefixes are byte prefixes: "/app/config" takes in
// "/app/configuration/z" too, which the program warns about; and a prefix
// with no keys is more likely a mistake than a fact, which it says too.
func TestRun_WarnsAboutPrefixMistakes(t *testing.T) {
	endpoint, _ := clusterEtcd(t, "/app/config/a", "/app/configuration/z")
	for _, tc := range []struct {
		prefix  string
		synced  string
		warning string
	}{
		{"/app/config", "synced 2 keys",
			`warning: --prefix "/app/config" does not end in "/", so it also mirrors keys such as "/app/config-old" and "/app/configuration/x"; for only the keys under it, use --prefix "/app/config/"`},
		{"/app/config/", "synced 1 key", ""},
		{"/app/nothing/", "synced 0 keys", `warning: no keys under "/app/nothing/": is the prefix right?`},
	} {
		t.Run(tc.prefix, func(t *testing.T) {
			out, err := runUntil(t, "synced", "--endpoints", endpoint, "--prefix", tc.prefix)
			require.NoError(t, err, out)
			assert.Contains(t, out, tc.synced)
			if tc.warning == "" {
				assert.NotContains(t, out, "warning")
			} else {
				assert.Contains(t, out, tc.warning)
			}
		})
	}
}

// Ctrl-C (or SIGTERM) is a normal stop, whatever the mode, even before the
// first sync: the summary so far, and success.
func TestRun_InterruptIsANormalStopInEitherModeEvenBeforeTheFirstSync(t *testing.T) {
	noEtcdctlEnv(t)
	for _, tc := range []struct {
		name   string
		marker string
		args   []string
	}{
		{"cluster, before the first sync", "waiting for the first sync",
			[]string{"--endpoints", "http://" + silentServer(t)}},
		{"demo, before the first sync", "seeded 100 keys", []string{"--seed", "100"}},
		{"demo, after the first sync", "synced 100 keys", []string{"--seed", "100", "--changes", "100000000"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := runUntil(t, tc.marker, tc.args...)
			require.NoError(t, err, out)
			assert.Contains(t, out, "interrupted")
			assert.Contains(t, out, "summary: ")
		})
	}
}

// An etcd the program cannot reach fails the run once --sync-timeout is
// over, saying why etcd did not answer, whether the program waited for
// the first sync or, with credentials, to authenticate.
func TestRun_FirstSyncTimeoutFailsSayingWhy(t *testing.T) {
	noEtcdctlEnv(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	endpoint := "http://" + ln.Addr().String()
	require.NoError(t, ln.Close())

	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		// The example's requests time out after 5s: the first failure,
		// which says why, comes then.
		{"waiting for the first sync", []string{"--sync-timeout", "7s"},
			"not synced within --sync-timeout 7s; last failure: "},
		{"authenticating", []string{"--sync-timeout", "1s", "--user", "root:pw"},
			`connect to etcd as "root": not authenticated within --sync-timeout 1s: `},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := runUntil(t, "no marker", append([]string{"--endpoints", endpoint}, tc.args...)...)
			require.Error(t, err, out)
			assert.ErrorContains(t, err, tc.want)
			assert.ErrorContains(t, err, "cannot connect (connection refused)")
		})
	}
}
