package mirror_test

import (
	"context"
	"fmt"

	"github.com/listwatch/mirror"
	"github.com/listwatch/mirror/memsource"
)

type service struct {
	Name string
	Zone string
	Port int
}

// Example mirrors a versioned source into an indexed cache and reacts to
// changes. memsource stands in for etcd or Kubernetes here.
func Example() {
	src := memsource.New(func(s service) (string, error) { return s.Name, nil }, memsource.Options{})
	src.Put(service{Name: "api", Zone: "eu", Port: 443})
	src.Put(service{Name: "db", Zone: "eu", Port: 5432})

	inf := mirror.NewInformer(src, mirror.InformerOptions[string, service]{
		KeyFunc: func(s service) (string, error) { return s.Name, nil },
		Indexers: mirror.Indexers[service]{
			"zone": func(s service) ([]string, error) { return []string{s.Zone}, nil },
		},
	})
	events := make(chan string)
	reg, err := inf.AddEventHandler(mirror.HandlerFuncs[service]{
		AddFunc: func(s service, initial bool) {
			events <- fmt.Sprintf("add %s:%d (initial list: %v)", s.Name, s.Port, initial)
		},
		UpdateFunc: func(old, s service) {
			events <- fmt.Sprintf("update %s: zone %s -> %s", s.Name, old.Zone, s.Zone)
		},
		DeleteFunc: func(s service, finalStateUnknown bool) {
			events <- fmt.Sprintf("delete %s", s.Name)
		},
	}, mirror.HandlerOptions{})
	if err != nil {
		panic(err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- inf.Run(ctx) }()

	fmt.Println(<-events)
	fmt.Println(<-events)
	if err := mirror.WaitForCacheSync(ctx, reg); err != nil {
		panic(err)
	}

	src.Put(service{Name: "db", Zone: "us", Port: 5432})
	fmt.Println(<-events)
	src.Delete("api")
	fmt.Println(<-events)

	inUS, _ := inf.ByIndex("zone", "us")
	fmt.Println("in us:", inUS)

	cancel()
	<-done
	// Output:
	// add api:443 (initial list: true)
	// add db:5432 (initial list: true)
	// update db: zone eu -> us
	// delete api
	// in us: [{db us 5432}]
}

// ExampleReflector mirrors a source by hand: the Reflector lists,
// replaces the queue's content with the list, then applies every watched
// change, and the consumer pops the deltas into its cache. The cache is the
// queue's KnownObjects, so the queue can tell which deletions are news. An
// Informer does all of this for you.
func ExampleReflector() {
	src := memsource.New(func(s service) (string, error) { return s.Name, nil }, memsource.Options{})
	src.Put(service{Name: "api", Zone: "eu", Port: 443})
	src.Put(service{Name: "db", Zone: "eu", Port: 5432})

	keyFunc := func(s service) (string, error) { return s.Name, nil }
	cache := mirror.NewIndexer(keyFunc, nil)
	queue := mirror.NewDeltaFIFO(mirror.DeltaFIFOOptions[string, service]{
		KeyFunc:      keyFunc,
		KnownObjects: cache,
	})
	r := mirror.NewReflector(src, queue, mirror.ReflectorOptions{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		r.Run(ctx)
		close(done)
	}()

	apply := func(key string, deltas mirror.Deltas[service], isInInitialList bool) error {
		for _, d := range deltas {
			fmt.Printf("%s %v (initial list: %v)\n", key, d.Type, isInInitialList)
			if d.Type == mirror.Deleted {
				cache.DeleteKey(key)
			} else {
				cache.Set(key, d.Object)
			}
		}
		return nil
	}
	for range 2 {
		if err := queue.Pop(ctx, apply); err != nil {
			panic(err)
		}
	}
	src.Delete("api")
	if err := queue.Pop(ctx, apply); err != nil {
		panic(err)
	}
	cancel()
	<-done // Run has returned: the version below is final
	fmt.Println("cached:", cache.ListKeys(), "at version", r.Freshness().ResourceVersion)

	// Output:
	// api sync (initial list: true)
	// db sync (initial list: true)
	// api deleted (initial list: false)
	// cached: [db] at version 4
}
