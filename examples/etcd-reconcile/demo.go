package main

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"strings"
	"time"

	"github.com/listwatch/mirror/examples/internal/cli"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// demoWriter writes the demo's services into the embedded etcd.
type demoWriter struct {
	client *clientv3.Client
	prefix string
	p      *cli.Printer
}

func (d *demoWriter) put(ctx context.Context, name string, s Service) error {
	v, _ := json.Marshal(s)
	return d.putRaw(ctx, name, string(v))
}

func (d *demoWriter) putRaw(ctx context.Context, name, value string) error {
	d.p.Printf("etcd:   put    %s%s = %s", d.prefix, name, value)
	if _, err := d.client.Put(ctx, d.prefix+name, value); err != nil {
		return fmt.Errorf("demo put: %w", err)
	}
	return nil
}

func (d *demoWriter) delete(ctx context.Context, name string) error {
	d.p.Printf("etcd:   delete %s%s", d.prefix, name)
	if _, err := d.client.Delete(ctx, d.prefix+name); err != nil {
		return fmt.Errorf("demo delete: %w", err)
	}
	return nil
}

// seed writes the services there are before the controller starts.
func (d *demoWriter) seed(ctx context.Context) error {
	for _, s := range []struct {
		name string
		Service
	}{
		{"api", Service{Zone: "eu-west", Port: 443}},
		{"db", Service{Zone: "eu-west", Port: 5432}},
		{"cache", Service{Zone: "us-east", Port: 6379}},
		{"web", Service{Zone: "us-east", Port: 8080}},
	} {
		if err := d.put(ctx, s.name, s.Service); err != nil {
			return err
		}
	}
	return nil
}

// run waits for the files of the initial list, then changes one service,
// adds one, deletes one and breaks one (a value that does not decode: the
// mirror drops the key), and waits for the files to follow each time.
func (d *demoWriter) run(ctx context.Context, cfg config) error {
	if err := d.inStep(ctx, cfg); err != nil {
		return err
	}
	for _, change := range []func() error{
		func() error { return d.put(ctx, "api", Service{Zone: "us-east", Port: 8443}) },
		func() error { return d.put(ctx, "search", Service{Zone: "ap-south", Port: 9200}) },
		func() error { return d.delete(ctx, "cache") },
		func() error { return d.putRaw(ctx, "web", "{not json") },
	} {
		if err := change(); err != nil {
			return err
		}
		if err := d.inStep(ctx, cfg); err != nil {
			return err
		}
	}
	return nil
}

// inStep waits until the files in cfg.out are what etcd's prefix renders
// to, at most cfg.timeout, and says at which revision they matched.
func (d *demoWriter) inStep(ctx context.Context, cfg config) error {
	ctx, cancel := context.WithTimeout(ctx, cfg.timeout)
	defer cancel()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		want, rev, err := expected(ctx, d.client, cfg.prefix)
		if err != nil {
			return err
		}
		got, err := rendered(cfg.out)
		if err != nil {
			return err
		}
		if maps.Equal(want, got) {
			d.p.Printf("verified: %s matches etcd at revision %d (%d files)", cfg.out, rev, len(got))
			return nil
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			return fmt.Errorf("verify: %s does not match etcd after %v: %d files, want %d: %w", cfg.out, cfg.timeout, len(got), len(want), ctx.Err())
		}
	}
}

// expected reads prefix straight from etcd and returns the files it
// renders to, leaving out the values that do not decode and the names
// that cannot name a file, as the controller does, and etcd's revision.
func expected(ctx context.Context, client *clientv3.Client, prefix string) (map[string]string, int64, error) {
	resp, err := client.Get(ctx, prefix, clientv3.WithPrefix())
	if err != nil {
		return nil, 0, fmt.Errorf("verify: %w", err)
	}
	r := &renderer{prefix: prefix}
	files := map[string]string{}
	for _, kv := range resp.Kvs {
		s, err := decodeService(string(kv.Key), kv.Value)
		if err != nil {
			continue
		}
		if _, err := r.fileName(string(kv.Key)); err != nil {
			continue
		}
		name := strings.TrimPrefix(string(kv.Key), prefix)
		files[name+confSuffix] = render(name, s, kv.ModRevision)
	}
	return files, resp.Header.Revision, nil
}
