package nats_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"net"
	"os"
	"time"

	"github.com/listwatch/mirror"
	natsmirror "github.com/listwatch/mirror/adapters/nats"
	"github.com/listwatch/mirror/source"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Service is what the examples keep in their bucket, as JSON.
type Service struct {
	Addr string `json:"addr"`
}

func decodeService(_ string, v []byte) (Service, error) {
	var s Service
	err := json.Unmarshal(v, &s)
	return s, err
}

// This example mirrors a bucket into an informer and prints what its
// handler is told. startExampleServer stands in for a real server: it starts a
// nats-server in the process, and returns its URL.
func Example() {
	url, stop := startExampleServer()
	defer stop()
	nc, err := nats.Connect(url)
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		log.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "services", History: 5})
	if err != nil {
		log.Fatal(err)
	}
	if _, err := kv.PutString(ctx, "api", `{"addr": "10.0.0.1:443"}`); err != nil {
		log.Fatal(err)
	}

	lw := natsmirror.NewTyped(js, "services", decodeService, natsmirror.Options{})
	inf := natsmirror.NewInformer(lw, natsmirror.InformerOptions[Service]{})
	events := make(chan string)
	reg, err := inf.AddEventHandler(mirror.HandlerFuncs[natsmirror.Object[Service]]{
		AddFunc: func(o natsmirror.Object[Service], initial bool) {
			events <- fmt.Sprintf("add %s %s (initial list: %t)", o.Key, o.Value.Addr, initial)
		},
		UpdateFunc: func(old, o natsmirror.Object[Service]) {
			events <- fmt.Sprintf("update %s %s -> %s", o.Key, old.Value.Addr, o.Value.Addr)
		},
		DeleteFunc: func(o natsmirror.Object[Service], finalStateUnknown bool) {
			events <- fmt.Sprintf("delete %s, last at %s", o.Key, o.Value.Addr)
		},
	}, mirror.HandlerOptions{})
	if err != nil {
		log.Fatal(err)
	}
	done := make(chan error)
	go func() { done <- inf.Run(ctx) }()
	defer func() {
		cancel()
		<-done // Run returns once nothing it started runs
	}()
	fmt.Println(<-events)
	if err := mirror.WaitForCacheSync(ctx, reg); err != nil {
		log.Fatal(err)
	}

	if _, err := kv.PutString(ctx, "api", `{"addr": "10.0.0.2:443"}`); err != nil {
		log.Fatal(err)
	}
	fmt.Println(<-events)
	// Deleted and created again: a deletion, then an addition.
	if err := kv.Delete(ctx, "api"); err != nil {
		log.Fatal(err)
	}
	if _, err := kv.PutString(ctx, "api", `{"addr": "10.0.0.3:443"}`); err != nil {
		log.Fatal(err)
	}
	fmt.Println(<-events)
	fmt.Println(<-events)
	// Output:
	// add api 10.0.0.1:443 (initial list: true)
	// update api 10.0.0.1:443 -> 10.0.0.2:443
	// delete api, last at 10.0.0.2:443
	// add api 10.0.0.3:443 (initial list: false)
}

// This example lists a bucket and then watches it from the list's
// revision, as a Reflector does, without an informer.
func Example_listThenWatch() {
	url, stop := startExampleServer()
	defer stop()
	nc, err := nats.Connect(url)
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ctx := context.Background()
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "config"})
	if err != nil {
		log.Fatal(err)
	}
	_, _ = kv.PutString(ctx, "mode", "blue")

	lw := natsmirror.New(js, "config", natsmirror.Options{})
	list, err := lw.List(ctx, source.ListOptions{})
	if err != nil {
		log.Fatal(err)
	}
	for _, o := range list.Items {
		fmt.Printf("listed %s=%s at rev %d\n", o.Key, o.Value, o.Revision)
	}
	w, err := lw.Watch(ctx, source.WatchOptions{ResourceVersion: list.ResourceVersion})
	if err != nil {
		log.Fatal(err)
	}
	defer w.Stop()
	_, _ = kv.PutString(ctx, "mode", "green")
	_ = kv.Delete(ctx, "mode")
	for range 2 {
		ev, err := w.Next(ctx)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("%s %s=%s at rev %s\n", ev.Type, ev.Object.Key, ev.Object.Value, ev.ResourceVersion)
	}
	// Output:
	// listed mode=blue at rev 1
	// updated mode=green at rev 2
	// deleted mode= at rev 3
}

// startExampleServer starts a nats-server with JetStream on a loopback
// port and a temporary directory, and returns its URL and a function that
// stops it.
func startExampleServer() (url string, stop func()) {
	dir, err := os.MkdirTemp("", "nats-example-")
	if err != nil {
		log.Fatal(err)
	}
	srv, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: dir, NoLog: true, NoSigs: true})
	if err != nil {
		log.Fatal(err)
	}
	srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		log.Fatal("nats-server not ready")
	}
	return fmt.Sprintf("nats://127.0.0.1:%d", srv.Addr().(*net.TCPAddr).Port), func() {
		srv.Shutdown()
		srv.WaitForShutdown()
		_ = os.RemoveAll(dir)
	}
}
