package mirror_test

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"

	"github.com/listwatch/mirror"
	"github.com/listwatch/mirror/memsource"
)

// ExampleInformer_Consistent reads a mirror right after writing to its
// source: the read waits until the mirror has every change made before
// it. memsource stands in for etcd or Kubernetes here.
func ExampleInformer_Consistent() {
	src := memsource.New(func(s service) (string, error) { return s.Name, nil }, memsource.Options{})
	inf := mirror.NewInformer(src, mirror.InformerOptions[string, service]{
		KeyFunc: func(s service) (string, error) { return s.Name, nil },
		Logger:  slog.New(slog.DiscardHandler),
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- inf.Run(ctx) }()

	src.Put(service{Name: "api", Zone: "eu", Port: 443})
	r, err := inf.Consistent(ctx, mirror.ConsistentOptions{})
	if err != nil {
		panic(err) // a *StaleError wrapping ErrNotCurrent after 3 s
	}
	api, ok := r.GetByKey("api")
	fmt.Println(api.Port, ok)

	cancel()
	<-done
	// Output:
	// 443 true
}

// ExampleInformer_GetAfterWrite records the version a write got, and
// reads that key only once the mirror has the write: read-your-writes
// for one key.
func ExampleInformer_GetAfterWrite() {
	src := memsource.New(func(s service) (string, error) { return s.Name, nil }, memsource.Options{})
	inf := mirror.NewInformer(src, mirror.InformerOptions[string, service]{
		KeyFunc: func(s service) (string, error) { return s.Name, nil },
		Logger:  slog.New(slog.DiscardHandler),
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- inf.Run(ctx) }()
	if err := inf.WaitForSync(ctx); err != nil {
		panic(err)
	}

	rev, err := src.Put(service{Name: "db", Zone: "us", Port: 5432})
	if err != nil {
		panic(err)
	}
	if err := inf.RecordWrite("db", strconv.FormatInt(rev, 10)); err != nil {
		panic(err)
	}
	db, ok, err := inf.GetAfterWrite(ctx, "db", mirror.ConsistentOptions{})
	if err != nil {
		panic(err)
	}
	fmt.Println(db.Zone, ok, inf.WriteApplied("db"))

	cancel()
	<-done
	// Output:
	// us true true
}

// ExampleInformer_WaitForVersion waits until the mirror has applied a
// version of its source.
func ExampleInformer_WaitForVersion() {
	src := memsource.New(func(s service) (string, error) { return s.Name, nil }, memsource.Options{})
	inf := mirror.NewInformer(src, mirror.InformerOptions[string, service]{
		KeyFunc: func(s service) (string, error) { return s.Name, nil },
		Logger:  slog.New(slog.DiscardHandler),
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- inf.Run(ctx) }()

	src.Put(service{Name: "api", Port: 80})
	rev, _ := src.Put(service{Name: "api", Port: 8080})
	if err := inf.WaitForVersion(ctx, strconv.FormatInt(rev, 10)); err != nil {
		panic(err)
	}
	api, _ := inf.GetByKey("api")
	fmt.Println(api.Port, inf.Freshness().ResourceVersion)

	cancel()
	<-done
	// Output:
	// 8080 3
}
