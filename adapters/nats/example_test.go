package nats_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log"

	"github.com/listwatch/mirror"
	natsmirror "github.com/listwatch/mirror/adapters/nats"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Service is what the example keeps in its bucket, as JSON.
type Service struct {
	Addr string `json:"addr"`
}

// This example mirrors the bucket "services" of a server into an informer
// and prints what its handler is told. It needs a server with JetStream
// at nats://127.0.0.1:4222; test/nats runs the same example, with its
// output checked, against a nats-server it starts.
func Example() {
	nc, err := nats.Connect("nats://127.0.0.1:4222")
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

	lw := natsmirror.NewTyped(js, "services", func(_ string, v []byte) (Service, error) {
		var s Service
		return s, json.Unmarshal(v, &s)
	}, natsmirror.Options{})
	inf := natsmirror.NewInformer(lw, natsmirror.InformerOptions[Service]{})
	reg, err := inf.AddEventHandler(mirror.HandlerFuncs[natsmirror.Object[Service]]{
		AddFunc: func(o natsmirror.Object[Service], initial bool) {
			fmt.Printf("add %s %s (initial list: %t)\n", o.Key, o.Value.Addr, initial)
		},
		UpdateFunc: func(old, o natsmirror.Object[Service]) {
			fmt.Printf("update %s %s -> %s\n", o.Key, old.Value.Addr, o.Value.Addr)
		},
		DeleteFunc: func(o natsmirror.Object[Service], finalStateUnknown bool) {
			fmt.Printf("delete %s, last at %s\n", o.Key, o.Value.Addr)
		},
	}, mirror.HandlerOptions{})
	if err != nil {
		log.Fatal(err)
	}
	go func() { _ = inf.Run(ctx) }()
	if err := mirror.WaitForCacheSync(ctx, reg); err != nil {
		log.Fatal(err) // the bucket missing or the user refused: mirror.ErrPermanent
	}
	if o, ok := inf.GetByKey("api"); ok {
		fmt.Println("api is at", o.Value.Addr, "since revision", o.Revision)
	}
}
