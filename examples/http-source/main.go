// Command http-source mirrors a source of its own, neither etcd nor
// Kubernetes: the products of a catalog that an HTTP API serves with
// revisions (catalog.go; the program serves it itself, on loopback),
// read through a source.ListWatcher written for that API (source.go).
//
//	go run ./examples/http-source
//
// It fills the catalog, mirrors it into an informer, changes a few
// products, prints what the informer's handler is told, and exits.
//
// It behaves as every example does (see examples/internal/cli): --help
// exits 0 and a bad flag 2; the first sync must complete within
// --sync-timeout (30s by default), or the program says why and exits 1;
// Ctrl-C or SIGTERM is a normal stop: the program prints the summary so
// far and exits 0; --quiet prints only the summary and fatal errors.
package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/listwatch/mirror"
	"github.com/listwatch/mirror/examples/internal/cli"
	"github.com/listwatch/mirror/source"
)

func main() { cli.Main("http-source", run) }

func run(ctx context.Context, args []string, out io.Writer) error {
	var flags cli.Flags // --quiet, --sync-timeout, --duration: no others
	if err := cli.Parse(cli.NewFlagSet("http-source", "the demo's end", &flags), args, out); err != nil {
		return err
	}
	ctx, cancel := flags.Context(ctx) // --duration
	defer cancel()
	p := flags.Printer(out)

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

	inf := newInformer(&catalogSource{base: "http://" + ln.Addr().String(), client: &http.Client{}}, flags.Logger())
	ctx, stop := context.WithCancel(ctx)
	defer stop() // first: the informer stops before the server closes
	notes := make(chan string)
	note := func(format string, args ...any) {
		select {
		case notes <- fmt.Sprintf(format, args...):
		case <-ctx.Done():
		}
	}
	_, err = inf.AddEventHandler(mirror.HandlerFuncs[Product]{
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
			if ctx.Err() != nil { // interrupted: print no more
				return ctx.Err()
			}
			select {
			case s := <-notes:
				p.Printf("%s", s)
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		return nil
	}
	summary := func(r mirror.Reader[string, Product], version string) {
		names := r.ListKeys()
		slices.Sort(names)
		p.Summary("summary: %d products mirrored at revision %s: %v", len(names), version, names)
	}
	soFar := func() { summary(inf, inf.Freshness().ResourceVersion) }
	if err := flags.WaitForSync(ctx, p, inf, inf); err != nil {
		return flags.Finish(ctx, err, p, soFar)
	}
	if err := show(3); err != nil {
		return flags.Finish(ctx, err, p, soFar)
	}
	cat.set("bread", 275)
	cat.set("dates", 400)
	cat.remove("apple")
	if err := show(3); err != nil {
		return flags.Finish(ctx, err, p, soFar)
	}

	// A consistent read: every change the catalog made before it is in
	// what it returns, whether or not the handlers have heard of it yet.
	r, err := inf.Consistent(ctx, mirror.ConsistentOptions{})
	if err != nil {
		return flags.Finish(ctx, err, p, soFar)
	}
	summary(r, inf.Freshness().ResourceVersion)
	return nil
}

// newInformer returns an informer of the catalog's products, keyed by
// name. Their revision serves as their version, so that a relist reports
// only the products that changed.
func newInformer(src source.ListWatcher[Product], logger *slog.Logger) *mirror.Informer[string, Product] {
	return mirror.NewInformer(src, mirror.InformerOptions[string, Product]{
		Name:            "catalog",
		Logger:          logger, // nil: slog's default
		KeyFunc:         func(p Product) (string, error) { return p.Name, nil },
		ResourceVersion: func(p Product) string { return strconv.FormatInt(p.Revision, 10) },
	})
}

func price(p Product) string { return fmt.Sprintf("%d.%02d", p.Price/100, p.Price%100) }
