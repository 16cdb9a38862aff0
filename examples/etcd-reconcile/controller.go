package main

import (
	"context"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/listwatch/mirror"
	etcdmirror "github.com/listwatch/mirror/adapters/etcd"
	"github.com/listwatch/mirror/examples/internal/cli"
	"github.com/listwatch/mirror/reconcile"
	"github.com/listwatch/mirror/workqueue"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// controller is the informer over the prefix and the loop that renders
// its keys.
type controller struct {
	inf    *mirror.Informer[string, etcdmirror.Object[Service]]
	reg    *mirror.Registration
	loop   *reconcile.Loop[string]
	r      *renderer
	p      *cli.Printer
	errors atomic.Int64 // reported, for the summary
}

func newController(client *clientv3.Client, cfg config, p *cli.Printer) (*controller, error) {
	c := &controller{p: p}
	lw := etcdmirror.NewTyped(client, cfg.prefix, decodeService, etcdmirror.Options{RequestTimeout: requestTimeout})
	inf := etcdmirror.NewInformer(lw, etcdmirror.InformerOptions[Service]{
		Name:   cfg.prefix,
		Logger: cfg.Logger(), // nil, slog's default, unless --quiet
		// A value that does not decode is reported here and its key
		// leaves the mirror: the loop removes its file.
		ErrorHandler: func(err error) { c.report("reported: %v", err) },
	})
	r := &renderer{inf: inf, prefix: cfg.prefix, dir: cfg.out, p: p}
	loop := reconcile.New[string](r, reconcile.Options{
		Name:         "render",
		Workers:      cfg.workers,
		Logger:       cfg.Logger(),
		ErrorHandler: func(err error) { c.report("reconcile: %v", err) },
	})
	reg, err := reconcile.Watch(loop, inf, mirror.HandlerOptions{})
	if err != nil {
		return nil, err
	}
	// The files already there whose keys may have gone while nobody
	// watched: reconciled too, as background work.
	files, err := rendered(cfg.out)
	if err != nil {
		return nil, err
	}
	for name := range files {
		loop.Queue().AddWithPriority(cfg.prefix+strings.TrimSuffix(name, confSuffix), workqueue.PriorityBackground)
	}
	c.inf, c.reg, c.loop, c.r = inf, reg, loop, r
	return c, nil
}

func (c *controller) report(format string, err error) {
	c.errors.Add(1)
	c.p.Printf(format, err)
}

// summary prints the files there are and what the loop did.
func (c *controller) summary() {
	files, err := rendered(c.r.dir)
	if err != nil {
		c.p.Summary("summary: %v", err)
		return
	}
	c.p.Summary("summary: %v in %s; %d written, %d removed; %d errors reported",
		slices.Sorted(maps.Keys(files)), c.r.dir, c.r.written.Load(), c.r.removed.Load(), c.errors.Load())
}

// start runs the informer and the loop, on one context, until ctx ends or
// the function it returns is called; that function returns once the
// loop's workers have stopped, its handler is removed and the informer
// has stopped.
func (c *controller) start(ctx context.Context) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { _ = c.inf.Run(ctx) }) // an error only for a second Run
	// Its error, an informer refused for good, is WaitForSync's too.
	wg.Go(func() { _ = c.loop.Run(ctx) })
	return func() {
		cancel()
		wg.Wait()
	}
}
