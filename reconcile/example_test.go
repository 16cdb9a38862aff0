package reconcile_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"

	"github.com/listwatch/mirror"
	"github.com/listwatch/mirror/memsource"
	"github.com/listwatch/mirror/reconcile"
)

type service struct {
	Name, Zone string
	Port       int
}

// Example keeps a table of endpoints in step with the services an
// informer mirrors: each key that changes is reconciled by reading the
// service's current state from the cache, its deletion included.
func Example() {
	keyFunc := func(s service) (string, error) { return s.Name, nil }
	src := memsource.New(keyFunc, memsource.Options{})
	src.Put(service{Name: "api", Zone: "eu", Port: 443})
	src.Put(service{Name: "db", Zone: "eu", Port: 5432})
	inf := mirror.NewInformer(src, mirror.InformerOptions[string, service]{KeyFunc: keyFunc})

	endpoints := map[string]string{} // what the loop keeps in step
	reconciled := make(chan struct{})
	loop := reconcile.New(reconcile.Func[string](func(ctx context.Context, key string) (reconcile.Result, error) {
		if s, ok := inf.GetByKey(key); ok {
			endpoints[key] = fmt.Sprintf("%s.%s:%d", s.Name, s.Zone, s.Port)
			fmt.Println("reconcile", key, "->", endpoints[key])
		} else {
			delete(endpoints, key)
			fmt.Println("reconcile", key, "-> gone")
		}
		reconciled <- struct{}{}
		return reconcile.Result{}, nil
	}), reconcile.Options{Name: "endpoints"}) // one worker: no locking needed
	if _, err := reconcile.Watch(loop, inf, mirror.HandlerOptions{}); err != nil {
		panic(err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { inf.Run(ctx) })
	wg.Go(func() { loop.Run(ctx) })
	<-reconciled // the initial list: api, db
	<-reconciled
	src.Delete("db")
	<-reconciled
	src.Put(service{Name: "api", Zone: "us", Port: 8443})
	<-reconciled
	cancel()
	wg.Wait()

	for _, k := range slices.Sorted(maps.Keys(endpoints)) {
		fmt.Println(k, endpoints[k])
	}
	// Output:
	// reconcile api -> api.eu:443
	// reconcile db -> db.eu:5432
	// reconcile db -> gone
	// reconcile api -> api.us:8443
	// api api.us:8443
}
