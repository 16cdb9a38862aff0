package mirror_test

import (
	"context"
	"fmt"

	"github.com/listwatch/mirror"
	"github.com/listwatch/mirror/memsource"
	"github.com/listwatch/mirror/reconcile"
	"github.com/listwatch/mirror/workqueue"
)

// ExampleInformer_AddChangeHandler feeds a controller's workqueue: each
// change queues its key at the priority of its origin, so that a live
// change is reconciled ahead of the keys of the initial list queued
// before it.
func ExampleInformer_AddChangeHandler() {
	keyFunc := func(s service) (string, error) { return s.Name, nil }
	src := memsource.New(keyFunc, memsource.Options{})
	src.Put(service{Name: "api", Zone: "eu", Port: 443})
	src.Put(service{Name: "db", Zone: "eu", Port: 5432})
	inf := mirror.NewInformer(src, mirror.InformerOptions[string, service]{KeyFunc: keyFunc})

	q := workqueue.New[string](workqueue.Options{})
	seen := make(chan string)
	reg, err := inf.AddChangeHandler(func(c mirror.Change[string, service]) {
		q.AddWithPriority(c.Key, reconcile.DefaultPriority(c.Origin))
		seen <- fmt.Sprintf("%v %v %s", c.Origin, c.Type, c.Key)
	}, mirror.HandlerOptions{})
	if err != nil {
		panic(err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- inf.Run(ctx) }()
	fmt.Println(<-seen)
	fmt.Println(<-seen)
	if err := mirror.WaitForCacheSync(ctx, reg); err != nil {
		panic(err)
	}
	src.Put(service{Name: "cache", Zone: "eu", Port: 6379})
	fmt.Println(<-seen)

	for range 3 { // a worker, the reconcile loop's
		key, err := q.Get(ctx)
		if err != nil {
			panic(err)
		}
		fmt.Println("reconcile", key)
		q.Forget(key)
		q.Done(key)
	}
	q.ShutDown()
	cancel()
	<-done
	// Output:
	// initial-list added api
	// initial-list added db
	// live added cache
	// reconcile cache
	// reconcile api
	// reconcile db
}
