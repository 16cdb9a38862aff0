package bench

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"sync"

	"github.com/listwatch/mirror/source"
)

// Generator is a source.ListWatcher over a fixed set of objects that it
// makes afresh on every List, as a client decoding a server's answer
// would, and keeps no reference to: whatever holds them after a list is
// the consumer. Its watches carry no events; they end when stopped or
// when their context ends. Every object and list is at resource version
// "1".
type Generator struct {
	// Namespace and Names are the objects' identities, in list order.
	Namespace string
	Names     []string
}

// List implements source.ListWatcher: the page after opts.Continue (an
// offset), of at most opts.Limit objects.
func (g *Generator) List(ctx context.Context, opts source.ListOptions) (source.ListResult[*Obj], error) {
	var res source.ListResult[*Obj]
	if err := ctx.Err(); err != nil {
		return res, err
	}
	start := 0
	if opts.Continue != "" {
		var err error
		if start, err = strconv.Atoi(opts.Continue); err != nil || start < 0 || start > len(g.Names) {
			return res, fmt.Errorf("generator: bad continue token %q", opts.Continue)
		}
	}
	end := len(g.Names)
	if opts.Limit > 0 && int64(end-start) > opts.Limit {
		end = start + int(opts.Limit)
	}
	res.Items = make([]*Obj, end-start)
	for i := range res.Items {
		res.Items[i] = &Obj{Namespace: g.Namespace, Name: g.Names[start+i], ResourceVersion: "1"}
	}
	res.ResourceVersion = "1"
	if end < len(g.Names) {
		res.Continue = strconv.Itoa(end)
	}
	return res, nil
}

// Watch implements source.ListWatcher with a stream that has no events.
func (g *Generator) Watch(ctx context.Context, _ source.WatchOptions) (source.Watcher[*Obj], error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return &idleWatch{stopped: make(chan struct{})}, nil
}

// idleWatch is a watch stream that only ends.
type idleWatch struct {
	stopped chan struct{}
	once    sync.Once
}

func (w *idleWatch) Next(ctx context.Context) (source.Event[*Obj], error) {
	select {
	case <-w.stopped:
		return source.Event[*Obj]{}, io.EOF
	case <-ctx.Done():
		return source.Event[*Obj]{}, ctx.Err()
	}
}

func (w *idleWatch) Stop() { w.once.Do(func() { close(w.stopped) }) }
