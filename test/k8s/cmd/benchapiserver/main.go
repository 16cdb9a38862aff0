// Command benchapiserver runs a kube-apiserver over an embedded etcd, in a
// process of its own, for benchmarks that measure a client's CPU and heap
// without the server's: bench's BenchmarkK8sStartup starts it as a child.
//
//	benchapiserver -dir DIR -out FILE [-load RECORDS]
//
// etcd keeps its data under DIR/etcd, so that objects loaded by one run
// are there for the next. Once the server is ready, FILE holds its
// address and a bearer token of system:masters as JSON
// ({"host": ..., "token": ...}); the server's certificate is
// self-signed. -load puts the records of RECORDS into etcd before the
// server starts, as the server stores objects: each record is a key and a
// value, each preceded by its length as a 4-byte big-endian number, such
// as "/registry/pods/ns/name" and the Pod in protobuf, "k8s\x00" first;
// once they are, DIR/loaded exists.
// The server stops when standard input closes (the parent
// exited or closed its end) or on SIGINT or SIGTERM.
package main

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/listwatch/mirror/test/k8s/internal/testserver"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"k8s.io/apiserver/pkg/storage/storagebackend"
	"k8s.io/klog/v2"
	kubeapiservertesting "k8s.io/kubernetes/cmd/kube-apiserver/app/testing"
)

const token = "mirror-bench-token"

func main() {
	dir := flag.String("dir", "", "directory of etcd's data and the token file")
	out := flag.String("out", "", "file to write the server's address and token to, once ready")
	load := flag.String("load", "", "file of records to put into etcd before the server starts")
	logs := flag.Bool("logs", false, "write the server's warnings and errors to stderr (to diagnose a benchmark)")
	flag.Parse()
	if *dir == "" || *out == "" {
		fmt.Fprintln(os.Stderr, "benchapiserver: -dir and -out are required")
		os.Exit(2)
	}
	if !*logs {
		quietKlog()
	}
	tb := testserver.NewTB("benchapiserver", "benchapiserver")
	code := 0
	if err := tb.Run(func(tb *testserver.TB) error { return run(tb, *dir, *out, *load) }); err != nil {
		fmt.Fprintln(os.Stderr, "benchapiserver:", err)
		code = 1
	}
	tb.Close()
	os.Exit(code)
}

func run(tb *testserver.TB, dir, out, load string) error {
	etcd, err := testserver.StartEtcd(filepath.Join(dir, "etcd"), testserver.EtcdOptions{
		// 100k realistic Pods are about 1 GB of etcd data with history.
		QuotaBackendBytes: 8 << 30,
		ReadyTimeout:      2 * time.Minute,
	})
	if err != nil {
		return err
	}
	tb.Cleanup(etcd.Stop)
	if load != "" {
		if err := loadRecords(etcd.URL, load); err != nil {
			return fmt.Errorf("load %s: %w", load, err)
		}
		// For the next run, which need not load them again.
		if err := os.WriteFile(filepath.Join(dir, "loaded"), nil, 0o644); err != nil {
			return err
		}
	}
	tokenFile := filepath.Join(dir, "tokens.csv")
	if err := os.WriteFile(tokenFile, []byte(token+`,mirror-bench,mirror-bench,"system:masters"`+"\n"), 0o600); err != nil {
		return err
	}
	storage := storagebackend.NewDefaultConfig("/registry", nil)
	storage.Transport.ServerList = []string{etcd.URL}
	opts := kubeapiservertesting.NewDefaultTestServerOptions()
	opts.EnableCertAuth = false
	opts.DisableInvariantChecks = true
	ts, err := kubeapiservertesting.StartTestServer(tb, opts, []string{
		"--disable-admission-plugins=ServiceAccount",
		"--etcd-compaction-interval=0",
		"--token-auth-file=" + tokenFile,
	}, storage)
	if err != nil {
		return err
	}
	tb.Cleanup(ts.TearDownFn)
	info, err := json.Marshal(map[string]string{"host": ts.ClientConfig.Host, "token": token})
	if err != nil {
		return err
	}
	tmp := out + ".tmp"
	if err := os.WriteFile(tmp, info, 0o600); err != nil {
		return err
	}
	if err := os.Rename(tmp, out); err != nil {
		return err
	}
	done := make(chan struct{})
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		close(done)
	}()
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	select {
	case <-done:
	case <-sig:
	}
	return nil
}

// loadRecords puts the records of file into the etcd at url, up to 1 MB
// to a transaction.
func loadRecords(url, file string) error {
	f, err := os.Open(file)
	if err != nil {
		return err
	}
	defer f.Close()
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{url}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return err
	}
	defer c.Close()
	r := bufio.NewReaderSize(f, 1<<20)
	var ops []clientv3.Op
	size := 0
	flush := func() error {
		if len(ops) == 0 {
			return nil
		}
		_, err := c.Txn(context.Background()).Then(ops...).Commit()
		ops, size = ops[:0], 0
		return err
	}
	for {
		key, err := readRecord(r)
		if err == io.EOF {
			return flush()
		}
		if err != nil {
			return err
		}
		value, err := readRecord(r)
		if err != nil {
			return err
		}
		// etcd takes requests of up to 1.5 MB.
		if size+len(key)+len(value) > 1<<20 {
			if err := flush(); err != nil {
				return err
			}
		}
		ops = append(ops, clientv3.OpPut(string(key), string(value)))
		size += len(key) + len(value)
		if len(ops) == 100 { // etcd takes up to 128 operations a transaction
			if err := flush(); err != nil {
				return err
			}
		}
	}
}

// readRecord reads one length-prefixed field.
func readRecord(r *bufio.Reader) ([]byte, error) {
	var n [4]byte
	if _, err := io.ReadFull(r, n[:]); err != nil {
		return nil, err
	}
	b := make([]byte, binary.BigEndian.Uint32(n[:]))
	if _, err := io.ReadFull(r, b); err != nil {
		return nil, io.ErrUnexpectedEOF
	}
	return b, nil
}

// quietKlog drops the server's logs but for fatal ones.
func quietKlog() {
	var fs flag.FlagSet
	klog.InitFlags(&fs)
	for name, value := range map[string]string{"logtostderr": "false", "alsologtostderr": "false", "stderrthreshold": "FATAL"} {
		if err := fs.Set(name, value); err != nil {
			panic(err)
		}
	}
	klog.SetOutput(io.Discard)
}
