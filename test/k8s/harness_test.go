package k8s

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/listwatch/mirror/adapters/k8s"
	"github.com/listwatch/mirror/test/k8s/internal/testserver"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/storage/storagebackend"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	kubeapiservertesting "k8s.io/kubernetes/cmd/kube-apiserver/app/testing"
	"k8s.io/kubernetes/test/utils/ktesting"
)

// convergeTimeout bounds every wait for the server or a mirror to catch up.
const convergeTimeout = 60 * time.Second

// token is the bearer token of the clients that reach a cluster through
// its proxy, which the servers of the cluster all accept.
const token = "mirror-test-token"

// nobodyToken is the bearer token of nobodyUser, who belongs to no group
// but system:authenticated: RBAC lets that user read discovery and little
// else, and nothing it may list unless a test grants it.
const (
	nobodyToken = "mirror-nobody-token"
	nobodyUser  = "mirror-nobody"
)

// apiserverFlags are the kube-apiserver flags of every test server, but
// for the token file.
var apiserverFlags = []string{
	// No controller-manager runs to create service accounts.
	"--disable-admission-plugins=ServiceAccount",
	// ConfigMaps are read from etcd, Pods from the watch cache, so that
	// the adapter meets both: continue tokens and compaction from etcd,
	// and the cache's own answers (a version older than its window,
	// streaming lists served from memory).
	"--watch-cache-sizes=configmaps#0",
	// Only the tests compact etcd.
	"--etcd-compaction-interval=0",
	// RBAC rather than the test server's AlwaysAllow, so that a client
	// can be refused (nobodyToken). The token of the other clients is
	// in system:masters, which every request is allowed to.
	"--authorization-mode=RBAC",
	// Shard selectors on lists and watches (KEP-5866), for the sharded
	// caches; no other test sends one.
	"--feature-gates=ShardedListAndWatch=true",
}

func TestMain(m *testing.M) {
	flag.Parse()
	if os.Getenv("MIRROR_K8S_LOGS") == "" {
		// The server logs a great deal through klog; tests report what
		// matters themselves.
		var fs flag.FlagSet
		klog.InitFlags(&fs)
		for name, value := range map[string]string{"logtostderr": "false", "alsologtostderr": "false", "stderrthreshold": "FATAL"} {
			if err := fs.Set(name, value); err != nil {
				panic(err)
			}
		}
		klog.SetOutput(io.Discard)
	}
	code := m.Run()
	stopShared()
	os.Exit(code)
}

// cluster is an embedded etcd with a kube-apiserver over it, reached
// through a proxy so that clients keep one address when the server is
// replaced.
type cluster struct {
	etcd *testserver.Etcd
	// etcdClient reads and compacts etcd directly.
	etcdClient *clientv3.Client
	prefix     string
	proxy      *proxy
	// tokenFile names the token of the proxied clients.
	tokenFile string

	mu     sync.Mutex
	server *kubeapiservertesting.TestServer

	// client, dynamic and config reach the server through the proxy
	// with the token, which makes them a member of system:masters for
	// every server of the cluster.
	config  *rest.Config
	client  kubernetes.Interface
	dynamic dynamic.Interface
}

// startCluster starts etcd and a kube-apiserver, and stops them when tb's
// cleanups run.
func startCluster(tb ktesting.TB) (*cluster, error) {
	e, err := testserver.StartEtcd(tb.TempDir(), testserver.EtcdOptions{ReadyTimeout: convergeTimeout})
	if err != nil {
		return nil, err
	}
	tb.Cleanup(e.Stop)
	c := &cluster{etcd: e, prefix: "/registry-" + strings.ToLower(strings.NewReplacer("/", "-", " ", "-").Replace(tb.Name()))}
	c.etcdClient, err = clientv3.New(clientv3.Config{Endpoints: []string{e.URL}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return nil, err
	}
	tb.Cleanup(func() { _ = c.etcdClient.Close() })
	if c.proxy, err = newProxy(); err != nil {
		return nil, err
	}
	tb.Cleanup(c.proxy.close)
	c.tokenFile = filepath.Join(tb.TempDir(), "tokens.csv")
	tokens := token + `,mirror-test,mirror-test,"system:masters"` + "\n" +
		nobodyToken + "," + nobodyUser + "," + nobodyUser + "\n"
	if err := os.WriteFile(c.tokenFile, []byte(tokens), 0o600); err != nil {
		return nil, err
	}
	if err := c.startServer(tb); err != nil {
		return nil, err
	}
	if err := c.connect(); err != nil {
		return nil, err
	}
	c.config = &rest.Config{
		Host: "https://" + c.proxy.addr,
		// The test server presents a self-signed certificate.
		TLSClientConfig: rest.TLSClientConfig{Insecure: true},
		BearerToken:     token,
		QPS:             1000,
		Burst:           10000,
	}
	if c.client, err = kubernetes.NewForConfig(c.config); err != nil {
		return nil, err
	}
	if c.dynamic, err = dynamic.NewForConfig(c.config); err != nil {
		return nil, err
	}
	return c, nil
}

// startServer starts a kube-apiserver over the cluster's etcd. The server
// stops when tb's cleanups run, unless stopServer stopped it before.
// Clients of the proxy reach it once connect is called.
func (c *cluster) startServer(tb ktesting.TB) error {
	storage := storagebackend.NewDefaultConfig(c.prefix, nil)
	storage.Transport.ServerList = []string{c.etcd.URL}
	opts := kubeapiservertesting.NewDefaultTestServerOptions()
	opts.EnableCertAuth = false
	opts.DisableInvariantChecks = true
	flags := append(slices.Clip(apiserverFlags), "--token-auth-file="+c.tokenFile)
	ts, err := kubeapiservertesting.StartTestServer(tb, opts, flags, storage)
	if err != nil {
		return err
	}
	var once sync.Once
	stop := ts.TearDownFn
	ts.TearDownFn = func() { once.Do(stop) }
	c.mu.Lock()
	c.server = &ts
	c.mu.Unlock()
	// Clients that outlive the server (informers stopped by later
	// cleanups) would hold its shutdown up for a minute.
	tb.Cleanup(func() {
		c.mu.Lock()
		current := c.server == &ts
		c.mu.Unlock()
		if current {
			c.stopServer()
		}
		ts.TearDownFn()
	})
	return nil
}

// connect points the proxy at the current server.
func (c *cluster) connect() error {
	c.mu.Lock()
	host, err := url.Parse(c.server.ClientConfig.Host)
	c.mu.Unlock()
	if err != nil {
		return err
	}
	return c.proxy.up(host.Host)
}

// stopServer makes the server unreachable, as a stopped server is (its
// connections close, new ones are refused), then stops it.
func (c *cluster) stopServer() {
	c.proxy.down()
	c.mu.Lock()
	ts := c.server
	c.server = nil
	c.mu.Unlock()
	ts.TearDownFn()
}

// clientWithToken returns a client that reaches the cluster through its
// proxy as the user whose bearer token is tok.
func (c *cluster) clientWithToken(t testing.TB, tok string) kubernetes.Interface {
	t.Helper()
	config := rest.CopyConfig(c.config)
	config.BearerToken = tok
	cs, err := kubernetes.NewForConfig(config)
	require.NoError(t, err)
	return cs
}

// admin returns a client that reaches the current server directly, with
// the server's own credentials.
func (c *cluster) admin(t testing.TB) kubernetes.Interface {
	c.mu.Lock()
	defer c.mu.Unlock()
	require.NotNil(t, c.server, "no server is running")
	return kubernetes.NewForConfigOrDie(c.server.ClientConfig)
}

// currentRevision is etcd's newest revision: the newest resource version
// of every object the server stores.
func (c *cluster) currentRevision(t testing.TB) int64 {
	t.Helper()
	resp, err := c.etcdClient.Get(context.Background(), "compact-probe")
	require.NoError(t, err)
	return resp.Header.Revision
}

// compact compacts etcd at its newest revision, so that no resource
// version before it can be read or watched from etcd.
func (c *cluster) compact(t testing.TB) {
	t.Helper()
	_, err := c.etcdClient.Compact(context.Background(), c.currentRevision(t), clientv3.WithCompactPhysical())
	require.NoError(t, err)
}

// scope is one test's part of a cluster: a namespace of its own, and a
// label that marks the test's objects in any namespace, which the test's
// ListWatchers select.
type scope struct {
	ns       string
	labels   map[string]string
	selector string
}

// scope creates a namespace for t and names the label of t's objects after
// it.
func (c *cluster) scope(t testing.TB) scope {
	t.Helper()
	ns := c.namespace(t)
	return scope{ns: ns, labels: map[string]string{"mirror-test": ns}, selector: "mirror-test=" + ns}
}

// options are the adapter's options that select s's objects.
func (s scope) options() k8s.Options { return k8s.Options{LabelSelector: s.selector} }

var namespaces atomic.Int64

// namespace creates a namespace of its own for a test. Namespaces are not
// deleted: no namespace controller runs to empty them.
func (c *cluster) namespace(t testing.TB) string {
	t.Helper()
	name := fmt.Sprintf("t%d-%s", namespaces.Add(1), strings.ToLower(t.Name()))
	name = strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			return r
		}
		return '-'
	}, name)
	name = strings.TrimRight(name[:min(len(name), 63)], "-")
	_, err := c.client.CoreV1().Namespaces().Create(context.Background(),
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	require.NoError(t, err)
	return name
}

// shared is the cluster most tests use, started by the first test that
// asks for it and stopped after the last.
var shared struct {
	once    sync.Once
	tb      *testserver.TB
	cluster *cluster
	err     error
}

// sharedCluster returns the shared cluster, starting it if needed.
func sharedCluster(t testing.TB) *cluster {
	t.Helper()
	shared.once.Do(func() {
		shared.tb = testserver.NewTB("Shared", "shared cluster")
		shared.err = shared.tb.Run(func(tb *testserver.TB) (err error) {
			shared.cluster, err = startCluster(tb)
			return err
		})
	})
	require.NoError(t, shared.err, "start the shared cluster")
	return shared.cluster
}

// stopShared stops the shared cluster if a test started it.
func stopShared() {
	if shared.tb != nil {
		shared.tb.Close()
	}
}
