package etcd_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"time"

	"github.com/listwatch/mirror"
	"github.com/listwatch/mirror/adapters/etcd"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Service is what the example keeps under /services/, as JSON.
type Service struct {
	Addr string `json:"addr"`
}

// This example lists /services/ into a map and keeps it up to date. A
// mirror.Reflector or mirror.Informer does the same, with relists,
// backoff and indexes; this loop shows what the ListWatcher gives it.
func Example() {
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   []string{"127.0.0.1:2379"},
		DialTimeout: 5 * time.Second,
	})
	if err != nil {
		log.Fatal(err)
	}
	defer cli.Close()

	lw := etcd.NewTyped(cli, "/services/", func(_ string, v []byte) (Service, error) {
		var s Service
		err := json.Unmarshal(v, &s)
		return s, err
	}, etcd.Options{})
	ctx := context.Background()

	// List every page: all are at the revision of the first.
	services := make(map[string]Service)
	opts := mirror.ListOptions{Limit: 500}
	var rv string
	for {
		page, err := lw.List(ctx, opts)
		if err != nil {
			log.Fatal(err)
		}
		for _, o := range page.Items {
			services[o.Key] = o.Value
		}
		for _, err := range page.Skipped {
			log.Print(err) // a value that is not a Service
		}
		rv = page.ResourceVersion
		if page.Continue == "" {
			break
		}
		opts.Continue = page.Continue
	}
	fmt.Println(len(services), "services at revision", rv)

	// Watch the changes after the list.
	w, err := lw.Watch(ctx, mirror.WatchOptions{ResourceVersion: rv, Timeout: 5 * time.Minute})
	if err != nil {
		log.Fatal(err)
	}
	defer w.Stop()
	for {
		ev, err := w.Next(ctx)
		switch {
		case errors.Is(err, io.EOF):
			return // the timeout: watch again from the last revision
		case errors.Is(err, mirror.ErrExpired):
			return // compacted: list again
		case err != nil:
			log.Fatal(err)
		}
		switch ev.Type {
		case mirror.EventAdded, mirror.EventModified:
			services[ev.Object.Key] = ev.Object.Value
		case mirror.EventDeleted:
			delete(services, ev.Object.Key)
		case mirror.EventError:
			log.Print(ev.Err) // a value that is not a Service
			if ev.KeyOnly {
				delete(services, ev.Object.Key) // what we held is out of date
			}
		}
	}
}
