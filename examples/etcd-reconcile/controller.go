package main

import (
	"context"
	"strings"
	"sync"
	"time"

	"github.com/listwatch/mirror"
	etcdmirror "github.com/listwatch/mirror/adapters/etcd"
	"github.com/listwatch/mirror/reconcile"
	"github.com/listwatch/mirror/workqueue"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// controller is the informer over the prefix and the loop that renders
// its keys.
type controller struct {
	inf  *mirror.Informer[string, etcdmirror.Object[Service]]
	reg  *mirror.Registration
	loop *reconcile.Loop[string]
}

func newController(client *clientv3.Client, cfg config, p *printer) (*controller, error) {
	lw := etcdmirror.NewTyped(client, cfg.prefix, decodeService, etcdmirror.Options{RequestTimeout: 5 * time.Second})
	inf := etcdmirror.NewInformer(lw, etcdmirror.InformerOptions[Service]{
		Name: cfg.prefix,
		// A value that does not decode is reported here and its key
		// leaves the mirror: the loop removes its file.
		ErrorHandler: func(err error) { p.printf("reported: %v", err) },
	})
	r := &renderer{inf: inf, prefix: cfg.prefix, dir: cfg.out, p: p}
	loop := reconcile.New[string](r, reconcile.Options{
		Name:         "render",
		Workers:      cfg.workers,
		ErrorHandler: func(err error) { p.printf("reconcile: %v", err) },
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
	return &controller{inf: inf, reg: reg, loop: loop}, nil
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
