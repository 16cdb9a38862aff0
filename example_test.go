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
	src := memsource.New(func(s service) string { return s.Name }, memsource.Options{})
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
