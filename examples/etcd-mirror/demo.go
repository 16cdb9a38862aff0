package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

var zones = []string{"eu-west", "eu-north", "us-east", "ap-south"}

// demoWriter writes demo data into the embedded etcd.
type demoWriter struct {
	client *clientv3.Client
	prefix string
	live   []string // keys that exist
	next   int      // next new service number
}

func (d *demoWriter) put(ctx context.Context, name string, rng *rand.Rand) (int64, error) {
	v, _ := json.Marshal(Service{Name: name, Zone: zones[rng.IntN(len(zones))], Port: 1024 + rng.IntN(60000)})
	resp, err := d.client.Put(ctx, d.prefix+name, string(v))
	if err != nil {
		return 0, fmt.Errorf("demo put: %w", err)
	}
	return resp.Header.Revision, nil
}

// seed writes n services, many per transaction.
func (d *demoWriter) seed(ctx context.Context, n int) error {
	rng := rand.New(rand.NewPCG(1, 2))
	const perTxn = 100
	for d.next < n {
		var ops []clientv3.Op
		for ; d.next < n && len(ops) < perTxn; d.next++ {
			name := fmt.Sprintf("svc-%05d", d.next)
			v, _ := json.Marshal(Service{Name: name, Zone: zones[rng.IntN(len(zones))], Port: 1024 + rng.IntN(60000)})
			ops = append(ops, clientv3.OpPut(d.prefix+name, string(v)))
			d.live = append(d.live, name)
		}
		if _, err := d.client.Txn(ctx).Then(ops...).Commit(); err != nil {
			return fmt.Errorf("demo seed: %w", err)
		}
	}
	return nil
}

// run writes n changes (creates, updates, deletes, one undecodable value
// and a compaction halfway) and returns the last revision written.
func (d *demoWriter) run(ctx context.Context, n int, p *printer) (int64, error) {
	rng := rand.New(rand.NewPCG(3, 4))
	var rev int64
	var err error
	for i := range n {
		switch {
		case i == n/3:
			resp, err := d.client.Put(ctx, d.prefix+"broken", "{not json")
			if err != nil {
				return 0, fmt.Errorf("demo put: %w", err)
			}
			rev = resp.Header.Revision
			p.event("wrote  %sbroken = {not json  (the mirror reports it and skips it)", d.prefix)
		case i == n/2:
			if _, err := d.client.Compact(ctx, rev); err != nil {
				return 0, fmt.Errorf("demo compact: %w", err)
			}
			p.event("compacted etcd at revision %d", rev)
		case rng.IntN(4) == 0 && len(d.live) > 0:
			j := rng.IntN(len(d.live))
			name := d.live[j]
			d.live[j] = d.live[len(d.live)-1]
			d.live = d.live[:len(d.live)-1]
			resp, err := d.client.Delete(ctx, d.prefix+name)
			if err != nil {
				return 0, fmt.Errorf("demo delete: %w", err)
			}
			rev = resp.Header.Revision
		case rng.IntN(3) == 0:
			name := fmt.Sprintf("svc-%05d", d.next)
			d.next++
			d.live = append(d.live, name)
			if rev, err = d.put(ctx, name, rng); err != nil {
				return 0, err
			}
		default:
			if len(d.live) == 0 {
				continue
			}
			if rev, err = d.put(ctx, d.live[rng.IntN(len(d.live))], rng); err != nil {
				return 0, err
			}
		}
		if i%50 == 49 {
			// A breath now and then, so the stream looks like traffic.
			time.Sleep(5 * time.Millisecond)
		}
	}
	return rev, nil
}
