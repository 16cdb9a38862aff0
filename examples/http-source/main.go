// Command http-source mirrors a source of its own, neither etcd nor
// Kubernetes: the products of a catalog that an HTTP API serves with
// revisions (catalog.go; the program serves it itself, on loopback),
// read through a mirror.ListWatcher written for that API (source.go).
//
//	go run ./examples/http-source
//
// It fills the catalog, mirrors it into an informer, changes a few
// products, prints what the informer's handler is told, and exits.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/listwatch/mirror"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "http-source:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, out io.Writer) error {
	cat := newCatalog(1000)
	cat.set("apple", 120)
	cat.set("bread", 250)
	cat.set("cheese", 900)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: cat, ReadHeaderTimeout: 10 * time.Second}
	var wg sync.WaitGroup
	defer wg.Wait()
	defer srv.Close()
	wg.Go(func() { _ = srv.Serve(ln) })

	inf := newInformer(&source{base: "http://" + ln.Addr().String(), client: &http.Client{}})
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // first: the informer stops before the server closes
	notes := make(chan string)
	note := func(format string, args ...any) {
		select {
		case notes <- fmt.Sprintf(format, args...):
		case <-ctx.Done():
		}
	}
	reg, err := inf.AddEventHandler(mirror.HandlerFuncs[Product]{
		AddFunc: func(p Product, initial bool) {
			note("add    %-6s %s (initial list: %t)", p.Name, price(p), initial)
		},
		UpdateFunc: func(old, p Product) {
			note("update %-6s %s -> %s", p.Name, price(old), price(p))
		},
		DeleteFunc: func(p Product, finalStateUnknown bool) {
			note("delete %-6s last %s (final state unknown: %t)", p.Name, price(p), finalStateUnknown)
		},
	}, mirror.HandlerOptions{})
	if err != nil {
		return err
	}
	wg.Go(func() { _ = inf.Run(ctx) })

	// Each change is printed as the handler hears of it.
	show := func(n int) error {
		for range n {
			select {
			case s := <-notes:
				fmt.Fprintln(out, s)
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		return nil
	}
	if err := show(3); err != nil {
		return interrupted(err)
	}
	if err := mirror.WaitForCacheSync(ctx, reg); err != nil {
		return interrupted(err)
	}
	cat.set("bread", 275)
	cat.set("dates", 400)
	cat.remove("apple")
	if err := show(3); err != nil {
		return interrupted(err)
	}

	// A consistent read: every change the catalog made before it is in
	// what it returns, whether or not the handlers have heard of it yet.
	r, err := inf.Consistent(ctx, mirror.ConsistentOptions{})
	if err != nil {
		return interrupted(err)
	}
	names := r.ListKeys()
	slices.Sort(names)
	fmt.Fprintln(out, "mirrored at revision", inf.Freshness().ResourceVersion+":", names)
	return nil
}

// newInformer returns an informer of the catalog's products, keyed by
// name. Their revision serves as their version, so that a relist reports
// only the products that changed.
func newInformer(src mirror.ListWatcher[Product]) *mirror.Informer[string, Product] {
	return mirror.NewInformer(src, mirror.InformerOptions[string, Product]{
		Name:            "catalog",
		KeyFunc:         func(p Product) (string, error) { return p.Name, nil },
		ResourceVersion: func(p Product) string { return strconv.FormatInt(p.Revision, 10) },
	})
}

// interrupted returns nil for an interrupted run (Ctrl-C), which is no
// failure, and err otherwise.
func interrupted(err error) error {
	if errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}

func price(p Product) string { return fmt.Sprintf("%d.%02d", p.Price/100, p.Price%100) }
